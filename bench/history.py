"""A PostgreSQL store with a long history: reads at each size, retention, bytes per run, autovacuum.

The history is laid out as the retention sweep leaves it: one partition a day (docs/history.md) for
``--days`` days up to now, each holding ``runs / days`` ended runs with their records (three journal
entries, an attempt, three events, two stream chunks, a ledger row), loaded straight into the tables
with their indexes and the run count trigger out of the way, rebuilt and made up for after each size
(``bench/history_fill.py``: ten million runs in 23 minutes on two shared cores, load average 8 to 11).
At each size of ``--sizes`` (cumulative: the days fill up) it reads, through the ``Inspector`` the CLI,
dashboard and HTTP API share, a page of the run list (and one filtered by workflow), a run's page (run,
steps, attempts, events), why (a start's trace), flow, and a ``/metrics`` scrape, ``--reads`` times each
(median). At the largest size it retires the oldest day two ways and reports runs retired per second:
the ``DELETE`` of each run's rows retention did before partitioning (expired runs selected 500 at a
time, on a sample of that day's runs), and the sweep's way (the day's expired runs and their records
deleted by range of run id, a slice per commit, then the day's partitions dropped). Last, a sustained
start load with each retention running beside it, sampling autovacuum (``pg_stat_user_tables``). The
ledger's oldest day is retired both ways too: 500 decisions a commit, and its partition dropped; and so are
the oldest day's domain events, deliveries and schedule firings (``--events`` a day: ``bench/history_events.py``).
``--events-only`` measures that last alone (no runs: a few minutes).

    python -m bench.history                                  # 1M runs (100k, 1M) on the local server
    python -m bench.history --store postgresql://... --runs 2000000 --sizes 200000,2000000
    python -m bench.history --events-only --events 200000          # events, deliveries, firings alone

It works in a database of its own (``history_bench``, made and dropped on the server of ``--store``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from pydantic import BaseModel

import lockgate as lg
from lockgate.http.metrics import StoreMetrics
from lockgate.inspect import Inspector, RunFilter
from lockgate.store import history, retention
from lockgate.store import runs as store_runs
from lockgate.store.sql_files import load_queries, migrations
from lockgate.sweeps.retention import forget_partition_runs

from . import history_events
from .history_fill import fill
from .report import machine, print_table, write_json

DB = "history_bench"
DAY_MS = 86_400_000
WORKFLOWS = ("charge", "refund", "notify", "sync", "report")
HISTORY = ("lockgate_journal", "lockgate_step_attempts", "lockgate_run_events", "lockgate_stream_chunks")
TABLES = ("lockgate_runs", "lockgate_ledger", *HISTORY)
# Retention before partitioning: each run's rows deleted from every table, the history's too.
OLD_HISTORY = {
    name: f"DELETE FROM {table} WHERE run_id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)))"
    for name, table in zip(
        ("forget_journal", "forget_attempts", "forget_events", "forget_stream_chunks"), HISTORY, strict=True
    )
}


def _url(store: str, db: str) -> str:
    base, _, _ = store.rpartition("/")
    return f"{base}/{db}"


def _admin(store: str, sql: str) -> None:
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute(sql)


async def create(store: str, days: int) -> str:
    """The database, migrated, its history partitioned by day for ``days`` days back and two ahead."""
    _admin(store, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _admin(store, f"CREATE DATABASE {DB}")
    url = _url(store, DB)
    async with lg.Client(lg.App(), url):
        pass
    today = int(time.time() * 1000) // DAY_MS * DAY_MS
    with psycopg.connect(url, autocommit=True) as conn:
        # the first partitions are empty here: the days replace them
        for t in (*HISTORY, "lockgate_ledger", *history_events.TABLES):
            conn.execute(f"ALTER TABLE {t} DETACH PARTITION {t}_p0")
            conn.execute(f"DROP TABLE {t}_p0")
        for d in range(-days + 1, 3):
            lo = today + d * DAY_MS
            conn.execute(
                "SELECT lockgate_history_add(%s, %s, %s, '5s')",
                (lo, lo + DAY_MS, "p" + time.strftime("%Y%m%d0000", time.gmtime(lo / 1000))),
            )
    return url


async def migration_window(store: str, runs: int, days: int) -> dict[str, float]:
    """How long migration 0038 holds the tables: a store at the schema before it, holding ``runs`` runs'
    history, migrated by this lockgate (timed: the window in which starts and steps wait)."""
    _admin(store, f"DROP DATABASE IF EXISTS {DB}_old WITH (FORCE)")
    _admin(store, f"CREATE DATABASE {DB}_old")
    url = _url(store, f"{DB}_old")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE lockgate_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
        )
        for version, name, sql in migrations("postgres"):
            if version < 38:  # 0037 only adds the functions the fill uses
                conn.execute(sql)
                conn.execute("INSERT INTO lockgate_migrations VALUES (%s, %s, 0)", (version, name))
    try:
        fill(url, days, 0, runs // days)
        started = time.perf_counter()
        async with lg.Client(lg.App(), url):  # applies 0038
            pass
        return {"runs": runs, "seconds": time.perf_counter() - started}
    finally:
        _admin(store, f"DROP DATABASE IF EXISTS {DB}_old WITH (FORCE)")


async def _median_ms(read: Callable[[], Awaitable[Any]], reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        await read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _sample_run(url: str) -> tuple[str, str]:
    """A run of the middle day, and its ticket."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT id, ticket FROM lockgate_runs WHERE id >= (SELECT lockgate_id_floor('run',"
            " (extract(epoch FROM now()) * 1000)::bigint - 4 * 86400000)) ORDER BY id LIMIT 1"
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _counts_agree(url: str) -> None:
    """The kept counts, folded, are the runs' own (the fill made up for the trigger it held off)."""
    with psycopg.connect(url) as conn:
        kept = conn.execute(
            "SELECT workflow, status, n, last_finished FROM lockgate_run_counts WHERE n <> 0"
        ).fetchall()
        counted = conn.execute(
            "SELECT workflow, status, count(*), max(finished_at) FROM lockgate_runs GROUP BY workflow, status"
        ).fetchall()
    if sorted(kept) != sorted(counted):
        raise AssertionError(f"kept run counts {sorted(kept)} differ from the runs' {sorted(counted)}")


