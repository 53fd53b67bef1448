"""Probes for gate tests: SQL on the test store, ledger/slot reads, an in-flight counter.

``sql`` opens its own connection to the store the engine uses (a SQLite file or a
PostgreSQL database), so a test can read the gate's tables, or break them on purpose,
the way an operator with a database shell would. Queries use ``?`` placeholders.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any

from lockgate import Client
from lockgate.store.base import Row, Tx
from lockgate.store.sqlite import SQLiteStore

__all__ = ["InFlight", "ledger_rows", "pending_rows", "slot_rows", "sql"]


async def sql(url: str, query: str, *params: Any) -> list[Row]:
    """Run one statement on the store at ``url`` in its own autocommit connection; rows as dicts."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(SQLiteStore(url).path, isolation_level=None, timeout=10)
        conn.row_factory = lambda cur, row: {d[0]: v for d, v in zip(cur.description, row, strict=True)}
        try:
            return list(conn.execute(query, params).fetchall())
        finally:
            conn.close()
    import psycopg
    from psycopg.rows import dict_row

    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as pg:
        cursor = await pg.execute(query.replace("?", "%s"), params)
        return list(await cursor.fetchall()) if cursor.description is not None else []


async def _ledger_for_ticket(tx: Tx, ticket: str) -> list[Row]:
    return await tx.execute("ledger_for_ticket", {"ticket": ticket})


async def ledger_rows(client: Client, ticket: str) -> list[Row]:
    """The ledger rows written for one arrival's ticket, oldest first."""
    return await client.store.read(_ledger_for_ticket, ticket)


async def slot_rows(url: str) -> list[Row]:
    """Every concurrency slot held now."""
    return await sql(url, "SELECT run_id, scope, key, workflow, expires_at FROM lockgate_slots ORDER BY run_id")


async def pending_rows(url: str) -> list[Row]:
    """Every parked start, in arrival order."""
    return await sql(url, "SELECT * FROM lockgate_pending ORDER BY seq")


class InFlight:
    """Counts bodies between their ``enter`` and ``leave`` steps per group, and the peak per group.

    The steps are ``async`` so they run on the event loop (a sync step would run in a thread).
    """

    def __init__(self) -> None:
        self.live: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.entered: Counter[str] = Counter()

    async def enter(self, *groups: str) -> None:
        for g in groups:
            self.live[g] += 1
            self.entered[g] += 1
            self.peak[g] = max(self.peak[g], self.live[g])

    async def leave(self, *groups: str) -> None:
        for g in groups:
            self.live[g] -= 1
