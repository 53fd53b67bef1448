"""Time-partitioned run history on PostgreSQL (docs/history.md): partitions made ahead on the clock, only
expired ones dropped, the rows of runs retention keeps moved out first; SQLite keeps its tables."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli import cli
from lockgate.history import partition_interval
from lockgate.ids import id_floor, id_millis, new_id
from lockgate.store import history
from lockgate.store import streams as store_streams
from lockgate.store.sql_files import migrations
from lockgate.sweeps import retention as retention_sweep
from lockgate.sweeps.retention import forget_expired, keep_partitions
from lockgate.testing import TestEnv

from .apps.waits import eventually


class Job(BaseModel):
    n: int = 1


class Go(BaseModel):
    ok: bool = True


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="hist.steps")
    async def steps(ctx: lg.Context, p: Job) -> int:
        await ctx.stream("steps")
        return int(await ctx.step("double", lambda n: n * 2, p.n))

    @app.workflow(name="hist.waits")
    async def waits(ctx: lg.Context, p: Job) -> int:
        await ctx.stream("before")
        await ctx.step("before", lambda n: n, p.n)
        await ctx.wait_for_signal("go", Go)
        await ctx.stream("after")
        return p.n

    return app


TABLES = ("lockgate_journal", "lockgate_step_attempts", "lockgate_run_events", "lockgate_stream_chunks")
"""The tables partitioned alike by range of run id (migrations 0038, 0051)."""


def _bounds(url: str, table: str) -> dict[str, str]:
    """Each partition of ``table`` by suffix, with its bounds as the catalog states them."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            (table,),
        ).fetchall()
    return {str(name).removeprefix(table + "_"): str(bound) for name, bound in rows}


def _suffixes(parts: list[history.Partition]) -> list[str]:
    return sorted(p.suffix for p in parts)


def _count(url: str, sql: str, *args: object) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


def test_an_id_bound_sorts_between_the_ids_made_before_and_after_it() -> None:
    before = new_id("run")
    millis = id_millis(before) + 1
    bound = id_floor("run", millis)
    time.sleep(0.003)
    after = new_id("run")
    assert before < bound < after
    assert id_millis(bound) == millis and id_millis(after) >= millis


def test_the_database_computes_the_bounds_as_the_ids_do(pg_url: str) -> None:
    for millis in (0, 1, 1_796_578_062_123, 2**48 - 1):
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT lockgate_id_floor('run', %s)", (millis,)).fetchone()
        assert row is not None and row[0] == id_floor("run", millis)
    made = new_id("run")
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT lockgate_id_millis(%s), lockgate_id_millis('not-an-id')", (made,)).fetchone()
    assert row == (id_millis(made), None)


def test_an_unknown_interval_or_a_retention_shorter_than_it_is_refused_naming_the_field() -> None:
    with pytest.raises(lg.InvalidHistoryOption, match="history_partition: unknown partition interval 'fortnight'") as e:
        lg.Engine(make_app(), "sqlite:///unused.db", history_partition="fortnight")
    assert e.value.field == "history_partition"
    with pytest.raises(lg.InvalidHistoryOption, match="retention: 1d is shorter than") as e:
        lg.Engine(make_app(), "sqlite:///unused.db", retention="1d", history_partition="week")
    assert e.value.field == "retention" and isinstance(e.value, ValueError)
    # by default a day, or an hour under a retention shorter than a day; no retention: a day
    assert partition_interval(None, 30 * 86400.0) == 86400.0
    assert partition_interval(None, 3600.0) == 3600.0
    assert partition_interval("week", None) == 7 * 86400.0


def test_serve_refuses_them_naming_the_option() -> None:
    result = CliRunner().invoke(cli, ["serve", "tests.apps.waits:app", "--history-partition", "fortnight"])
    assert result.exit_code == 2 and "--history-partition" in result.output
    result = CliRunner().invoke(
        cli, ["serve", "tests.apps.waits:app", "--retention", "2h", "--history-partition", "day"]
    )
    assert result.exit_code == 2 and "'--retention'" in result.output and "shorter than" in result.output


