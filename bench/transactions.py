"""Case (f) of ``bench.core``: a start written in the application's own transaction.

Each application transaction inserts one row of its own (an order) and starts one
workflow. Two ways, alternating one transaction each so that both see the same machine:

- *joined*: ``BEGIN; INSERT; await engine.start(..., conn=app_conn); COMMIT`` — one commit,
  and the start exists if and only if it commits;
- *separate*: ``BEGIN; INSERT; COMMIT`` then ``await engine.start(...)`` — the application's
  commit, then the engine's group commit (and a crash between the two loses the start).

Transactions per second and latency (mean, p50, p99) of each, from the application's side.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psycopg

import lockgate as lg

__all__ = ["Figures", "measure"]

_ORDERS = "CREATE TABLE IF NOT EXISTS bench_orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"


@dataclass
class Figures:
    """Per way (``joined``, ``separate``): seconds each transaction took, start included."""

    joined: list[float]
    separate: list[float]
    cpu_s: float

    def per_s(self, way: str) -> float:
        return len(self._of(way)) / sum(self._of(way))

    def mean_ms(self, way: str) -> float:
        return statistics.fmean(self._of(way)) * 1e3

    def pct_ms(self, way: str, pct: float) -> float:
        values = sorted(self._of(way))
        return values[min(len(values) - 1, max(0, round(pct / 100 * len(values)) - 1))] * 1e3

    def _of(self, way: str) -> list[float]:
        return self.joined if way == "joined" else self.separate


class _AppConnection:
    """The application's own connection to the store's database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lite: sqlite3.Connection | None = None
        self.pg: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> None:
        if self.url.startswith("sqlite"):
            path, _, query = self.url.removeprefix("sqlite:///").partition("?")
            self.lite = sqlite3.connect(path)
            # The store's own durability, so that both ways pay for the same commit.
            self.lite.execute(f"PRAGMA synchronous = {'NORMAL' if 'normal' in query else 'FULL'}")
            self.lite.execute(_ORDERS)
            self.lite.commit()
        else:
            self.pg = await psycopg.AsyncConnection.connect(self.url)
            await self.pg.execute(_ORDERS)
            await self.pg.commit()

    @property
    def conn(self) -> Any:
        return self.lite if self.lite is not None else self.pg

    async def insert(self, i: int) -> None:
        if self.lite is not None:
            self.lite.execute("INSERT INTO bench_orders (id, note) VALUES (?, 'order')", (i,))
        else:
            assert self.pg is not None
            await self.pg.execute("INSERT INTO bench_orders (id, note) VALUES (%s, 'order')", (i,))

    async def commit(self) -> None:
        if self.lite is not None:
            self.lite.commit()
        else:
            assert self.pg is not None
            await self.pg.commit()

    async def close(self) -> None:
        if self.lite is not None:
            self.lite.close()
        if self.pg is not None:
            await self.pg.close()


async def measure(engine: lg.Engine, url: str, workflow: str, n: int) -> Figures:
    """``n`` transactions each way, alternating, on ``engine`` (open, on ``url``) starting ``workflow``."""
    app = _AppConnection(url)
    await app.open()
    joined: list[float] = []
    separate: list[float] = []
    try:
        for i in range(20):  # warm-up: both ways, prepared statements and caches
            await _joined(engine, app, workflow, -2 * i - 1)
            await _separate(engine, app, workflow, -2 * i - 2)
        cpu = time.process_time()
        for i in range(n):
            joined.append(await _joined(engine, app, workflow, 2 * i))
            separate.append(await _separate(engine, app, workflow, 2 * i + 1))
        cpu = time.process_time() - cpu
    finally:
        await app.close()
    return Figures(joined, separate, cpu)


async def _joined(engine: lg.Engine, app: _AppConnection, workflow: str, i: int) -> float:
    started = time.perf_counter()
    await app.insert(i)
    await engine.start(workflow, {"i": i}, conn=app.conn)
    await app.commit()
    return time.perf_counter() - started


async def _separate(engine: lg.Engine, app: _AppConnection, workflow: str, i: int) -> float:
    started = time.perf_counter()
    await app.insert(i)
    await app.commit()
    await engine.start(workflow, {"i": i})
    return time.perf_counter() - started