async def reads(url: str, n: int) -> dict[str, float]:
    """Median milliseconds of each read a person or a scraper makes."""
    run_id, ticket = _sample_run(url)
    async with lg.Client(lg.App(), url) as client:
        # What the fill appended to the kept counts is folded first, as the sweep does every few seconds.
        await client.core.store.write(store_runs.fold_run_counts)
        _counts_agree(url)
        inspector = Inspector(client.core.store)
        metrics = StoreMetrics(inspector)

        async def run_page() -> None:
            await inspector.run(run_id)
            await inspector.steps(run_id)
            await inspector.attempts(run_id)
            await inspector.events(run_id)

        return {
            "list": await _median_ms(lambda: inspector.run_page(RunFilter(), limit=50), n),
            "list by workflow": await _median_ms(lambda: inspector.run_page(RunFilter(workflow="sync"), limit=50), n),
            "run page": await _median_ms(run_page, n),
            "why": await _median_ms(lambda: inspector.trace(ticket), n),
            "flow": await _median_ms(lambda: inspector.flow(), n),
            "/metrics": await _median_ms(metrics.render, n),
        }


def sizes(url: str) -> dict[str, float]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM lockgate_runs), pg_database_size(current_database()),"
            " (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relname LIKE 'lockgate%%'"
            " AND c.relkind = 'r')"
        ).fetchone()
    assert row is not None
    return {"runs": row[0], "database_bytes": row[1], "lockgate_bytes": float(row[2])}


async def _oldest_day(url: str) -> history.Partition:
    async with lg.Client(lg.App(), url) as client:
        parts = [p for p in await client.core.store.read(history.partitions) if p.hi is not None]
    return min(parts, key=lambda p: p.ends_at or 0)


