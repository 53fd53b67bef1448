"""Retention of domain events, deliveries and schedule firings in ``bench.history``: DELETE before vs drop after.

Each day partition of ``lockgate_events``, ``lockgate_deliveries`` and ``lockgate_schedule_firings`` (made with
the run history's, migrations 0053-0055) is filled with ``per_day`` events, a settled delivery each, and a tenth
as many finished firings, loaded straight into the tables. Then, table by table, a day is retired two ways: as
retention did before the partitions, 500 rows a commit by the table's time index (a sample of at most
``sample`` rows of the oldest day), and as the sweep does now, the next day's partition retired whole
(``store/timed.py retire``: what outlives it moved first, here nothing, then the drop).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

import lockgate as lg
from lockgate.store import history, timed
from lockgate.store.sql_files import migrations

__all__ = ["TABLES", "fill_events", "migration_window", "retention_rows"]

DAY = 86400.0
TABLES = timed.TABLES
# Retention before partitioning, 500 rows a commit by each table's time index (the cutoff named on both reads,
# so that on the partitioned table, too, the rows before it alone are read: the same work as on one table).
OLD_DELETE = {
    timed.EVENTS: "DELETE FROM lockgate_events WHERE occurred_at < %(cutoff)s AND id = ANY (ARRAY("
    "SELECT id FROM lockgate_events WHERE occurred_at < %(cutoff)s LIMIT 500))",
    timed.DELIVERIES: "DELETE FROM lockgate_deliveries WHERE created_at < %(cutoff)s AND id = ANY (ARRAY("
    "SELECT id FROM lockgate_deliveries WHERE created_at < %(cutoff)s AND status <> 'pending' LIMIT 500))",
    timed.FIRINGS: "DELETE FROM lockgate_schedule_firings WHERE scheduled_at < %(cutoff)s AND id = ANY (ARRAY("
    "SELECT id FROM lockgate_schedule_firings WHERE claimed_at < %(cutoff)s"
    " AND status IN ('skipped', 'succeeded', 'failed', 'cancelled') LIMIT 500))",
}


def fill_events(url: str, days: int, per_day: int) -> float:
    """``per_day`` events (a settled delivery each) and ``per_day / 10`` finished firings in each of the last
    ``days`` days' partitions; seconds taken."""
    started = time.perf_counter()
    today = time.time() // DAY * DAY
    firings = max(per_day // 10, 1)
    with psycopg.connect(url, autocommit=True) as conn:
        for d in range(days):
            day = today - (days - 1 - d) * DAY
            conn.execute(
                "INSERT INTO lockgate_events (id, name, key, data, source, occurred_at, cancel_swept_at)"
                f" SELECT 'evt_{d}_' || g, 'order.paid', '{{\"order\": \"o' || g || '\"}}', '{{\"amount\": 100}}',"
                f" 'api', {day} + g * {DAY / per_day}, {day} + g * {DAY / per_day}"
                f" FROM generate_series(0, {per_day - 1}) g"
            )
            conn.execute(
                "INSERT INTO lockgate_deliveries (id, event_id, trigger_name, workflow, status, idempotency_key,"
                " outcome, run_id, created_at, delivered_at) SELECT 'dlv_' || id, id, 'on-paid', 'charge',"
                " 'started', id || ':on-paid', 'started', 'run_' || id, occurred_at, occurred_at + 0.1"
                f" FROM lockgate_events WHERE occurred_at >= {day} AND occurred_at < {day + DAY}"
            )
            conn.execute(
                "INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, cause, workflow, source, identity,"
                " idempotency_key, status, claimed_at, started_at, finished_at) SELECT 's' || (g % 100), t, 'cron',"
                " 'report', 'schedule:s', 'report' || t, 'k' || t, 'succeeded', t, t, t + 1"
                f" FROM (SELECT g, {day} + g * {DAY / firings} AS t FROM generate_series(0, {firings - 1}) g) s"
            )
        conn.execute("VACUUM ANALYZE lockgate_events, lockgate_deliveries, lockgate_schedule_firings")
    return time.perf_counter() - started


async def _oldest(url: str, table: str, n: int = 0) -> history.Partition:
    """``table``'s ``n``-th oldest partition (0: the oldest)."""
    async with lg.Client(lg.App(), url) as client:
        parts = [p for p in await client.core.store.read(timed.partitions, table) if p.hi is not None]
    return sorted(parts, key=lambda p: p.ends_at or 0)[n]


def _delete(url: str, table: str, part: history.Partition, most: int) -> dict[str, Any]:
    cutoff, rows, started = (part.ends_at or 0), 0, time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while rows < most:
            n = conn.execute(OLD_DELETE[table], {"cutoff": cutoff}).rowcount
            rows += n
            if n < 500:
                break
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def _drop(url: str, table: str, part: history.Partition) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        (rows,) = conn.execute(f"SELECT count(*) FROM {table}_{part.suffix}").fetchone() or (0,)

    async def run() -> float:
        async with lg.Client(lg.App(), url) as client:
            started = time.perf_counter()
            await client.core.store.write(timed.retire, table, part, (part.ends_at or 0) + 1)
            return time.perf_counter() - started

    seconds = asyncio.run(run())
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


async def retention_rows(url: str, sample: int) -> dict[str, dict[str, Any]]:
    """Each table's day retired both ways: ``{table: {"delete": ..., "partition": ...}}`` (rows, seconds, rows per
    second): a sample of the oldest day deleted 500 a commit, then the next day's partition retired whole."""
    found: dict[str, dict[str, Any]] = {}
    for table in TABLES:  # deliveries before events, as the sweep retires them
        oldest, following = await _oldest(url, table, 0), await _oldest(url, table, 1)
        before = await asyncio.to_thread(_delete, url, table, oldest, sample)
        after = await asyncio.to_thread(_drop, url, table, following)
        found[table] = {"delete": before, "partition": after}
    return found


def _fill_plain(url: str, events: int) -> None:
    """``events`` events of the last day (a settled delivery each, a tenth as many firings) in the tables as they
    were before migration 0054."""
    start = time.time() - DAY
    firings = max(events // 10, 1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO lockgate_events (id, name, key, data, source, occurred_at, cancel_swept_at)"
            " SELECT 'evt_' || g, 'order.paid', '{}', '{\"amount\": 100}', 'api', t, t"
            f" FROM (SELECT g, {start} + g * {DAY / events} AS t FROM generate_series(0, {events - 1}) g) s"
        )
        conn.execute(
            "INSERT INTO lockgate_deliveries (id, event_id, trigger_name, workflow, status, created_at)"
            " SELECT 'dlv_' || id, id, 'on-paid', 'charge', 'started', occurred_at FROM lockgate_events"
        )
        conn.execute(
            "INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, cause, workflow, source, identity,"
            " idempotency_key, status, claimed_at) SELECT 's' || (g % 100), t, 'cron', 'report', 'schedule:s',"
            " 'report' || t, 'k' || t, 'succeeded', t"
            f" FROM (SELECT g, {start} + g * {DAY / firings} AS t FROM generate_series(0, {firings - 1}) g) s"
        )
        conn.execute("VACUUM ANALYZE")


async def migration_window(admin: str, url: str, events: int) -> dict[str, float]:
    """How long migrations 0053-0055 hold the tables: a database at the schema before them (made at ``url``
    through ``admin``), holding ``events`` events with their deliveries and firings, migrated by this lockgate
    (timed: the window in which publishes, deliveries and claims wait)."""
    db = url.rpartition("/")[2]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE lockgate_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            for version, name, sql in migrations("postgres"):
                if version < 53:
                    conn.execute(sql)
                    conn.execute("INSERT INTO lockgate_migrations VALUES (%s, %s, 0)", (version, name))
        _fill_plain(url, events)
        started = time.perf_counter()
        async with lg.Client(lg.App(), url):  # applies 0053-0055
            pass
        return {"events": events, "seconds": time.perf_counter() - started}
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
