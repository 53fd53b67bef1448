"""The runs' counts by workflow and status, and each workflow's last success, kept on PostgreSQL (migration
0040: a trigger appends each statement's changes, the counts sweep folds them in): what /metrics and
``lockgate stats`` read, without a pass over the runs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

import lockgate as lg
from lockgate.store import history
from lockgate.store import runs as store_runs
from lockgate.store.sql_files import load_queries, migrations
from lockgate.sweeps.counts import fold_counts
from lockgate.sweeps.retention import forget_expired
from lockgate.testing import TestEnv

from .pg import pg_database_url
from .test_history_partitions import Go, Job


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="counts.steps")
    async def steps(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("double", lambda n: n * 2, p.n))

    @app.workflow(name="counts.waits")
    async def waits(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    @app.workflow(name="counts.fails")
    async def fails(ctx: lg.Context, p: Job) -> int:
        raise lg.NonRetryableError("no")

    return app


def _counted(url: str) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
    """The runs counted one by one, and each workflow's newest success: what the kept counts must say."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT workflow, status, COUNT(*) FROM lockgate_runs GROUP BY 1, 2").fetchall()
        last = conn.execute(
            "SELECT workflow, MAX(finished_at) FROM lockgate_runs WHERE status = 'succeeded' GROUP BY 1"
        ).fetchall()
    return {(r[0], r[1]): int(r[2]) for r in rows}, {r[0]: float(r[1]) for r in last if r[1] is not None}


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


async def _kept(engine: lg.Engine) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
    rows, _ = await engine.store.read(store_runs.count_runs)
    return {(r["workflow"], r["status"]): int(r["n"]) for r in rows}, await engine.store.read(store_runs.last_successes)


async def test_the_counts_follow_starts_ends_cancels_and_retention(pg_url: str) -> None:
    now = time.time()
    async with TestEnv(make_app(), store=pg_url, start=now, retention="1h", history_partition="hour") as env:
        engine = env.engine
        await engine.store.write(history.make_ahead, now - 7200, 3600.0, now + 3 * 3600)
        done = [await engine.start("counts.steps", {"n": i}) for i in range(3)]
        for h in done:
            await h.result(timeout=10)
        failed = await engine.start("counts.fails", {})
        waiting = [await engine.start("counts.waits", {"n": i}) for i in range(3)]
        await env.settle()
        assert (await engine.get_run(failed.run_id)).status == "failed"
        await engine.cancel(waiting[0].run_id)
        await engine.signal(waiting[1].run_id, "go", {})
        assert await waiting[1].result(timeout=10) == 1
        await env.settle()
        assert await _kept(engine) == _counted(pg_url)  # the counts folded so far (none) and the changes
        assert await fold_counts(engine.worker) > 0
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_run_count_changes") == 0
        assert await _kept(engine) == _counted(pg_url)  # all folded
        counts, _ = await _kept(engine)
        assert counts[("counts.steps", "succeeded")] == 3 and counts[("counts.waits", "running")] == 1
        # retention: its partition retired (a range DELETE, counted a statement at a time), then one by one
        await env.advance("3h")
        forgotten = await forget_expired(engine.worker, engine.retention, history_partition=3600.0)
        assert forgotten.runs == 6
        assert await _kept(engine) == _counted(pg_url)
        counts, last = await _kept(engine)
        assert counts == {("counts.waits", "running"): 1} and last == {}  # no success kept: none reported
        await fold_counts(engine.worker)
        assert await _kept(engine) == _counted(pg_url)
        await engine.signal(waiting[2].run_id, "go", {})
        assert await waiting[2].result(timeout=10) == 2
        assert await _kept(engine) == _counted(pg_url)
        await env.advance("2h")
        assert (await forget_expired(engine.worker, engine.retention, history_partition=3600.0)).runs == 1
        assert await _kept(engine) == ({}, {})


def test_writers_counting_the_same_workflow_do_not_wait_for_each_other(pg_url: str) -> None:
    insert = (
        "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at)"
        " VALUES (%s, 'w', %s, 'succeeded', '{}', 0, 0, 0)"
    )
    with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
        first.execute(insert, ("run_a", "run_a"))
        second.execute("SET lock_timeout = '2s'")
        second.execute(insert, ("run_b", "run_b"))  # changes are appended: no wait for the first's
        second.commit()
        first.commit()
    assert _counted(pg_url)[0] == {("w", "succeeded"): 2}
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(load_queries("postgres")["count_runs_by_status"]).fetchall()
    assert [tuple(r) for r in rows] == [("w", "succeeded", 2)]


def test_the_reads_of_the_counts_never_read_the_runs(pg_url: str) -> None:
    queries = load_queries("postgres")
    with psycopg.connect(pg_url) as conn:
        for name in ("count_runs_by_status", "last_successes"):
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + queries[name]).fetchall())
            assert "lockgate_run_counts" in plan and "lockgate_runs " not in plan, plan
            assert "lockgate_run_count_changes" in plan, plan


@pytest.fixture
def empty_pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


def test_the_migration_counts_the_runs_it_finds(empty_pg_url: str) -> None:
    steps = migrations("postgres")
    with psycopg.connect(empty_pg_url, autocommit=True) as conn:
        for version, _, script in steps:
            if version < 40:
                conn.execute(script)  # type: ignore[arg-type]
        conn.execute(
            "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at,"
            " progress_at, finished_at) SELECT 'run_' || g, 'w' || g % 2, 'run_' || g,"
            " CASE WHEN g % 3 = 0 THEN 'running' ELSE 'succeeded' END, '{}', g, g, g, g"
            " FROM generate_series(1, 30) g"
        )
        for version, _, script in steps:
            if version >= 40:
                conn.execute(script)  # type: ignore[arg-type]
        queries = load_queries("postgres")
        counts = {(r[0], r[1]): int(r[2]) for r in conn.execute(queries["count_runs_by_status"]).fetchall()}
        last = {r[0]: float(r[1]) for r in conn.execute(queries["last_successes"]).fetchall()}
    assert (counts, last) == _counted(empty_pg_url)
    assert counts == {("w0", "succeeded"): 10, ("w0", "running"): 5, ("w1", "succeeded"): 10, ("w1", "running"): 5}
