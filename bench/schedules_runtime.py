"""Runtime schedules at volume: one per tenant, created by calls (``python -m bench.schedules --runtime``).

    python -m bench.schedules --runtime                       # SQLite, 100,000 tenants
    python -m bench.schedules --runtime --tenants 20000 --store postgresql://postgres@127.0.0.1:5432/postgres

Four figures:

- **creation rate**: ``--tenants`` schedules created through ``client.schedules.create`` by
  ``--parallel`` concurrent callers (one row each, through the group commit). The tenants' schedules
  are daily crons spread over the minutes of the hours ahead, so none is due while the rest runs.
- **sweep cost per tick**: the time of one sweep tick that finds nothing due (median of
  ``--ticks``), before any schedule exists and once every tenant's exists, and the database's
  own time for the tick's read of the due schedules (PostgreSQL: ``EXPLAIN ANALYZE``; SQLite:
  the statement timed alone): equal when the tick reads only the schedules due. The tick's
  wall time on a busy machine is mostly waiting for the CPU.
- **firing lag**: ``--due`` more runtime schedules share one slot (``every=--every``); the lag of
  each firing behind its slot at its claim and at its start (p50, p99), as ``bench.schedules``
  measures declared ones. A tick reaches a slot up to one sweep interval (0.5 s) after it.
- **bytes per schedule**: what the schedules' table and its indexes grew by, per schedule.

On PostgreSQL ``--workers`` ``lockgate serve bench.schedules_runtime:app`` processes share a scratch
database; the schedules are created from this process.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import lockgate as lg
from lockgate.engine.firing import ScheduleRuntime
from lockgate.store.sql_files import load_queries
from lockgate.sweeps import schedules as sweep

from .core import HERE, _create_database, _drop_databases
from .schedules import Ledger, measure
from .signals import sigterm_cancels

__all__ = ["app", "run_runtime"]


class Digest(BaseModel):
    tenant: int
    at: str = ""


app = lg.App("bench-runtime-schedules")


@app.workflow(name="bench.digest")
async def digest(ctx: lg.Context, p: Digest) -> int:
    return p.tenant


async def _create_tenants(client: lg.Client, first: int, count: int, parallel: int) -> float:
    """Create ``count`` tenants' schedules from ``first``; the seconds it took."""
    hour = (datetime.now(UTC).hour + 2) % 24  # hours ahead: none of them is due during the run
    queue = iter(range(first, first + count))

    async def caller() -> None:
        for n in queue:
            cron = f"{n % 60} {(hour + n // 60 % 20) % 24} * * *"
            await client.schedules.create(f"tenant:{n:07d}", workflow="bench.digest", cron=cron, payload={"tenant": n})

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(parallel)))
    return time.perf_counter() - started


async def _tick_cost(rt: ScheduleRuntime, ticks: int) -> float:
    """Median seconds of a sweep tick that finds nothing due."""
    times = []
    for _ in range(ticks):
        started = time.perf_counter()
        await sweep.fire_due(rt)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def _due_read_ms(ledger: Ledger) -> float:
    """Milliseconds the database spends on the sweep's read of the due schedules (nothing due)."""
    dialect = "sqlite" if ledger.url.startswith("sqlite") else "postgres"
    sql = load_queries(dialect)["schedules_due"]
    now = time.time()
    if dialect == "sqlite":
        with sqlite3.connect(ledger.url.removeprefix("sqlite:///")) as conn:
            started = time.perf_counter()
            for _ in range(200):
                conn.execute(sql, {"now": now, "limit": 5000}).fetchall()
            return (time.perf_counter() - started) / 200 * 1000
    import psycopg

    async with await psycopg.AsyncConnection.connect(ledger.url, autocommit=True) as pg:
        times = []
        for _ in range(20):
            cursor = await pg.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, {"now": now, "limit": 5000})
            (plan,) = await cursor.fetchone()  # type: ignore[misc]
            times.append(float(plan[0]["Execution Time"]))
        return statistics.median(times)