def old_delete(url: str, part: history.Partition, most: int) -> dict[str, Any]:
    """Today's retention of up to ``most`` runs of the day ``part`` holds, as the sweep did before retiring
    partitions: ``ended_before`` (every expired run, 500 a commit) then each record's ``DELETE``, the
    history's too. Seconds in all, and in the history's statements."""
    queries = load_queries("postgres")
    texts = {name: queries[name] for name in retention.RUN_RECORDS}
    texts.update(OLD_HISTORY)
    cutoff = (part.ends_at or 0) + 1
    runs, started = 0, time.perf_counter()
    spent = dict.fromkeys(["ended_before", *texts, "commit"], 0.0)
    with psycopg.connect(url, autocommit=True) as conn:
        while runs < most:
            began = time.perf_counter()
            conn.execute("BEGIN")
            params = {"cutoff": cutoff, "created_before": cutoff, "limit": 500}
            ids = [r[0] for r in conn.execute(queries["ended_before"], params)]
            spent["ended_before"] += time.perf_counter() - began
            for name, sql in texts.items() if ids else ():
                began = time.perf_counter()
                conn.execute(sql, {"ids": json.dumps(ids)})
                spent[name] += time.perf_counter() - began
            began = time.perf_counter()
            conn.execute("COMMIT")
            spent["commit"] += time.perf_counter() - began
            if not ids:
                break
            runs += len(ids)
    seconds = time.perf_counter() - started
    history_s = sum(spent[name] for name in OLD_HISTORY)
    return {"runs": runs, "seconds": seconds, "runs_per_s": runs / seconds, "history_s": history_s, "spent_s": spent}


def new_retire(url: str, part: history.Partition) -> dict[str, Any]:
    """The sweep's retirement of the day ``part`` holds, as it does it: its expired runs and their records by
    range of run id, a slice per commit (``forget_partition_runs``), then the partitions' drop."""
    cutoff = (part.ends_at or 0) + 1

    async def run() -> dict[str, Any]:
        async with lg.Client(lg.App(), url) as client:
            store = client.core.store
            started = time.perf_counter()
            runs = await forget_partition_runs(store, part, cutoff, DAY_MS / 1000)
            ranged = time.perf_counter()
            await store.write(history.retire, part, cutoff)
            done = time.perf_counter()
        spent = {"forget by range (slices)": ranged - started, "history_retire": done - ranged}
        seconds = done - started
        return {
            "runs": runs,
            "seconds": seconds,
            "runs_per_s": runs / seconds,
            "history_s": done - ranged,
            "spent_s": spent,
        }

    return asyncio.run(run())


async def _oldest_ledger_day(url: str) -> history.Partition:
    async with lg.Client(lg.App(), url) as client:
        parts = [p for p in await client.core.store.read(history.ledger_partitions) if p.hi is not None]
    return min(parts, key=lambda p: p.ends_at or 0)


def ledger_delete(url: str, part: history.Partition, most: int) -> dict[str, Any]:
    """The ledger's retention as it was, over up to ``most`` decisions of the day ``part`` holds: 500 a
    commit by the time index (``forget_ledger``). Seconds, decisions per second."""
    query = load_queries("postgres")["forget_ledger"]
    cutoff, rows, started = (part.ends_at or 0) + 1, 0, time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while rows < most:
            n = len(conn.execute(query, {"cutoff": cutoff, "limit": 500}).fetchall())
            rows += n
            if n < 500:
                break
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def ledger_drop(url: str, part: history.Partition) -> dict[str, Any]:
    """The sweep's way: the day's ledger partition dropped whole."""
    with psycopg.connect(url) as conn:
        (rows,) = conn.execute(f"SELECT count(*) FROM lockgate_ledger_{part.suffix}").fetchone() or (0,)

    async def run() -> float:
        async with lg.Client(lg.App(), url) as client:
            started = time.perf_counter()
            await client.core.store.write(history.drop_ledger, part)
            return time.perf_counter() - started

    seconds = asyncio.run(run())
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def _spent(r: dict[str, Any]) -> str:
    return ", ".join(f"{name} {s:.2f}" for name, s in r["spent_s"].items() if s >= 0.01)


class Job(BaseModel):
    n: int = 0


