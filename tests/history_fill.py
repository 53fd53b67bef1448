"""A PostgreSQL database holding ten days of history at size, filled once and shared (test_history_plans.py).

Filling it takes most of half a minute of the server's time, so every test process (each xdist worker, and
each later session on the same day and schema) reads the one database of a fixed name instead of filling its
own. The first process to need it takes a lock file, fills a database under a temporary name, writes the
``lockgate_test_filled`` table last and only then renames the database to the shared name: a database of
that name is always complete. Its name carries a digest of the migrations and of the fill (a new schema or
a new fill is a new database) and the day (the partitions are made ahead of the moment of the fill).
Nothing but reads ever touches it: the tests only EXPLAIN.

A session that collects the plan tests starts the fill on a thread of its own (``prefill``), so it overlaps
the tests that run before them. A session killed mid-fill leaves the temporary database to the next
session's ``drop_abandoned`` (tests/pg.py); shared databases of other digests or days are dropped an hour
after their fill, when nobody is connected.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import lockgate as lg
from lockgate.store import history
from lockgate.store.sql_files import migrations

from .pg import PG_ADMIN_URL, _migrate, _test_database_name, admin, database_url, run_in_thread, unavailable

DAYS = 10
PER_DAY = 10_000
_PREFIX = "lockgate_plans_"
_LOCK = Path(tempfile.gettempdir()) / "lockgate-test-history.lock"
_STALE_AFTER = 3600.0  # no session reads a shared database this long after it started to use it


async def _fill(url: str) -> str:
    """Ten daily partitions ahead of now, each filled; a run id in the middle one."""
    now = time.time()
    async with lg.Client(lg.App(), url) as client:
        await client.core.store.write(history.make_ahead, now, 86400.0, now + DAYS * 86400.0)
        parts = [p for p in await client.core.store.read(history.partitions) if p.lo is not None and p.hi]
    assert len(parts) >= DAYS
    with psycopg.connect(url, autocommit=True) as conn:
        for part in parts:
            start_ms = round((part.ends_at or 0) * 1000) - 86_400_000 + 1000
            ids = (
                f"SELECT left(lockgate_id_floor('run', {start_ms} + g), 14) || lpad(to_hex(g), 14, '0') AS id, g "
                f"FROM generate_series(1, {PER_DAY}) g"
            )
            conn.execute(
                f"INSERT INTO lockgate_journal (run_id, step_key, seq, kind, status, started_at) "
                f"SELECT id, 'step#0', 0, 'step', 'completed', g FROM ({ids}) s"
            )
            conn.execute(
                f"INSERT INTO lockgate_step_attempts (run_id, step_key, attempt, status, started_at) "
                f"SELECT id, 'step#0', 1, 'completed', g FROM ({ids}) s"
            )
            conn.execute(
                f"INSERT INTO lockgate_run_events (run_id, type, at) SELECT id, 'run-started', g FROM ({ids}) s"
            )
            conn.execute(
                "INSERT INTO lockgate_stream_chunks (run_id, topic, seq, kind, data, size, created_at)"
                f" SELECT id, 'default', n, 'chunk', '\"w\"', 3, g FROM ({ids}) s, generate_series(1, 2) n"
            )
            conn.execute(
                "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at,"
                " progress_at, finished_at, parent_id) SELECT id, 'w', id, 'succeeded', '{}', t, t, t, t + 1,"
                f" CASE WHEN g % 10 = 0 THEN 'run_parent' END"
                f" FROM (SELECT *, ({start_ms} + g) / 1000.0 AS t FROM ({ids}) i) s"
            )
            conn.execute(
                "INSERT INTO lockgate_messages (id, run_id, kind, name, status, created_at)"
                f" SELECT 'msg_' || id, id, 'signal', 'go', 'consumed', g FROM ({ids}) s"
            )
            conn.execute(  # a decision a run, made when the run was (the ledger's partitions are by time)
                "INSERT INTO lockgate_ledger (ticket, kind, workflow, outcome, folded, pending_id, run_id, at)"
                " SELECT 'tkt_' || id, 'start', 'w', 'admitted', 1, CASE WHEN g % 10 = 0 THEN 'pnd_' || id END,"
                f" id, ({start_ms} + g) / 1000.0 FROM ({ids}) s"
            )
        conn.execute(
            "ANALYZE lockgate_journal, lockgate_step_attempts, lockgate_run_events, lockgate_stream_chunks,"
            " lockgate_runs, lockgate_messages, lockgate_ledger"
        )
        middle = parts[len(parts) // 2]
        row = conn.execute("SELECT min(run_id) FROM lockgate_journal WHERE run_id >= %s", (middle.lo,)).fetchone()
    assert row is not None
    return str(row[0])


FIRINGS_PER_DAY = PER_DAY // 10


def event_partition_starts(conn: psycopg.Connection[Any]) -> list[float]:
    """Where each dated partition of ``lockgate_events`` starts (epoch seconds), oldest first."""
    rows = conn.execute(
        "SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''([^'']*)''\\)')::float8"
        " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'lockgate_events'::regclass AND c.relname ~ '_p[0-9]{12}$' ORDER BY 1"
    ).fetchall()
    return [float(r[0]) for r in rows]


def _fill_events(url: str) -> None:
    """Each dated partition of events: PER_DAY events, a delivery each and a tenth as many firings (a few
    deliveries pending and firings live in each day), for the plan pins of migrations 0053-0055."""
    with psycopg.connect(url, autocommit=True) as conn:
        starts = event_partition_starts(conn)
        for day, start in enumerate(starts):
            step = 86400.0 / PER_DAY
            conn.execute(
                "INSERT INTO lockgate_events (id, name, key, data, source, occurred_at, cancel_swept_at)"
                f" SELECT 'evt_{day}_' || g, 'order.paid', '{{}}', '{{}}', 'api', {start} + g * {step},"
                f" CASE WHEN g % 1000 = 0 THEN NULL ELSE {start} + g * {step} END"
                f" FROM generate_series(0, {PER_DAY - 1}) g"
            )
            conn.execute(
                "INSERT INTO lockgate_deliveries (id, event_id, trigger_name, workflow, status, idempotency_key,"
                " created_at) SELECT 'dlv_' || e.id, e.id, 'on-paid', 'w',"
                " CASE WHEN right(e.id, 3) = '000' THEN 'pending' ELSE 'started' END, 'key-' || e.id, e.occurred_at"
                f" FROM lockgate_events e WHERE e.id LIKE 'evt\\_{day}\\_%'"
            )
            step = 86400.0 / FIRINGS_PER_DAY
            conn.execute(
                "INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, cause, workflow, source, identity,"
                " idempotency_key, status, claimed_at, lease_until) SELECT 's' || (g % 50), t, 'cron', 'w',"
                " 'schedule:s', 'w' || t, 'k' || t, CASE WHEN g % 500 = 0 THEN 'claimed' ELSE 'succeeded' END,"
                f" t, t + 5 FROM (SELECT g, {start} + g * {step} AS t"
                f" FROM generate_series(0, {FIRINGS_PER_DAY - 1}) g) s"
            )
        conn.execute("ANALYZE lockgate_events, lockgate_deliveries, lockgate_schedule_firings, lockgate_event_ids")


def shared_name() -> str:
    """The shared database's name: this schema's and this fill's digest, and today's date (UTC)."""
    digest = hashlib.sha1(f"{DAYS} {PER_DAY}\n{inspect.getsource(_fill)}{inspect.getsource(_fill_events)}".encode())
    for version, name, sql in migrations("postgres"):
        digest.update(f"{version} {name}\n{sql}".encode())
    return f"{_PREFIX}{digest.hexdigest()[:12]}_{time.strftime('%Y%m%d', time.gmtime())}"


def _complete(name: str) -> str | None:
    """The middle run's id, when the shared database ``name`` is there (it is only ever there complete)."""
    with psycopg.connect(PG_ADMIN_URL, connect_timeout=5) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            return None
    try:
        with psycopg.connect(database_url(name), connect_timeout=5) as conn:
            row = conn.execute("SELECT run_id FROM lockgate_test_filled").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return None if row is None else str(row[0])


