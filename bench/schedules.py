"""Schedules: many schedules due in the same second, fired by the schedule sweep.

    python -m bench.schedules                         # SQLite, one engine in this process
    python -m bench.schedules --store postgresql://postgres@127.0.0.1:5432/postgres   # + 3 serve processes
    python -m bench.schedules --schedules 1000 --every 10 --json /tmp/schedules.json --plain
    python -m bench.schedules --runtime [--tenants 100000]   # runtime schedules: see bench/schedules_runtime.py

``--schedules`` schedules of one trivial workflow share ``every=--every`` seconds, so each
multiple of it is a slot of every one of them. The benchmark waits until every schedule is
registered, then reads the firing ledger of the next such slot: how long after the slot all
of them were started through the gate, how long the firing itself took (first claim to last
start: firings/s), and each firing's lag behind its slot, at its claim and at its start (p50,
p99). A tick reaches a slot up to one sweep interval (0.5 s) after it: that is in every lag.

On PostgreSQL ``--workers`` ``lockgate serve bench.schedules:app`` processes share a scratch
database (dropped afterwards); one of them holds the sweep's lease at a time, and the unique
claim per slot keeps every firing single (``dupes`` counts slots claimed twice: always 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .core import HERE, _create_database, _drop_databases
from .report import Cell, machine, print_table, write_json
from .signals import sigterm_cancels

__all__ = ["app", "build_app", "main"]

COUNT_ENV = "LOCKGATE_BENCH_SCHEDULES"
EVERY_ENV = "LOCKGATE_BENCH_EVERY"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


class Tick(BaseModel):
    n: int
    at: str


def build_app(count: int, every: int) -> lg.App:
    """``count`` schedules of one workflow, all due at each multiple of ``every`` seconds."""
    bench_app = lg.App("bench-schedules")

    @bench_app.workflow(name="bench.tick")
    async def tick(ctx: lg.Context, p: Tick) -> int:
        return p.n

    for n in range(count):

        def payload(at: datetime, n: int = n) -> dict[str, Any]:
            return {"n": n, "at": at.isoformat()}

        bench_app.schedule(f"bench-{n:05d}", workflow=tick, every=every, payload=payload)
    return bench_app


# What ``lockgate serve bench.schedules:app`` serves (the worker processes read the sizes from the environment).
app = build_app(int(os.environ.get(COUNT_ENV, "1000")), int(os.environ.get(EVERY_ENV, "10")))


class Ledger:
    """Direct SQL on the benchmark's database (reads only)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def fetch(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite:"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            try:
                return list(conn.execute(query.replace("%s", "?"), params))
            finally:
                conn.close()
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as pg:
            cursor = await pg.execute(query, params or None)
            return list(await cursor.fetchall())