async def test_sqlite_keeps_its_tables_and_makes_no_partitions(tmp_path: Any) -> None:
    async with TestEnv(make_app(), store=f"sqlite:///{tmp_path}/h.db") as env:
        assert await env.engine.store.read(history.partitions) == []
        assert await keep_partitions(env.engine.worker, 3600.0, 86400.0) == (0, 0, 0)


async def test_partitions_are_made_ahead_across_a_day_boundary_on_the_clock(pg_url: str) -> None:
    start = datetime(2031, 3, 9, 22, 0, tzinfo=UTC).timestamp()  # two hours before midnight, UTC
    async with TestEnv(make_app(), store=pg_url, start=start, history_partition="day") as env:
        worker = env.engine.worker
        made, dropped, _ = await keep_partitions(worker, None, 86400.0)
        parts = await env.engine.store.read(history.partitions)
        # the next two days ahead of the clock; the first partition (the tables before 0038) and the default
        assert _suffixes(parts) == ["kept", "p0", "p203103100000", "p203103110000"]
        assert (made, dropped) == (2, 0)
        for table in TABLES:  # every table of the history has the same partitions, bound for bound
            assert _bounds(pg_url, table) == _bounds(pg_url, "lockgate_journal")
        # the ledger's, by time, with the same suffixes and times
        ledger = {p.suffix: p for p in await env.engine.store.read(history.ledger_partitions)}
        for part in history.dated(parts):
            assert (ledger[part.suffix].begins_at, ledger[part.suffix].ends_at) == (part.begins_at, part.ends_at)
        await env.advance("1h")
        assert await keep_partitions(worker, None, 86400.0) == (0, 0, 0)  # still the 9th: nothing new
        await env.advance("2h")  # past midnight: the 10th has begun, the 12th is two days ahead
        assert await keep_partitions(worker, None, 86400.0) == (1, 0, 0)
        parts = await env.engine.store.read(history.partitions)
        assert _suffixes(parts)[-1] == "p203103120000"
        ends = sorted(p.ends_at for p in parts if p.ends_at is not None)
        assert ends[-1] == datetime(2031, 3, 13, tzinfo=UTC).timestamp()