async def _table_bytes(ledger: Ledger) -> int:
    if ledger.url.startswith("sqlite"):
        rows = await ledger.fetch(  # the table, its primary key and its indexes
            "SELECT SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m ON m.name = d.name "
            "WHERE m.tbl_name = 'lockgate_schedules'"
        )
    else:
        rows = await ledger.fetch("SELECT pg_total_relation_size('lockgate_schedules')")
    return int(rows[0][0] or 0)


async def _run(client: lg.Client, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rt = ScheduleRuntime(client.core.runtime, "bench")
    ledger = Ledger(url)
    empty_tick = await _tick_cost(rt, args.ticks)
    empty_read = await _due_read_ms(ledger)
    bytes_before = await _table_bytes(ledger)
    seconds = await _create_tenants(client, 0, args.tenants, args.parallel)
    bytes_after = await _table_bytes(ledger)
    full_tick = await _tick_cost(rt, args.ticks)
    full_read = await _due_read_ms(ledger)
    due_names = iter(range(args.due))

    async def due_caller() -> None:
        for n in due_names:
            await client.schedules.create(
                f"due:{n:05d}", workflow="bench.digest", every=args.every, payload={"tenant": n}
            )

    await asyncio.gather(*(due_caller() for _ in range(args.parallel)))
    lag = await measure(url, args.due, args.every, args.timeout)
    return {
        "tenants": args.tenants,
        "create_s": seconds,
        "creates_per_s": args.tenants / seconds,
        "tick_ms_empty": empty_tick * 1000,
        "tick_ms_full": full_tick * 1000,
        "due_read_ms_empty": empty_read,
        "due_read_ms_full": full_read,
        "bytes_per_schedule": (bytes_after - bytes_before) / max(1, args.tenants),
        **{f"due_{k}": v for k, v in lag.items()},
    }


async def on_sqlite(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    url = f"sqlite:///{folder}/runtime.db"
    async with lg.Engine(app, url, retention=None) as engine:
        result = await _run(engine.client, url, args)
    return {"store": "sqlite", "processes": 1, **result}


async def on_postgres(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parent))  # the worker harness lives with the cluster tests
    from tests.cluster.harness import Cluster

    created: list[str] = []
    url = _create_database(args.store, created)
    try:
        async with lg.Client(app, url) as client:  # migrates the scratch database
            cluster = Cluster(url, folder)
            await cluster.setup()
            cluster.spawn(args.workers, lease="2s", max_runs=200, app="bench.schedules_runtime:app")
            with sigterm_cancels():
                try:
                    await cluster.ready(timeout=120)
                    result = await _run(client, url, args)
                finally:
                    await cluster.close()
    finally:
        _drop_databases(args.store, created)
    return {"store": "postgres", "processes": args.workers, **result}


async def run_runtime(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The runtime case on the store ``args`` names."""
    return await (on_postgres if args.store else on_sqlite)(args, folder)


HEADERS = [
    "store",
    "processes",
    "tenants",
    "creates/s",
    "tick ms (0)",
    "tick ms (all)",
    "due read ms (0)",
    "due read ms (all)",
    "bytes/schedule",
    "due",
    "fired",
    "dupes",
    "claim lag p50 (s)",
    "claim lag p99 (s)",
    "start lag p50 (s)",
    "start lag p99 (s)",
]


def row_of(result: dict[str, Any]) -> list[Any]:
    keys = ["store", "processes", "tenants", "creates_per_s", "tick_ms_empty", "tick_ms_full"]
    keys += ["due_read_ms_empty", "due_read_ms_full", "bytes_per_schedule"]
    keys += ["due_schedules", "due_fired", "due_duplicates", "due_claim_lag_p50_s", "due_claim_lag_p99_s"]
    keys += ["due_start_lag_p50_s", "due_start_lag_p99_s"]
    return [result[k] for k in keys]
