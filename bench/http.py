"""The HTTP API under load: requests/s and latency of its reads at 10k and 100k runs.

    python -m bench.http                                    # SQLite and PostgreSQL (when it answers)
    python -m bench.http --stores sqlite --sizes 10000,100000 --seconds 3 --plain
    python -m bench.http --pg postgresql://postgres@127.0.0.1:5432/postgres --json /tmp/http.json

For each store the benchmark fills a fresh database with runs (starts through an
``lg.Client``, ``--batch`` at a time, so that group commit writes them with multi-row
statements), serves it with ``lockgate inspect`` in a subprocess (the API alone, no workers),
and drives it from this process with ``--connections`` concurrent keep-alive connections for
``--seconds`` per endpoint: ``GET /runs?limit=50``, the same with a workflow and status
filter, ``GET /runs/{id}`` of random runs, and ``GET /metrics`` (whose store-wide gauges
group every run: the one read here that grows with the table). Then it tops the same
database up to the next size and measures again, so the columns of one store differ only by
the table's size. Figures: requests/s, p50 and p99 latency in milliseconds, and the ratio of
the largest size's p50 to the smallest's (1.0: independent of the table size).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

import lockgate as lg

from .core import HERE, _create_database, _drop_databases
from .report import Cell, machine, print_table, write_json

__all__ = ["app", "main"]

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
WORKFLOWS = ("bench.orders", "bench.emails", "bench.reports", "bench.syncs")


class Order(BaseModel):
    n: int
    customer: str


def _build() -> lg.App:
    bench_app = lg.App("bench-http")
    for name in WORKFLOWS:

        async def body(ctx: lg.Context, p: Order) -> int:
            return p.n

        bench_app.workflow(name=name)(body)
    return bench_app


app = _build()


@dataclass
class Measured:
    store: str
    runs: int
    endpoint: str
    requests: int
    per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


async def fill(url: str, have: int, want: int, batch: int) -> float:
    """Start runs until the store holds ``want``; seconds it took."""
    started = time.perf_counter()
    async with lg.Client(app, url) as client:
        n = have
        while n < want:
            size = min(batch, want - n)
            # Read the pauses once for the batch: starts that find the snapshot stale each read it again.
            await client.core.pauses.refresh()
            await asyncio.gather(
                *(
                    client.start(WORKFLOWS[i % len(WORKFLOWS)], {"n": i, "customer": f"c{i % 997}"})
                    for i in range(n, n + size)
                )
            )
            n += size
    return time.perf_counter() - started


async def sample_ids(url: str, count: int) -> list[str]:
    async with lg.Client(app, url) as client:
        page = await client.inspector.runs(limit=min(count, 1000))
        return [r.id for r in page]


async def drive(base: str, paths: list[str], seconds: float, connections: int) -> tuple[list[float], int]:
    """Latencies (s) of requests to ``paths`` (taken in turn) over ``connections`` for ``seconds``."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
        for path in paths[: connections * 2]:  # warm up every connection
            await http.get(path)
        deadline = time.perf_counter() + seconds
        counter = iter(range(1 << 62))

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                path = paths[next(counter) % len(paths)]
                t0 = time.perf_counter()
                answer = await http.get(path)
                latencies.append(time.perf_counter() - t0)
                if answer.status_code != 200:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies, errors


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(store: str, runs: int, base: str, url: str, args: argparse.Namespace) -> list[Measured]:
    ids = await sample_ids(url, 1000)
    rng = random.Random(7)
    cases = {
        "GET /runs?limit=50": ["/api/v1/runs?limit=50"],
        "GET /runs?workflow=&status=&limit=50": [
            f"/api/v1/runs?workflow={w}&status=running&limit=50" for w in WORKFLOWS
        ],
        "GET /runs/{id}": [f"/api/v1/runs/{rng.choice(ids)}" for _ in range(500)],
        "GET /metrics": ["/metrics"],
    }
    out = []
    for endpoint, paths in cases.items():
        connections = 1 if endpoint == "GET /metrics" else args.connections  # a scrape comes alone
        latencies, errors = await drive(base, paths, args.seconds, connections)
        out.append(
            Measured(
                store,
                runs,
                endpoint,
                len(latencies),
                len(latencies) / args.seconds,
                statistics.median(latencies) * 1000,
                _quantile(latencies, 0.99) * 1000,
                errors,
            )
        )
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def served(url: str) -> Iterator[str]:
    """``lockgate inspect`` over ``url`` in a subprocess; its base URL."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_TOKEN")}
    argv = [sys.executable, "-m", "lockgate.cli", "inspect", "--store", url, "--http", f"127.0.0.1:{port}"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/v1/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                why = process.stderr.read() if process.stderr else ""
                raise RuntimeError(f"lockgate inspect did not come up: {why!r}")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def bench_store(store: str, url: str, args: argparse.Namespace) -> tuple[list[Measured], list[dict[str, Any]]]:
    results: list[Measured] = []
    fills: list[dict[str, Any]] = []
    have = 0
    for size in args.sizes:
        seconds = asyncio.run(fill(url, have, size, args.batch))
        rate = (size - have) / seconds
        fills.append({"store": store, "from": have, "to": size, "seconds": seconds, "runs_per_s": rate})
        print(f"{store}: {size:,} runs ({rate:,.0f} starts/s while filling)", file=sys.stderr)
        have = size
        with served(url) as base:
            results += asyncio.run(measure(store, size, base, url, args))
    return results, fills


def _rows(results: list[Measured], sizes: list[int]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    keyed = {(m.store, m.endpoint, m.runs): m for m in results}
    for store in dict.fromkeys(m.store for m in results):
        for endpoint in dict.fromkeys(m.endpoint for m in results if m.store == store):
            row: list[Cell] = [store, endpoint]
            for size in sizes:
                m = keyed.get((store, endpoint, size))
                row += [None, None, None] if m is None else [m.per_s, m.p50_ms, m.p99_ms]
            first, last = keyed.get((store, endpoint, sizes[0])), keyed.get((store, endpoint, sizes[-1]))
            row.append(None if first is None or last is None else last.p50_ms / first.p50_ms)
            rows.append(row)
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL server (a scratch database is made and dropped)")
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated run counts, ascending")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each endpoint is driven")
    parser.add_argument("--connections", type=int, default=4, help="concurrent connections")
    parser.add_argument("--batch", type=int, default=2000, help="starts in flight at once while filling")
    parser.add_argument("--json", help="where to write the JSON (default bench/results/http.json)")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    args.stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    args.sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    if not args.sizes or args.sizes[0] < 1:
        parser.error("--sizes must name positive run counts")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    results: list[Measured] = []
    fills: list[dict[str, Any]] = []
    for store in args.stores:
        if store == "sqlite":
            with tempfile.TemporaryDirectory(prefix=".tmp-http-", dir=HERE) as folder:
                measured, filled = bench_store(store, f"sqlite:///{Path(folder) / 'http.db'}", args)
        elif store == "postgres":
            created: list[str] = []
            try:
                url = _create_database(args.pg, created)
            except Exception as exc:
                print(f"postgres skipped: {exc}", file=sys.stderr)
                continue
            try:
                measured, filled = bench_store(store, url, args)
            finally:
                _drop_databases(args.pg, created)
        else:
            raise SystemExit(f"unknown store {store!r}")
        results += measured
        fills += filled
    headers = ["store", "endpoint"]
    for size in args.sizes:
        headers += [f"{size // 1000}k req/s", f"{size // 1000}k p50 ms", f"{size // 1000}k p99 ms"]
    headers.append(f"p50 {args.sizes[-1] // 1000}k/{args.sizes[0] // 1000}k")
    print_table(
        f"lockgate HTTP API ({args.connections} connections, {args.seconds:g}s per endpoint)",
        headers,
        _rows(results, args.sizes),
        plain=args.plain,
    )
    document = {
        "benchmark": "http",
        "machine": machine(),
        "settings": {"sizes": args.sizes, "seconds": args.seconds, "connections": args.connections},
        "fills": fills,
        "results": [asdict(m) for m in results],
    }
    path = write_json(args.json or HERE / "results" / "http.json", document)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