async def test_retention_drops_only_expired_partitions_and_keeps_a_live_run_older_than_it(pg_url: str) -> None:
    now = time.time()
    async with TestEnv(make_app(), store=pg_url, start=now, retention="1h", history_partition="hour") as env:
        engine = env.engine
        # partitions for the runs created from now on (the clock starts at the wall clock, which ids follow)
        await engine.store.write(history.make_ahead, now - 7200, 3600.0, now + 3 * 3600)
        before = await engine.store.read(history.partitions)
        done = await engine.start("hist.steps", {"n": 2})
        assert await done.result(timeout=10) == 4
        live = await engine.start("hist.waits", {"n": 3})
        await env.settle()
        assert (await engine.get_run(live.run_id)).status == "running"
        here = [p for p in before if p.lo is not None and p.hi is not None and p.lo <= done.run_id < p.hi]
        assert len(here) == 1, before  # both runs' rows sit in the partition of this hour
        table = f"lockgate_journal_{here[0].suffix}"
        assert _count(pg_url, f"SELECT COUNT(*) FROM {table}") == 2
        chunks = f"lockgate_stream_chunks_{here[0].suffix}"  # what they streamed: the same partition
        assert _count(pg_url, f"SELECT COUNT(*) FROM {chunks}") == 2
        decisions = f"lockgate_ledger_{here[0].suffix}"  # the gate's decisions of this hour
        assert _count(pg_url, f"SELECT COUNT(*) FROM {decisions} WHERE run_id IN (%s, %s)", done.run_id, live.run_id)
        ledger_before = {p.suffix for p in await engine.store.read(history.ledger_partitions)}
        await env.advance("3h")  # this hour's partition is past the 1h retention; the later ones are not
        forgotten = await forget(env)
        assert forgotten.runs == 1 and forgotten.partitions_dropped >= 1
        assert forgotten.ledger_partitions_dropped >= 1 and forgotten.ledger_rows == 0  # dropped, not deleted
        ledger_after = {p.suffix for p in await engine.store.read(history.ledger_partitions)}
        assert here[0].suffix not in ledger_after and (ledger_before - ledger_after) <= expired_at(before, env)
        assert ledger_before & ledger_after  # the hours not past retention keep theirs
        theirs = "SELECT COUNT(*) FROM lockgate_ledger WHERE run_id IN (%s, %s)"
        assert _count(pg_url, theirs, done.run_id, live.run_id) == 0
        after = await engine.store.read(history.partitions)
        expired = {p.suffix for p in before if p.ends_at is not None and p.ends_at <= env.clock.now() - 3600}
        assert here[0].suffix in expired
        survivors = {p.suffix for p in before} - expired
        assert survivors and survivors <= {p.suffix for p in after}  # the partitions not yet expired stay
        assert not expired & {p.suffix for p in after}
        with pytest.raises(lg.UnknownRun):
            await engine.get_run(done.run_id)
        assert await engine.steps(done.run_id) == []
        assert await engine.store.read(store_streams.chunks, done.run_id, "default", 0, 10) == []
        # the live run, older than the retention, kept its rows (moved to the default partition) and goes on
        assert [s.key for s in await engine.steps(live.run_id)] == ["before#0"]
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_journal_kept WHERE run_id = %s", live.run_id) == 1
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_stream_chunks_kept WHERE run_id = %s", live.run_id) == 1
        assert len(await engine.events(live.run_id)) >= 1
        await engine.signal(live.run_id, "go", {})
        assert await live.result(timeout=10) == 3
        assert await _streamed(engine, live.run_id) == ["before", "after"]  # its stream went on where it was
        await env.advance("2h")
        assert (await forget(env)).runs == 1
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_journal WHERE run_id = %s", live.run_id) == 0
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_stream_chunks WHERE run_id = %s", live.run_id) == 0


def expired_at(parts: list[history.Partition], env: TestEnv) -> set[str]:
    return {p.suffix for p in parts if p.ends_at is not None and p.ends_at <= env.clock.now() - 3600} | {"p0"}


async def _streamed(engine: Any, run_id: str) -> list[Any]:
    rows = await engine.store.read(store_streams.chunks, run_id, "default", 0, 100)
    return [json.loads(row["data"]) for row in rows]


async def test_a_partition_s_runs_go_with_it_by_range_and_not_one_by_one_before(pg_url: str) -> None:
    now = time.time()
    week = 7 * 86400.0
    async with TestEnv(make_app(), store=pg_url, start=now, retention="1h", history_partition="hour") as env:
        engine = env.engine
        # a partition a week (made by hand: the runs' one ends days after they end, whatever the hour)
        await engine.store.write(history.make_ahead, now - week, week, now + 2 * week)
        done = await engine.start("hist.steps", {"n": 2})
        assert await done.result(timeout=10) == 4
        signalled = await engine.start("hist.waits", {"n": 5})
        await env.settle()
        await engine.signal(signalled.run_id, "go", {})
        assert await signalled.result(timeout=10) == 5
        live = await engine.start("hist.waits", {"n": 3})
        await env.settle()
        parts = history.dated(await engine.store.read(history.partitions))
        (here,) = [p for p in parts if (p.lo or "") <= done.run_id < (p.hi or "")]
        finished = (await engine.get_run(signalled.run_id)).finished_at
        ended = finished.timestamp() if finished else now
        if (here.ends_at or 0) - ended < 120:
            pytest.skip("the runs' week ends within two minutes")  # once in thousands of runs
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_messages WHERE run_id = %s", signalled.run_id) == 1
        # past retention, but their partition is not: the run selection does not read them
        await env.advance(ended - now + ((here.ends_at or 0) - ended) / 2 + 3600)
        assert (await forget(env)).runs == 0
        assert (await engine.get_run(done.run_id)).status == "succeeded"
        # their partition past retention: the expired runs go with it, with their records
        await env.advance((here.ends_at or 0) + 3601 - env.clock.now())
        forgotten = await forget(env)
        assert forgotten.runs == 2 and forgotten.partitions_dropped >= 1
        for gone in (done.run_id, signalled.run_id):
            with pytest.raises(lg.UnknownRun):
                await engine.get_run(gone)
            assert await engine.steps(gone) == []
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_messages WHERE run_id = %s", signalled.run_id) == 0
        # the live run kept its run and its rows, now in the default partition, and goes on
        assert [s.key for s in await engine.steps(live.run_id)] == ["before#0"]
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_journal_kept WHERE run_id = %s", live.run_id) == 1
        await engine.signal(live.run_id, "go", {})
        assert await live.result(timeout=10) == 3
        # ended, it is forgotten one by one: it is older than every partition of one interval left
        await env.advance("2h")
        assert (await forget(env)).runs == 1
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_journal WHERE run_id = %s", live.run_id) == 0
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_messages WHERE run_id = %s", live.run_id) == 0


