"""Backlog figures: admission and draining as the starts parked at one concurrency key grow.

    python -m bench.backlog                                   # SQLite (synchronous FULL)
    python -m bench.backlog --store postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.backlog --sizes 10000,100000,1000000

For each size N, on a fresh database: N starts of a workflow under ``Concurrency(limit=10)``
(one key) are offered by ``--callers`` concurrent callers through a ``Client`` (nothing
executes: ten are admitted, the rest park). Then, with N parked, ``flow()`` is timed, and
an ``Engine`` drains the key for ``--drain-seconds``. Reported per size:

- starts per second in each tenth of N (in the order the starts returned): the last tenth
  against the first says whether admission slows as the backlog grows;
- start latency p50/p99 in the first and in the last tenth;
- bytes per parked start (what the database grew by, divided by N);
- drain rate: runs started from the backlog and finished per second (a slot freed hands
  on to the next parked start);
- ``flow()`` time at N parked (the median of a few calls), every workflow and one, beside
  the same call with only the warm-up's starts parked (what the call costs at any size).

Beside them, the floor of the same database (one-row insert + commit loop).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .core import HERE, Place, _folder, _places
from .floor import Floor
from .report import Cell, machine, print_table, ratio, write_json

__all__ = ["main"]

WORKFLOW = "backlog"
LIMIT = 10
# Targets at 1,000,000 parked, from the issue that asked for this benchmark (both stores).
TARGETS = {"last_over_first": 0.9, "p99_growth": 1.5, "flow_ms": 50.0}


class Job(BaseModel):
    n: int


class Finished:
    """Bodies that returned: how many, and when the first and the latest did."""

    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.last = 0.0

    async def body(self, ctx: lg.Context, p: Job) -> int:
        now = time.perf_counter()
        self.count += 1
        self.first = now if self.first is None else self.first
        self.last = now
        return p.n


def build_app(finished: Finished) -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Job) -> int:
        return await finished.body(ctx, p)

    app.workflow(name=WORKFLOW, concurrency=lg.Concurrency(limit=LIMIT))(body)
    return app


@dataclass
class Tenth:
    starts: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.starts / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "starts": self.starts,
            "seconds": self.seconds,
            "per_s": self.per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


@dataclass
class SizeResult:
    size: int
    seconds: float
    tenths: list[Tenth]
    bytes_per_parked: float | None
    flow_ms: float
    flow_one_ms: float
    flow_small_ms: float
    queued: int
    drained: int
    drain_seconds: float
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.size / self.seconds

    @property
    def last_over_first(self) -> float:
        return self.tenths[-1].per_s / self.tenths[0].per_s

    @property
    def p99_growth(self) -> float:
        return self.tenths[-1].p99_ms / self.tenths[0].p99_ms

    @property
    def drain_per_s(self) -> float:
        return self.drained / self.drain_seconds if self.drain_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "seconds": self.seconds,
            "per_s": self.per_s,
            "tenths": [t.to_dict() for t in self.tenths],
            "last_over_first": self.last_over_first,
            "p99_growth": self.p99_growth,
            "bytes_per_parked": self.bytes_per_parked,
            "flow_ms": self.flow_ms,
            "flow_one_ms": self.flow_one_ms,
            "flow_small_ms": self.flow_small_ms,
            "queued_at_flow": self.queued,
            "drained": self.drained,
            "drain_seconds": self.drain_seconds,
            "drain_per_s": self.drain_per_s,
            "outcomes": self.outcomes,
        }


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _tenths(done: list[tuple[float, float]], began: float) -> list[Tenth]:
    """Split the starts, in the order they returned, into ten equal parts: rate and latency of each."""
    done.sort()
    n = len(done)
    tenths = []
    previous = began
    for k in range(10):
        part = done[k * n // 10 : (k + 1) * n // 10]
        if not part:
            continue
        latencies = sorted(lat for _, lat in part)
        end = part[-1][0]
        tenths.append(
            Tenth(len(part), end - previous, _quantile(latencies, 0.5) * 1e3, _quantile(latencies, 0.99) * 1e3)
        )
        previous = end
    return tenths


async def _offer(
    client: lg.Client, first: int, n: int, callers: int
) -> tuple[list[tuple[float, float]], dict[str, int]]:
    """``n`` starts from ``callers`` concurrent callers: (returned at, latency) of each, counts per status."""
    done: list[tuple[float, float]] = []
    outcomes: dict[str, int] = {}
    numbers = iter(range(first, first + n))

    async def caller() -> None:
        for i in numbers:
            began = time.perf_counter()
            handle = await client.start(WORKFLOW, {"n": i})
            ended = time.perf_counter()
            done.append((ended, ended - began))
            outcomes[handle.status] = outcomes.get(handle.status, 0) + 1

    await asyncio.gather(*(caller() for _ in range(callers)))
    return done, outcomes


def _database_bytes(url: str) -> int:
    """What the database holds now: its used pages (SQLite, WAL included) or its size on disk (PostgreSQL)."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///").split("?")[0]
        if not os.path.exists(path):
            return 0
        with sqlite3.connect(path) as conn:
            pages = (
                conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
            )
            return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert row is not None
        return int(row[0])


async def _time_flow(client: lg.Client, workflow: str | None, repeat: int = 5) -> tuple[float, int]:
    """The median ``flow()`` time in ms over ``repeat`` calls, and the starts it saw queued."""
    times, queued = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        rows = await client.flow(workflow=workflow)
        times.append((time.perf_counter() - began) * 1e3)
        queued = sum(r.queued for r in rows)
    return statistics.median(times), queued