def _vacuum_stats(url: str) -> dict[str, tuple[int, int, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname, n_dead_tup, autovacuum_count + autoanalyze_count, n_tup_del FROM pg_stat_user_tables"
            " WHERE relname LIKE 'lockgate%%'"
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


async def sustained(url: str, seconds: float, rate: float, retire: Callable[[], Any]) -> dict[str, Any]:
    """Starts at ``rate``/s for ``seconds`` while ``retire`` runs in a thread; autovacuum seen meanwhile."""
    app = lg.App()

    @app.workflow(name="bench.history")
    async def body(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("one", lambda n: n, p.n))

    before = _vacuum_stats(url)
    workers_seen = 0
    async with lg.Engine(app, url, retention=None, max_concurrent_runs=50) as engine:
        job = asyncio.get_running_loop().run_in_executor(None, retire)
        started, made = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - started) < seconds:
            await engine.start("bench.history", {"n": made})
            made += 1
            ahead = made / rate - elapsed
            if ahead > 0:
                await asyncio.sleep(ahead)
            if made % max(int(rate), 1) == 0:
                with psycopg.connect(url) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
                    ).fetchone()
                workers_seen += int(row[0]) if row else 0
        rate_made = made / (time.perf_counter() - started)
        retired = await job
    after = _vacuum_stats(url)
    dead = sum(after[t][0] for t in after if t in before) - sum(before[t][0] for t in before if t in after)
    runs = sum(after[t][1] - before[t][1] for t in after if t in before)
    deleted = sum(after[t][2] - before[t][2] for t in after if t in before)
    return {
        "starts_per_s": rate_made,
        "rows_deleted": deleted,
        "dead_tuples_added": dead,
        "autovacuum_runs": runs,
        "autovacuum_worker_samples": workers_seen,
        "retired": retired,
        "dead_per_run_retired": dead / max(retired["runs"], 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--runs", type=int, default=1_000_000, help="the largest size")
    parser.add_argument("--sizes", default="", help="sizes to read at (default: a tenth of --runs, then --runs)")
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--sample", type=int, default=20_000, help="runs today's DELETE retires (timed)")
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=100.0, help="starts per second of the sustained load")
    parser.add_argument("--migrate-runs", type=int, default=0, help="time migration 0038 over this many runs")
    parser.add_argument("--events", type=int, default=100_000, help="domain events a day (0: none)")
    parser.add_argument("--events-only", action="store_true", help="only the events' retention (no runs)")
    parser.add_argument("--migrate-events", type=int, default=0, help="time migrations 0053-0055 over these events")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--plain", action="store_true", help="plain-text tables")
    args = parser.parse_args()
    wanted = [int(s) for s in args.sizes.split(",") if s] or [args.runs // 10, args.runs]
    results: dict[str, Any] = {"machine": machine(), "days": args.days, "sizes": []}
    if args.migrate_runs:
        window = await migration_window(args.store, args.migrate_runs, args.days)
        results["migration"] = {**window, "loadavg": _loadavg()}
        print(f"migration 0038 over {window['runs']:,} runs: {window['seconds']:.1f}s (load average {_loadavg()})")
    if args.migrate_events:
        window = await history_events.migration_window(args.store, _url(args.store, f"{DB}_old"), args.migrate_events)
        results["events_migration"] = {**window, "loadavg": _loadavg()}
        print(
            f"migrations 0053-0055 over {window['events']:,} events (a delivery each, a tenth as many firings):"
            f" {window['seconds']:.1f}s (load average {_loadavg()})"
        )
    url = await create(args.store, args.days)
    try:
        if args.events:
            await events_retention(url, args, results)
        if args.events_only:
            wanted = []
        per_day = 0
        for size in wanted:
            started = time.perf_counter()
            more = size // args.days - per_day
            fill(url, args.days, per_day, more, verbose=True)
            per_day += more
            load = time.perf_counter() - started
            found = sizes(url)
            times = await reads(url, args.reads)
            results["sizes"].append({**found, "load_s": load, "reads_ms": times, "loadavg": _loadavg()})
            print_table(
                f"{found['runs']:,.0f} runs ({found['lockgate_bytes'] / found['runs']:,.0f} bytes/run;"
                f" loaded in {load:.0f}s; load average {_loadavg()})",
                ["read", "median ms"],
                [[k, v] for k, v in times.items()],
                plain=args.plain,
            )
        if not wanted:
            return
        oldest = await _oldest_day(url)
        before = await asyncio.to_thread(old_delete, url, oldest, args.sample)
        after = await asyncio.to_thread(new_retire, url, oldest)
        results["retention"] = {"delete": before, "partition": after, "loadavg": _loadavg()}
        print_table(
            f"retention of the oldest day (load average {_loadavg()})",
            ["way", "runs", "seconds", "runs/s", "history s", "history runs/s"],
            [
                [name, r["runs"], r["seconds"], r["runs_per_s"], r["history_s"], r["runs"] / r["history_s"]]
                for name, r in (("DELETE run by run (a sample)", before), ("partition retired", after))
            ],
            plain=args.plain,
        )
        print(f"seconds per statement, run by run: {_spent(before)}")
        print(f"seconds per statement, partition retired: {_spent(after)}")
        ledger_day = await _oldest_ledger_day(url)
        ledger_before = await asyncio.to_thread(ledger_delete, url, ledger_day, args.sample)
        ledger_after = await asyncio.to_thread(ledger_drop, url, ledger_day)
        results["ledger_retention"] = {"delete": ledger_before, "partition": ledger_after, "loadavg": _loadavg()}
        print_table(
            f"ledger retention of the oldest day (load average {_loadavg()})",
            ["way", "decisions", "seconds", "decisions/s"],
            [
                [name, r["rows"], r["seconds"], r["rows_per_s"]]
                for name, r in (("DELETE 500 a commit (a sample)", ledger_before), ("partition dropped", ledger_after))
            ],
            plain=args.plain,
        )
        second = await _oldest_day(url)
        load_delete = await sustained(url, args.load_seconds, args.rate, lambda: old_delete(url, second, args.sample))
        third = await _oldest_day(url)
        load_drop = await sustained(url, args.load_seconds, args.rate, lambda: new_retire(url, third))
        results["sustained"] = {"delete": load_delete, "partition": load_drop, "loadavg": _loadavg()}
        print_table(
            f"{args.load_seconds:.0f}s of starts at {args.rate:.0f}/s beside each retention"
            f" (load average {_loadavg()})",
            ["retention beside", "starts/s", "runs retired", "rows deleted", "dead tuples", "dead/run", "autovacuums"],
            [
                [
                    name,
                    r["starts_per_s"],
                    r["retired"]["runs"],
                    r["rows_deleted"],
                    r["dead_tuples_added"],
                    r["dead_per_run_retired"],
                    r["autovacuum_runs"],
                ]
                for name, r in (("DELETE run by run", load_delete), ("partition retired", load_drop))
            ],
            plain=args.plain,
        )
    finally:
        if not args.keep:
            _admin(args.store, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        path = write_json("bench/results/history.json", results)
        print(f"written to {path}")


async def events_retention(url: str, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """The oldest day of domain events, deliveries and firings retired both ways (``bench/history_events.py``)."""
    load = await asyncio.to_thread(history_events.fill_events, url, args.days, args.events)
    found = await history_events.retention_rows(url, args.sample)
    results["events_retention"] = {"per_day": args.events, "load_s": load, **found, "loadavg": _loadavg()}
    print_table(
        f"retention of the oldest day of {args.events:,} events (a delivery each, a tenth as many firings;"
        f" loaded in {load:.0f}s; load average {_loadavg()})",
        ["table", "way", "rows", "seconds", "rows/s"],
        [
            [table.removeprefix("lockgate_"), name, r["rows"], r["seconds"], r["rows_per_s"]]
            for table, ways in found.items()
            for name, r in (("DELETE 500 a commit (sample)", ways["delete"]), ("partition retired", ways["partition"]))
        ],
        plain=args.plain,
    )


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


if __name__ == "__main__":
    asyncio.run(main())