async def test_a_partition_s_runs_are_forgotten_a_slice_per_commit(pg_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(retention_sweep, "SLICE", 4)  # a few runs a commit: many slices over one day
    day = 86400.0
    start = (time.time() // day + 3) * day  # a day ahead: the store made partitions up to now
    async with lg.Client(make_app(), pg_url) as client:
        store = client.core.store
        await store.write(history.make_ahead, start - day, day, start + day)
        (part,) = [p for p in history.dated(await store.read(history.partitions)) if p.ends_at == start + day]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at,"
                " progress_at, finished_at) SELECT id, 'w', id, CASE WHEN g = 7 THEN 'running' ELSE 'succeeded'"
                " END, '{}', t, t, t, CASE WHEN g = 7 THEN NULL ELSE t + 1 END FROM (SELECT g, t,"
                " left(lockgate_id_floor('run', (t * 1000)::bigint), 14) || lpad(to_hex(g), 14, '0') AS id"
                " FROM (SELECT g, %s + g * 1500.0 AS t FROM generate_series(1, 50) g) s) r",
                (start,),
            )
            conn.execute(
                "INSERT INTO lockgate_messages (id, run_id, kind, name, status, created_at)"
                " SELECT 'msg_' || id, id, 'signal', 'go', 'consumed', 0 FROM lockgate_runs"
            )
        forgotten = await retention_sweep.forget_partition_runs(store, part, start + 2 * day, day)
        assert forgotten == 49
        assert await store.write(history.retire, part, start + 2 * day) == 1  # the live run, kept
    assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_runs") == 1
    assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_messages") == 1  # the live run's


async def forget(env: TestEnv) -> Any:
    return await forget_expired(env.engine.worker, env.engine.retention, history_partition=3600.0)


def _before_0051(url: str) -> None:
    """Turn a migrated store back into what it was before migration 0051: stream chunks in a plain table
    (0032's), the history functions of 0037 and 0039, version 51 not applied. Rows are kept."""
    texts = {version: sql for version, _, sql in migrations("postgres")}
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("ALTER TABLE lockgate_stream_chunks RENAME TO chunks_partitioned")
        conn.execute(
            "CREATE TABLE lockgate_stream_chunks (LIKE chunks_partitioned INCLUDING DEFAULTS INCLUDING IDENTITY)"
        )
        conn.execute("INSERT INTO lockgate_stream_chunks SELECT * FROM chunks_partitioned")
        conn.execute(
            "SELECT setval(pg_get_serial_sequence('lockgate_stream_chunks', 'id'),"
            " (SELECT coalesce(max(id), 0) + 1 FROM chunks_partitioned), false)"
        )
        conn.execute("DROP TABLE chunks_partitioned")
        conn.execute("ALTER TABLE lockgate_stream_chunks ADD PRIMARY KEY (id)")
        conn.execute("CREATE UNIQUE INDEX lockgate_stream_chunks_seq ON lockgate_stream_chunks (run_id, topic, seq)")
        conn.execute(texts[37].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))  # type: ignore[arg-type]
        conn.execute(texts[39])  # type: ignore[arg-type]
        conn.execute("DROP FUNCTION lockgate_history_tables()")
        conn.execute("DELETE FROM lockgate_migrations WHERE version = 51")