async def run_size(url: str, size: int, callers: int, drain_seconds: float) -> SizeResult:
    finished = Finished()
    app = build_app(finished)
    async with lg.Client(app, url) as client:
        await _offer(client, -callers, callers, callers)  # warm-up: caches, connections, the ten slots
        flow_small_ms, _ = await _time_flow(client, None)  # the same call with a few parked: its floor
        before = _database_bytes(url)
        began = time.perf_counter()
        done, outcomes = await _offer(client, 0, size, callers)
        seconds = time.perf_counter() - began
        grown = _database_bytes(url) - before
        flow_ms, queued = await _time_flow(client, None)
        flow_one_ms, _ = await _time_flow(client, WORKFLOW)
    async with lg.Engine(app, url):
        deadline = time.perf_counter() + drain_seconds + 30.0
        while finished.first is None and time.perf_counter() < deadline:  # the ten admitted runs first
            await asyncio.sleep(0.01)
        await asyncio.sleep(drain_seconds)
        drained = finished.count
        span = finished.last - finished.first if finished.first is not None else 0.0
    return SizeResult(
        size=size,
        seconds=seconds,
        tenths=_tenths(done, began),
        bytes_per_parked=grown / size if grown > 0 else None,
        flow_ms=flow_ms,
        flow_one_ms=flow_one_ms,
        flow_small_ms=flow_small_ms,
        queued=queued,
        drained=drained,
        drain_seconds=span,
        outcomes=outcomes,
    )


async def run_place(place: Place, args: argparse.Namespace) -> tuple[Floor, list[SizeResult]]:
    floor = place.floor(args.floor_seconds)
    results = []
    for size in args.sizes:
        result = await run_size(place.url(f"backlog-{size}"), size, args.callers, args.drain_seconds)
        print(
            f"  {place.store} {size:,}: {result.per_s:,.0f} starts/s, last/first {result.last_over_first:.2f}, "
            f"flow {result.flow_ms:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    return floor, results


def _rows(floor: Floor, results: list[SizeResult]) -> list[list[Cell]]:
    rows: list[list[Cell]] = [
        ["floor", floor.commits_per_s, None, None, None, None, None, None, None, None, None, None]
    ]
    for r in results:
        first, last = r.tenths[0], r.tenths[-1]
        rows.append(
            [
                f"{r.size:,}",
                r.per_s,
                first.per_s,
                last.per_s,
                r.last_over_first,
                f"{first.p50_ms:.1f}/{first.p99_ms:.1f}",
                f"{last.p50_ms:.1f}/{last.p99_ms:.1f}",
                r.p99_growth,
                r.bytes_per_parked,
                r.drain_per_s,
                r.flow_ms,
                r.flow_small_ms,
            ]
        )
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", default="sqlite", help="'sqlite' (synchronous FULL), a sqlite:/// URL, or a postgresql:// URL"
    )
    parser.add_argument("--json", help="where to write the JSON (default bench/results/backlog-<store>.json)")
    parser.add_argument("--dir", help="folder for the SQLite files (default: a scratch folder beside this script)")
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated backlog sizes (starts offered)")
    parser.add_argument("--callers", type=int, default=200, help="concurrent callers")
    parser.add_argument("--drain-seconds", type=float, default=10.0, help="how long the engine drains each backlog")
    parser.add_argument("--floor-seconds", type=float, default=1.0, help="how long the floor loop runs")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated whole numbers, not {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 10:
        parser.error("--sizes must name at least one size, each at least 10")
    if args.callers < 1:
        parser.error("--callers must be at least 1")
    if args.drain_seconds <= 0:
        parser.error("--drain-seconds must be above 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with _folder(args.dir) as folder:
        place = _places(args, folder)[0]  # on SQLite: synchronous FULL, the durable default
        try:
            floor, results = asyncio.run(run_place(place, args))
        finally:
            place.cleanup()
    print_table(
        f"lockgate backlog on {place.store} (Concurrency(limit={LIMIT}), one key, {args.callers} callers; "
        f"load {os.getloadavg()[0]:.2f})",
        [
            "parked",
            "starts/s",
            "1st tenth/s",
            "last tenth/s",
            "last/1st",
            "1st p50/p99 ms",
            "last p50/p99 ms",
            "p99 last/1st",
            "bytes/parked",
            "drain/s",
            "flow() ms",
            "flow() ms, ~200 parked",
        ],
        _rows(floor, results),
        plain=args.plain,
    )
    print(
        f"floor: {floor.commits_per_s:,.0f} commits/s; "
        f"first tenth at {ratio(results[0].tenths[0].per_s, floor.commits_per_s) or 0:.2f}x floor; "
        f"targets at 1,000,000: last/1st >= {TARGETS['last_over_first']}, p99 last/1st <= {TARGETS['p99_growth']}, "
        f"flow() <= {TARGETS['flow_ms']:.0f} ms"
    )
    document = {
        "benchmark": "backlog",
        "store": place.store,
        "machine": machine(),
        "settings": {"sizes": args.sizes, "callers": args.callers, "limit": LIMIT, "drain_seconds": args.drain_seconds},
        "targets": TARGETS,
        "floor": floor.to_dict(),
        "sizes": [r.to_dict() for r in results],
    }
    path = write_json(args.json or HERE / "results" / f"backlog-{place.store}.json", document)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
