"""How fast the dashboard's pages answer on a store with many runs.

    python -m bench.dashboard                       # 100,000 runs on a scratch SQLite file
    python -m bench.dashboard --runs 20000 --repeat 10
    python -m bench.dashboard --keep /tmp/dash.db   # seed once, reuse the file on later runs
    python -m bench.dashboard --store postgresql://postgres@127.0.0.1:5432/postgres   # a scratch database there

The store is seeded through a ``Client`` (runs of two workflows, no worker executes them),
then spread over 30 days and most marked finished, some failed, directly in the store, so that status
filters and dead letters have something to find. Each page is then requested ``--repeat``
times in process (``httpx`` over ASGI, no sockets): p50 and p95 in milliseconds. The goal is
every page under 200 ms; ``runs?q=`` searches text the store does not index yet, over a
bounded scan (docs/dashboard.md). The figures are also written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import create_app

from .report import machine, print_table, write_json

__all__ = ["main"]

SPAN = 30 * 86400.0


class Job(BaseModel):
    customer: str
    n: int


def build_app() -> lg.App:
    app = lg.App("bench-dashboard")

    @app.workflow(name="bench.charge")
    async def charge(ctx: lg.Context, p: Job) -> int:
        return p.n

    @app.workflow(name="bench.mail", debounce=lg.Debounce(period="1h", key=lambda p: p.customer))
    async def mail(ctx: lg.Context, p: Job) -> int:
        return p.n

    return app


async def seed(url: str, path: Path | None, runs: int) -> None:
    async with lg.Client(build_app(), url) as client:
        batch = 1000
        for first in range(0, runs, batch):
            await asyncio.gather(
                *(client.start("bench.charge", Job(customer=f"c{n % 977}", n=n)) for n in range(first, first + batch))
            )
        for n in range(200):  # a few debounced arrivals: parked starts and collapsed ones on the flow page
            await client.start("bench.mail", Job(customer=f"c{n % 20}", n=n))
    if path is None:
        _finish_postgres(url)
        return
    with sqlite3.connect(path) as db:
        spread(db)
        # most runs end; one in twenty fails
        db.execute(
            "UPDATE lockgate_runs SET status = CASE WHEN rowid % 20 = 1 THEN 'failed' ELSE 'succeeded' END, "
            "finished_at = created_at + 0.5, error_tag = CASE WHEN rowid % 20 = 1 THEN 'CardDeclined' END, "
            "error_message = CASE WHEN rowid % 20 = 1 THEN 'card declined' END WHERE rowid % 10 != 0"
        )


def spread(db: sqlite3.Connection) -> None:
    """Spread the runs and their gate decisions evenly over the last 30 days, as a store that has
    grown to this size would hold them (a window of the flow page then reads its own share)."""
    for table, column in (("lockgate_runs", "created_at"), ("lockgate_ledger", "at")):
        last, count = db.execute(f"SELECT MAX(rowid), COUNT(*) FROM {table}").fetchone()
        step = SPAN / max(count, 1)
        db.execute(f"UPDATE {table} SET {column} = {column} - ({last} - rowid) * {step}")
    db.execute("UPDATE lockgate_runs SET updated_at = created_at")


def _finish_postgres(url: str) -> None:
    """What ``spread`` and the status marks do, on PostgreSQL (rows numbered by their order of creation)."""
    with psycopg.connect(url, autocommit=True) as db:
        for table, column, key in (("lockgate_runs", "created_at", "id"), ("lockgate_ledger", "at", "id")):
            row = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
            step = SPAN / max(row[0] if row else 0, 1)
            db.execute(
                f"UPDATE {table} t SET {column} = t.{column} - (n.last - n.rn) * {step} FROM "
                f"(SELECT {key} AS k, ROW_NUMBER() OVER (ORDER BY {column}, {key}) AS rn, "
                f"COUNT(*) OVER () AS last FROM {table}) n WHERE n.k = t.{key}"
            )
        db.execute(
            "UPDATE lockgate_runs t SET status = CASE WHEN n.rn % 20 = 1 THEN 'failed' ELSE 'succeeded' END, "
            "updated_at = t.created_at, finished_at = t.created_at + 0.5, "
            "error_tag = CASE WHEN n.rn % 20 = 1 THEN 'CardDeclined' END, "
            "error_message = CASE WHEN n.rn % 20 = 1 THEN 'card declined' END "
            "FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY created_at, id) AS rn FROM lockgate_runs) n "
            "WHERE n.id = t.id AND n.rn % 10 != 0"
        )
        db.execute("ANALYZE")


async def measure(url: str, repeat: int) -> list[tuple[str, float, float, int]]:
    async with lg.Client(build_app(), url) as client:
        recent = await client.inspector.runs(limit=1)
        failed = await client.inspector.runs(status="failed", limit=1)
        tickets = await client.inspector.ledger(workflow="bench.mail", limit=1)
        pages = [
            "/ui/runs",
            "/ui/runs?status=failed",
            "/ui/runs?workflow=bench.charge&status=running",
            "/ui/runs?dead_letter=1",
            "/ui/runs?q=c976",
            f"/ui/runs/{recent[0].id}",
            f"/ui/runs/{failed[0].id}",
            "/ui/flow",
            "/ui/flow?window=24h",
            "/ui/flow?window=7d",
            f"/ui/why?ticket={tickets[0].ticket}",
            "/ui/events",
            "/ui/schedules",
            "/ui/cluster",
        ]
        transport = httpx.ASGITransport(app=create_app(client))
        found: list[tuple[str, float, float, int]] = []
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            for page in pages:
                times: list[float] = []
                status = 0
                for _ in range(repeat):
                    started = time.perf_counter()
                    answer = await http.get(page)
                    times.append((time.perf_counter() - started) * 1000)
                    status = answer.status_code
                times.sort()
                found.append((page, statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], status))
        return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", metavar="FILE", help="SQLite file to seed once and reuse")
    parser.add_argument("--store", help="a postgresql:// URL: seed a scratch database on that server instead")
    parser.add_argument("--json", default=None, help="where to write the JSON (default bench/results/)")
    args = parser.parse_args(argv)
    scratch = None
    path: Path | None = None
    if args.store:
        admin = args.store
        name = f"lockgate_dash_{secrets.token_hex(4)}"
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        url = f"{admin.rsplit('/', 1)[0]}/{name}"
    else:
        if args.keep:
            path = Path(args.keep)
        else:
            scratch = tempfile.TemporaryDirectory(prefix=".tmp-dashboard-", dir=Path(__file__).resolve().parent)
            path = Path(scratch.name) / "dashboard.db"
        url = f"sqlite:///{path}"
    try:
        if path is None or not path.exists():
            started = time.perf_counter()
            asyncio.run(seed(url, path, args.runs))
            print(f"seeded {args.runs:,} runs in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        rows = asyncio.run(measure(url, args.repeat))
    finally:
        if scratch is not None:
            scratch.cleanup()
        if args.store:
            with psycopg.connect(args.store, autocommit=True) as db:
                db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    kind = "PostgreSQL" if args.store else "SQLite"
    print_table(
        f"dashboard pages, {args.runs:,} runs on {kind} ({machine().get('cpus', '?')} CPUs)",
        ["page", "p50 ms", "p95 ms", "status"],
        [list(r) for r in rows],
    )
    target = args.json or Path(__file__).resolve().parent / "results" / f"dashboard-{kind.lower()}.json"
    written = write_json(
        target,
        {
            "machine": machine(),
            "store": kind,
            "runs": args.runs,
            "repeat": args.repeat,
            "pages": [{"page": p, "p50_ms": a, "p95_ms": b, "status": st} for p, a, b, st in rows],
        },
    )
    print(f"wrote {written}", file=sys.stderr)
    slow = [r[0] for r in rows if r[1] > 200]
    if slow:
        print(f"over 200 ms at p50: {', '.join(slow)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
