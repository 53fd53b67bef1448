"""The raw floor: how fast the database itself commits one row at a time.

Every lockgate figure is read against this: a step cannot be durable faster than one
commit of the store it lives in. The SQLite floor uses the store's own pragmas (WAL,
the same ``synchronous`` level, the same busy timeout) on a file on the same disk;
the Postgres floor inserts one row per transaction on the same server. Beside it,
``postgres_floor_async`` runs the same loop through psycopg's asyncio connection, the
driver an asyncio engine talks through: what one round trip costs before any engine work.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Floor", "postgres_floor", "postgres_floor_async", "sqlite_floor"]


@dataclass(frozen=True)
class Floor:
    """One floor measurement: ``commits`` one-row commits in ``seconds``."""

    store: str
    mode: str
    commits: int
    seconds: float

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.seconds

    @property
    def us_per_commit(self) -> float:
        return self.seconds / self.commits * 1e6

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "commits_per_s": self.commits_per_s, "us_per_commit": self.us_per_commit}


def sqlite_floor(path: str, synchronous: str, *, seconds: float = 1.0, max_commits: int = 50_000) -> Floor:
    """One-row ``INSERT`` + ``COMMIT`` in a loop on a fresh file at ``path`` for about ``seconds``."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, at REAL NOT NULL, data TEXT NOT NULL)")
        data = "x" * 64
        for _ in range(50):  # warm the page cache and the WAL file
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (at, data) VALUES (?, ?)", (time.time(), data))
            conn.execute("COMMIT")
        commits = 0
        start = time.perf_counter()
        deadline = start + seconds
        while commits < max_commits:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (at, data) VALUES (?, ?)", (time.time(), data))
            conn.execute("COMMIT")
            commits += 1
            if commits % 64 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return Floor("sqlite", synchronous.lower(), commits, elapsed)


def postgres_floor(url: str, *, seconds: float = 1.0, max_commits: int = 50_000) -> Floor:
    """One-row ``INSERT`` per transaction (autocommit) on the server at ``url`` for about ``seconds``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS lockgate_bench_floor")
        conn.execute(
            "CREATE TABLE lockgate_bench_floor (id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, data TEXT)"
        )
        try:
            data = "x" * 64
            for _ in range(50):
                conn.execute("INSERT INTO lockgate_bench_floor (at, data) VALUES (%s, %s)", (time.time(), data))
            commits = 0
            start = time.perf_counter()
            deadline = start + seconds
            while commits < max_commits:
                conn.execute("INSERT INTO lockgate_bench_floor (at, data) VALUES (%s, %s)", (time.time(), data))
                commits += 1
                if commits % 64 == 0 and time.perf_counter() >= deadline:
                    break
            elapsed = time.perf_counter() - start
        finally:
            conn.execute("DROP TABLE IF EXISTS lockgate_bench_floor")
    return Floor("postgres", "default", commits, elapsed)


async def postgres_floor_async(url: str, *, seconds: float = 1.0, max_commits: int = 50_000) -> Floor:
    """``postgres_floor`` through psycopg's asyncio connection (the floor of any asyncio caller)."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await conn.execute("DROP TABLE IF EXISTS lockgate_bench_floor_async")
        await conn.execute(
            "CREATE TABLE lockgate_bench_floor_async "
            "(id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, data TEXT)"
        )
        sql = "INSERT INTO lockgate_bench_floor_async (at, data) VALUES (%s, %s)"
        data = "x" * 64
        for _ in range(50):
            await conn.execute(sql, (time.time(), data))
        commits = 0
        start = time.perf_counter()
        deadline = start + seconds
        while commits < max_commits:
            await conn.execute(sql, (time.time(), data))
            commits += 1
            if commits % 64 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - start
        await conn.execute("DROP TABLE IF EXISTS lockgate_bench_floor_async")
    finally:
        await conn.close()
    return Floor("postgres", "asyncio", commits, elapsed)