def _build(name: str) -> str:
    """Fill a database under a temporary name, mark it filled, then rename it to ``name``."""
    temporary = _test_database_name()  # named as tests/pg.py's, so a killed session's is dropped later
    admin(f'CREATE DATABASE "{temporary}"')
    try:
        url = database_url(temporary)
        run_in_thread(_migrate(url))
        run_id = run_in_thread(_fill(url))
        _fill_events(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE lockgate_test_filled (run_id text NOT NULL)")
            conn.execute("INSERT INTO lockgate_test_filled VALUES (%s)", (run_id,))
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # one of that name without its mark
        deadline = time.monotonic() + 30
        while True:
            try:  # a closed session's backend may still be ending: the rename waits for it
                admin(f'ALTER DATABASE "{temporary}" RENAME TO "{name}"')
                break
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        admin(f"COMMENT ON DATABASE \"{name}\" IS 'filled at {time.time():.0f}'")
    except BaseException:
        admin(f'DROP DATABASE IF EXISTS "{temporary}" WITH (FORCE)')
        raise
    return str(run_id)


def _drop_stale(keep: str) -> None:
    """Drop the shared databases of other schemas, fills or days, filled long ago and unused now."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
            " WHERE datname LIKE %s AND datname <> %s",
            (_PREFIX + "%", keep),
        ).fetchall()
        for datname, comment in rows:
            filled = str(comment or "").removeprefix("filled at ")
            if filled.isdigit() and float(filled) < time.time() - _STALE_AFTER:
                try:  # without FORCE: a database someone reads stays
                    conn.execute(f'DROP DATABASE IF EXISTS "{datname}"')
                except psycopg.errors.ObjectInUse:
                    pass


def shared_history(*, wait: bool = True) -> tuple[str, str] | None:
    """The shared database's URL and its middle run's id, filled first if nobody has yet.

    ``wait=False``: ``None`` at once when another process is filling it.
    """
    name = shared_name()
    run_id = _complete(name)
    if run_id is None:
        with open(_LOCK, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            run_id = _complete(name)  # filled while this process waited
            if run_id is None:
                run_id = _build(name)
                _drop_stale(name)
    return database_url(name), run_id


def history_database() -> tuple[str, str]:
    """``shared_history()`` for a fixture: skipped (failed under CI) where PostgreSQL does not answer."""
    try:
        found = shared_history()
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")
    assert found is not None
    return found


def prefill() -> None:
    """Start the fill on a thread of this process's own, unless another process is filling already."""

    def work() -> None:
        try:
            shared_history(wait=False)
        except Exception:  # the fixture fills (or reports) for itself
            pass

    threading.Thread(target=work, name="lockgate-history-fill", daemon=True).start()