async def measure(url: str, count: int, every: int, timeout: float) -> dict[str, Any]:
    """Wait for the next common slot once every schedule is registered; the figures of its firings."""
    ledger = Ledger(url)

    async def registered() -> int:
        rows = await ledger.fetch("SELECT COUNT(*) FROM lockgate_schedules")
        return int(rows[0][0])

    deadline = time.time() + timeout
    while await registered() < count:
        if time.time() > deadline:
            raise TimeoutError("schedules not registered in time")
        await asyncio.sleep(0.2)
    slot = (int(time.time() + 0.5) // every + 1) * every
    await asyncio.sleep(max(0.0, slot - time.time()))
    query = (
        "SELECT claimed_at, started_at, status FROM lockgate_schedule_firings "
        "WHERE scheduled_at = %s AND manual = 0 AND started_at IS NOT NULL"
    )
    rows: list[tuple[Any, ...]] = []
    while time.time() < slot + timeout:
        rows = await ledger.fetch(query, float(slot))
        if len(rows) >= count:
            break
        await asyncio.sleep(0.05)
    claims = sorted(float(r[0]) - slot for r in rows)
    starts = sorted(float(r[1]) - slot for r in rows)
    dupes = await ledger.fetch(
        "SELECT COUNT(*) FROM (SELECT schedule FROM lockgate_schedule_firings WHERE scheduled_at = %s "
        "AND manual = 0 GROUP BY schedule HAVING COUNT(*) > 1) d",
        float(slot),
    )
    all_in = starts[-1] if starts else None
    busy = (starts[-1] - claims[0]) if starts and claims else None  # first claim to last start: the firing work
    return {
        "schedules": count,
        "fired": len(rows),
        "skipped_or_failed": sum(1 for r in rows if r[2] not in ("started", "succeeded")),
        "duplicates": int(dupes[0][0]),
        "all_fired_after_s": all_in,
        "firing_s": busy,
        "firings_per_s": (len(rows) / busy) if busy else None,
        "claim_lag_p50_s": _pct(claims, 50),
        "claim_lag_p99_s": _pct(claims, 99),
        "start_lag_p50_s": _pct(starts, 50),
        "start_lag_p99_s": _pct(starts, 99),
    }


def _pct(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


async def on_sqlite(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    url = f"sqlite:///{folder}/schedules.db"
    async with lg.Engine(build_app(args.schedules, args.every), url, retention=None):
        result = await measure(url, args.schedules, args.every, args.timeout)
    return {"store": "sqlite", "processes": 1, **result}


async def on_postgres(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parent))  # the worker harness lives with the cluster tests
    from tests.cluster.harness import Cluster

    created: list[str] = []
    url = _create_database(args.store, created)
    os.environ[COUNT_ENV], os.environ[EVERY_ENV] = str(args.schedules), str(args.every)
    try:
        async with lg.Client(build_app(0, args.every), url):  # migrates the scratch database
            pass
        cluster = Cluster(url, folder)
        await cluster.setup()
        cluster.spawn(args.workers, lease="2s", max_runs=200, app="bench.schedules:app")
        with sigterm_cancels():
            try:
                await cluster.ready(timeout=120)
                result = await measure(url, args.schedules, args.every, args.timeout)
            finally:
                await cluster.close()
    finally:
        _drop_databases(args.store, created)
    return {"store": "postgres", "processes": args.workers, **result}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="a PostgreSQL server URL (a scratch database is used); default: SQLite")
    parser.add_argument("--schedules", type=int, default=1000, help="schedules due in the same second")
    parser.add_argument("--every", type=int, default=10, help="their common interval, in seconds")
    parser.add_argument("--workers", type=int, default=3, help="PostgreSQL: lockgate serve processes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every firing")
    parser.add_argument("--json", help="where to write the JSON (default bench/results/schedules-<store>.json)")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    runtime = parser.add_argument_group("runtime schedules (--runtime)")
    runtime.add_argument("--runtime", action="store_true", help="the runtime case (bench/schedules_runtime.py)")
    runtime.add_argument("--tenants", type=int, default=100_000, help="idle runtime schedules, one per tenant")
    runtime.add_argument("--due", type=int, default=1000, help="runtime schedules due in the same second")
    runtime.add_argument("--parallel", type=int, default=256, help="concurrent create calls")
    runtime.add_argument("--ticks", type=int, default=20, help="sweep ticks timed, before and after creating")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.runtime:
        return _main_runtime(args)
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-") as tmp:
        folder = Path(tmp)
        runner = on_postgres if args.store else on_sqlite
        with contextlib.suppress(KeyboardInterrupt):
            result = asyncio.run(runner(args, folder))
    headers = ["store", "processes", "schedules", "fired", "dupes", "all fired (s)", "firing (s)", "firings/s"]
    headers += ["claim lag p50 (s)", "claim lag p99 (s)", "start lag p50 (s)", "start lag p99 (s)"]
    row: list[Cell] = [
        result["store"],
        result["processes"],
        result["schedules"],
        result["fired"],
        result["duplicates"],
        result["all_fired_after_s"],
        result["firing_s"],
        result["firings_per_s"],
        result["claim_lag_p50_s"],
        result["claim_lag_p99_s"],
        result["start_lag_p50_s"],
        result["start_lag_p99_s"],
    ]
    print_table("schedules due in the same second", headers, [row], plain=args.plain)
    path = args.json or HERE / "results" / f"schedules-{result['store']}.json"
    write_json(path, {"machine": machine(), "args": vars(args), "result": result})
    return 0 if result["fired"] == result["schedules"] and not result["duplicates"] else 1


def _main_runtime(args: argparse.Namespace) -> int:
    from . import schedules_runtime as runtime

    with tempfile.TemporaryDirectory(prefix="lockgate-bench-") as tmp:
        result = asyncio.run(runtime.run_runtime(args, Path(tmp)))
    load = os.getloadavg()
    result["load_average"] = [round(x, 2) for x in load]
    print_table("runtime schedules", runtime.HEADERS, [runtime.row_of(result)], plain=args.plain)
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    path = args.json or HERE / "results" / f"schedules-runtime-{result['store']}.json"
    write_json(path, {"machine": machine(), "args": vars(args), "result": result})
    return 0 if result["due_fired"] == result["due_schedules"] and not result["due_duplicates"] else 1


if __name__ == "__main__":
    sys.exit(main())