def _scalar(url: str, sql: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[call-overload]
        return None if row is None else row[0]


def _partition_of(url: str, table: str, run_id: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE run_id = %s", (run_id,))
        return {str(name).removeprefix(table + "_") for (name,) in rows.fetchall()}


async def test_the_migration_partitions_stream_chunks_with_a_streaming_run_in_flight(pg_url: str) -> None:
    app = make_app()
    async with lg.Engine(app, pg_url, poll_interval=0.05) as engine:
        done = await engine.start("hist.steps", {"n": 2})
        assert await done.result(timeout=10) == 4
        live = await engine.start("hist.waits", {"n": 3})

        async def waiting() -> bool:
            return await _streamed(engine, live.run_id) == ["before"] and bool(await engine.steps(live.run_id))

        await eventually(waiting, timeout=10, what="the run streamed and waits for its signal")
    _before_0051(pg_url)
    kind = "SELECT relkind FROM pg_class WHERE relname = 'lockgate_stream_chunks'"
    assert _scalar(pg_url, kind) == "r"  # a plain table
    async with lg.Engine(app, pg_url, poll_interval=0.05) as engine:  # migrates, then goes on
        assert _scalar(pg_url, kind) == "p"  # partitioned
        for table in TABLES:
            assert _bounds(pg_url, table) == _bounds(pg_url, "lockgate_journal")
        for run_id in (done.run_id, live.run_id):  # each run's chunks in the partition of its journal
            assert _partition_of(pg_url, "lockgate_stream_chunks", run_id) == _partition_of(
                pg_url, "lockgate_journal", run_id
            )
        assert await _streamed(engine, done.run_id) == ["steps"]
        await engine.signal(live.run_id, "go", {})
        assert await engine.result(live.run_id, timeout=10) == 3
        assert await _streamed(engine, live.run_id) == ["before", "after"]
        ids = [row["id"] for row in await engine.store.read(store_streams.chunks, live.run_id, "default", 0, 10)]
        assert ids == sorted(ids) and len(set(ids)) == 2  # the id sequence went on from the old table's


def test_the_ledger_s_partition_of_an_interval_begins_where_its_first_partition_ends(pg_url: str) -> None:
    """The ledger's first partition ends at the moment of migration 0052, within (or past) intervals the run
    history has partitions of: the ledger's partition of such an interval begins at that end, or is not made
    where the first partition covers the interval."""
    day = 86_400_000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in TABLES:  # the run history's first partitions out of the way: intervals before now
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {table}_p0")
        (end,) = conn.execute(
            "SELECT substring(pg_get_expr(relpartbound, oid) FROM 'TO \\(''([^'']*)''\\)')::float8"
            " FROM pg_class WHERE relname = 'lockgate_ledger_p0'"
        ).fetchone() or (0.0,)
        today = int(end * 1000) // day * day
        for lo, suffix in ((today - day, "past"), (today, "today"), (today + day, "next")):
            conn.execute("SELECT lockgate_history_add(%s, %s, %s, '2s')", (lo, lo + day, suffix))
    ledger = {p.suffix: p for p in _ledger_parts(pg_url)}
    assert "past" not in ledger  # the first partition holds that whole day
    assert (ledger["today"].begins_at, ledger["today"].ends_at) == (end, (today + day) / 1000)
    assert (ledger["next"].begins_at, ledger["next"].ends_at) == ((today + day) / 1000, (today + 2 * day) / 1000)
    assert {"past", "today", "next"} <= set(_bounds(pg_url, "lockgate_journal"))


def _ledger_parts(url: str) -> list[history.Partition]:
    found = []
    for suffix, bound in _bounds(url, "lockgate_ledger").items():
        lo, hi = (re.search(rf"{edge} \('([^']*)'\)", bound) for edge in ("FROM", "TO"))
        found.append(history.Partition(suffix, lo and lo[1], hi and hi[1], timed=True))
    return found
