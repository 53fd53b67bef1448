"""One group-commit transaction sent two ways: through psycopg's pipeline object, and as the writer sends it.

The transaction is the shape of a small group commit: ``BEGIN``, a few one-row inserts whose
answers nobody reads, the question for the transaction's id, ``COMMIT``, with the two
round trips the writer makes (the statements with the question, then ``COMMIT``). It runs
in a loop on one connection, the two ways alternating for ``--rounds`` rounds, beside the
floor (one-row insert per transaction, psycopg's blocking loop) taken before each round:

    python -m bench.wire --store postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from lockgate.store.direct import DirectConnection
from lockgate.store.wire import WireTx

from .floor import postgres_floor
from .report import machine, print_table, write_json

INSERT = "INSERT INTO bench_wire (k, label, at) VALUES (%(k)s, %(label)s, %(at)s)"
QUERIES = {"insert": INSERT}
XID = "SELECT pg_current_xact_id_if_assigned()::text AS xid"
Way = Callable[[DirectConnection[Any], int], Awaitable[None]]


async def through_psycopg(conn: DirectConnection[Any], i: int) -> None:
    """The transaction through psycopg's pipeline object, as the writer sent it before ``store/wire.py``."""
    async with conn.pipeline() as pipeline:
        sink = conn.cursor()
        await sink.execute("BEGIN")
        for k in range(STATEMENTS):
            await conn.cursor().execute(INSERT, {"k": i * STATEMENTS + k, "label": "x" * 40, "at": time.time()})
        probe = conn.cursor()
        await probe.execute(XID)
        await pipeline.sync()
        await probe.fetchone()
        await sink.execute("COMMIT")


async def through_wire(conn: DirectConnection[Any], i: int) -> None:
    """The same transaction as the writer sends it now."""
    async with WireTx(conn, QUERIES, frozenset(QUERIES)) as tx:
        await tx.send("BEGIN")
        for k in range(STATEMENTS):
            await tx.execute("insert", {"k": i * STATEMENTS + k, "label": "x" * 40, "at": time.time()})
        await tx.sync()
        await tx.commit()


STATEMENTS = 4
WAYS: dict[str, Way] = {"psycopg pipeline": through_psycopg, "wire": through_wire}


async def measure(url: str, way: Way, seconds: float, base: int) -> tuple[float, float, int]:
    """µs of wall time and of CPU per transaction, and the transactions run, over about ``seconds``."""
    conn = await DirectConnection.connect(url, autocommit=True, row_factory=dict_row)
    try:
        for i in range(50):  # warm-up: statements prepared, caches filled
            await way(conn, base + i)
        n, started, cpu = 0, time.perf_counter(), time.process_time()
        deadline = started + seconds
        while True:
            await way(conn, base + 50 + n)
            n += 1
            if n % 32 == 0 and time.perf_counter() >= deadline:
                break
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        await conn.close()
    return wall / n * 1e6, cpu / n * 1e6, n


async def run(url: str, rounds: int, seconds: float) -> dict[str, Any]:
    scratch = f"lockgate_bench_wire_{uuid.uuid4().hex[:8]}"
    admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await admin.execute(f"CREATE DATABASE {scratch}")
    target = f"{url.rsplit('/', 1)[0]}/{scratch}"
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in WAYS}
    floors: list[float] = []
    try:
        async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
            await conn.execute("CREATE TABLE bench_wire (k bigint PRIMARY KEY, label text, at double precision)")
        base = 0
        for _ in range(rounds):
            floors.append(postgres_floor(target, seconds=seconds).us_per_commit)
            for name, way in WAYS.items():
                wall, cpu, n = await measure(target, way, seconds, base)
                base += n + 100
                samples[name].append((wall, cpu))
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)")
        await admin.close()
    return {"floor_us": floors, "ways": samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wire", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/postgres", help="a postgresql:// URL")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the ways alternating (median reported)")
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each way and the floor run per round")
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "wire-postgres.json"))
    parser.add_argument("--plain", action="store_true", help="plain text instead of a rich table")
    args = parser.parse_args(argv)
    if not args.store.startswith(("postgresql://", "postgres://")):
        parser.error("--store must be a postgresql:// URL")
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be at least 1 and --seconds positive")
    result = asyncio.run(run(args.store, args.rounds, args.seconds))
    floor = statistics.median(result["floor_us"])
    rows = []
    for name, samples in result["ways"].items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        rows.append(
            [
                name,
                wall,
                cpu,
                wall / floor,
                f"{len(samples)} rounds, wall {min(s[0] for s in samples):,.0f}-{max(s[0] for s in samples):,.0f} µs",
            ]
        )
    print_table(
        f"A transaction of BEGIN, {STATEMENTS} inserts, its id asked, COMMIT (floor {floor:,.0f} µs/commit)",
        ["way", "µs/transaction", "cpu µs/transaction", "x floor", "detail"],
        rows,
        plain=args.plain,
    )
    path = write_json(args.json, {"bench": "wire", "machine": machine(), "statements": STATEMENTS, **result})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
