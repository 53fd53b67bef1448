"""Listing runs with filters: the time of one page at two table sizes, side by side.

Each filtered page is read from an index (store/listing.py), so its time should not grow with
the table. The runs are loaded straight into the table (a mix of workflows, statuses, sources,
children and discarded failures), the database analyzed, then each listing is read ``--reads``
times through the ``Inspector`` (median reported), both its first page and a page 20 pages deep
(by cursor).

    python -m bench.listing                       # SQLite and PostgreSQL, 10k and 100k runs
    python -m bench.listing --stores sqlite --sizes 10000,100000 --reads 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import lockgate as lg
from lockgate.clock import to_datetime
from lockgate.inspect import Inspector, RunFilter

from .report import print_table

PG_ADMIN = os.environ.get("LOCKGATE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
WORKFLOWS = ("charge", "refund", "notify", "sync", "report")
BASE = 1_700_000_000.0


def _row(i: int, n: int) -> dict[str, Any]:
    status = ("succeeded",) * 14 + ("failed",) * 2 + ("cancelled", "suspended") + ("running",) * 2
    s = status[i % len(status)]
    parent = f"run_parent{(i // 100) % 10:03d}" if i % 100 == 7 else None
    return {
        "id": f"run_{i:012d}{uuid.uuid4().hex[:12]}",
        "workflow": WORKFLOWS[i % len(WORKFLOWS)],
        "identity": f"id-{i}",
        "status": s,
        "payload": json.dumps({"order": i, "note": "needle" if i % 997 == 0 else "hay"}),
        "error_tag": "ValueError" if s == "failed" else None,
        "error_message": f"card declined for order {i}" if s == "failed" else None,
        "created_at": BASE + i * 0.5,
        "source": ("api", "cli", "event:order.paid")[i % 3] if parent is None else f"child:{parent}",
        "parent_id": parent,
        "discarded_at": BASE + i if s == "failed" and i % 4 == 0 else None,
    }


COLUMNS = (
    "id, workflow, identity, status, payload, error_tag, error_message, created_at, updated_at, progress_at, "
    "source, parent_id, discarded_at"
)


def _values(r: dict[str, Any]) -> tuple[Any, ...]:
    at = r["created_at"]
    return (
        r["id"], r["workflow"], r["identity"], r["status"], r["payload"], r["error_tag"], r["error_message"],
        at, at, at, r["source"], r["parent_id"], r["discarded_at"],
    )  # fmt: skip


def load_sqlite(path: str, n: int) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:
        marks = ", ".join("?" * len(COLUMNS.split(",")))
        conn.executemany(
            f"INSERT INTO lockgate_runs ({COLUMNS}) VALUES ({marks})", (_values(_row(i, n)) for i in range(n))
        )
        conn.execute("ANALYZE")


def load_postgres(url: str, n: int) -> None:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY lockgate_runs ({COLUMNS}) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row(_values(_row(i, n)))
        conn.commit()
        conn.execute("ANALYZE lockgate_runs")
        conn.commit()


def listings(n: int) -> dict[str, RunFilter]:
    last_hour = to_datetime(BASE + n * 0.5 - 3600)
    prefix = _row(n // 2, n)["id"][: len("run_") + 10]
    return {
        "no filter": RunFilter(),
        "workflow": RunFilter(workflow="refund"),
        "workflow + status": RunFilter(workflow="charge", statuses=("failed",)),
        "statuses failed,cancelled": RunFilter(statuses=("failed", "cancelled")),
        "status running": RunFilter(statuses=("running",)),
        "dead letters": RunFilter(dead_letter=True),
        "source": RunFilter(source="event:order.paid"),
        "children of one run": RunFilter(parent_id="run_parent003"),
        "since (last hour)": RunFilter(since=last_hour),
        "id prefix": RunFilter(id_prefix=prefix),
        "text (bounded window)": RunFilter(text="needle"),
    }


async def _median_ms(read: Callable[[], Any], reads: int) -> float:
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        await read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def measure(url: str, n: int, reads: int) -> dict[str, tuple[float, float]]:
    async with lg.Client(lg.App(), url) as client:
        insp = Inspector(client.store, client.app, client.clock)
        out: dict[str, tuple[float, float]] = {}
        for name, where in listings(n).items():
            first = await _median_ms(lambda w=where: insp.run_page(w, limit=50), reads)  # type: ignore[misc]
            cursor = None
            for _ in range(20):
                page = await insp.run_page(where, cursor=cursor, limit=50)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            deep = await _median_ms(lambda w=where, c=cursor: insp.run_page(w, cursor=c, limit=50), reads)  # type: ignore[misc]
            out[name] = (first, deep)
        return out


async def store_for(kind: str, n: int, folder: str) -> str:
    if kind == "sqlite":
        url = f"sqlite:///{folder}/listing-{n}.db"
        async with lg.Client(lg.App(), url):
            pass
        load_sqlite(f"{folder}/listing-{n}.db", n)
        return url
    import psycopg

    name = f"lockgate_bench_listing_{n}_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    async with lg.Client(lg.App(), url):
        pass
    load_postgres(url, n)
    return url


def drop(kind: str, url: str) -> None:
    if kind != "postgres":
        return
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--reads", type=int, default=15)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for kind in args.stores.split(","):
        results: dict[int, dict[str, tuple[float, float]]] = {}
        with tempfile.TemporaryDirectory() as folder:
            for n in sizes:
                url = await store_for(kind, n, folder)
                try:
                    results[n] = await measure(url, n, args.reads)
                finally:
                    drop(kind, url)
        headers = ["listing (50 a page)"] + [f"{n:,} first / deep (ms)" for n in sizes]
        if len(sizes) > 1:
            headers.append(f"{sizes[-1]:,} / {sizes[0]:,}")
        rows: list[list[Any]] = []
        for name in results[sizes[0]]:
            row: list[Any] = [name] + [f"{results[n][name][0]:.2f} / {results[n][name][1]:.2f}" for n in sizes]
            if len(sizes) > 1:
                row.append(f"{results[sizes[-1]][name][0] / results[sizes[0]][name][0]:.2f}x")
            rows.append(row)
        print_table(f"runs listing on {kind} (median of {args.reads} reads)", headers, rows)


if __name__ == "__main__":
    asyncio.run(main())
