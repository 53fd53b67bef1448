"""One clock for what processes compare, and leases that follow what a worker executes.

On PostgreSQL every process keeps the database's time: a worker whose own clock is 30 s
off (a real ``lockgate serve`` under ``faketime``) takes no live lease and fires no timer
early, reports its offset once, and shows it in ``cluster status``. A run whose row names
a live worker that does not execute it (a claim a failover lost) is released and resumed
at the worker's next heartbeat, on either store.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import sqlite3
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

import lockgate as lg
from lockgate.clock import CLOCK_TOLERANCE, SystemClock
from lockgate.inspect import connect
from lockgate.store import workers as store_workers
from lockgate.store.postgres.stalls import STALLED

from .cluster.app import Job
from .cluster.app import app as cluster_app
from .cluster.harness import Cluster, until
from .pg import in_ci
from .pgserver import PrivatePostgres

pytestmark = pytest.mark.slow

# libfaketime preloaded through ``env`` (which execs): the worker keeps the pid the harness knows it by.
FAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
NAP = 4.0  # seconds each sleeper's durable timer waits


@pytest.mark.parametrize("skew", ["+30s", "-30s"])
async def test_a_worker_with_a_skewed_clock_steals_no_lease_and_fires_no_timer_early(
    cluster: Cluster, pg_url: str, skew: str
) -> None:
    if FAKETIME is None:
        if in_ci():
            pytest.fail("libfaketime is not installed (apt-get install faketime)")
        pytest.skip("libfaketime is not installed")
    cluster.spawn(2, lease="2s", max_runs=4)
    (skewed,) = cluster.spawn(1, lease="2s", max_runs=4, wrap=["env", f"LD_PRELOAD={FAKETIME}", f"FAKETIME={skew}"])
    await cluster.ready()
    async with lg.Client(cluster_app, pg_url) as client:
        steps = [await client.start("cluster.steps", Job(n=i, hold=1.0)) for i in range(24)]
        sleepers = [await client.start("cluster.sleeper", Job(n=i, hold=NAP)) for i in range(8)]
        count = len(steps) + len(sleepers)

        async def all_done() -> bool:
            rows = await cluster.fetch("SELECT count(*) FROM lockgate_runs WHERE status = 'succeeded'")
            return bool(rows[0][0] == count)

        await cluster.guard(until(all_done, timeout=120, what="every run succeeded"))

        effects = await cluster.fetch("SELECT run_id, step, pid, db_at FROM cluster_effects")
        twice = {k: n for k, n in Counter((r[0], r[1]) for r in effects).items() if n > 1}
        detail = [r for r in effects if (r[0], r[1]) in twice]
        assert not twice, f"steps ran more than once (a live lease taken): {detail}\n{cluster.logs()}"
        assert skewed.pid in {r[2] for r in effects}, "the skewed worker executed nothing"
        at = {(r[0], r[1]): r[3] for r in effects}
        early = {h.run_id: at[(h.run_id, "after")] - at[(h.run_id, "before")] for h in sleepers}
        assert all(gap >= NAP - 0.05 for gap in early.values()), f"timers fired early: {early}"
        logs = cluster.logs()
        assert "lease lost" not in logs, logs

        side = "ahead of" if skew.startswith("+") else "behind"
        assert skewed.log().count(f"s {side} the database's") == 1, skewed.log()
        async with connect(pg_url) as inspector:
            status = {w.pid: w for w in (await inspector.cluster_status()).workers}
            report = {f.check: f for f in (await inspector.doctor()).findings}
        assert all(w.state in ("live", "stopped") for w in status.values())
        offset = status[skewed.pid].clock_offset
        assert abs(offset - float(skew[:-1])) < 1.0, status
        assert all(abs(w.clock_offset) < CLOCK_TOLERANCE for pid, w in status.items() if pid != skewed.pid)
        assert report["clocks"].status == "warn", report["clocks"]
        assert report["clocks"].details[0]["clock_offset"] == pytest.approx(offset)


async def test_the_process_keeps_the_database_time_on_postgres_and_its_own_on_sqlite(
    pg_url: str, tmp_path: Path
) -> None:
    async with connect(pg_url) as inspector:
        clock = inspector.clock
        assert isinstance(clock, SystemClock)
        reading = await inspector.store.read(store_workers.read_clock)
        assert abs(clock.now() - reading.database) < 0.5
        assert abs(reading.offset) < CLOCK_TOLERANCE and reading.round_trip < 1.0
    async with connect(f"sqlite:///{tmp_path / 'one.db'}") as inspector:
        assert await store_workers.follow_database(inspector.store, inspector.clock) is None
        assert abs(inspector.clock.now() - time.time()) < 0.1


# -- ownership that matches what a worker executes ---------------------------------------------

owned = lg.App()


@owned.workflow(name="owned.quick")
async def quick(ctx: lg.Context, job: Job) -> int:
    return await ctx.step("one", lambda: job.n)  # type: ignore[no-any-return]


async def test_a_run_naming_a_live_worker_that_does_not_execute_it_is_resumed(store_url: str) -> None:
    """A claim whose commit a failover lost: the row names live worker W at a later epoch, W does not run it."""
    worker_id = "wkr_lostclaim"
    async with lg.Client(owned, store_url) as client:
        handle = await client.start("owned.quick", Job(n=7))
        run_id = handle.run_id
        assert run_id is not None
        now = client.clock.now()
    changed = await _execute(
        store_url,
        "UPDATE lockgate_runs SET owner = {p}, epoch = epoch + 5, lease_until = {p}, entered_at = {p} WHERE id = {p}",
        worker_id,
        now + 3600,
        now - 60,
        run_id,
    )
    assert changed == 1
    async with lg.Engine(owned, store_url, lease="1500ms", worker_id=worker_id) as engine:
        began = time.monotonic()
        assert await engine.result(run_id, timeout=15) == 7
        took = time.monotonic() - began
    assert took < 1.5 + 1.5, f"resumed after {took:.2f}s, more than two heartbeats"


async def test_a_lapsed_lease_is_not_renewed(store_url: str) -> None:
    """A worker frozen past its lease renews nothing on waking, even if no one took its run meanwhile:
    others counted the lease gone (its step slots among them); the run is claimed again at a new epoch."""
    async with lg.Client(owned, store_url) as client:
        handles = [await client.start("owned.quick", Job(n=i)) for i in range(2)]
        now = client.clock.now()
        lapsed, live = (h.run_id for h in handles)
        for run_id, until in ((lapsed, now - 0.5), (live, now + 5)):
            query = "UPDATE lockgate_runs SET owner = {p}, epoch = 3, lease_until = {p} WHERE id = {p}"
            assert await _execute(store_url, query, "wkr_frozen", until, run_id) == 1
        held = {str(lapsed): 3, str(live): 3}
        renewal = await client.core.store.write(
            store_workers.renew_leases, "wkr_frozen", now, now + 15, held, {}, now - 60
        )
    assert renewal.held == {live: 3}


async def _execute(url: str, query: str, *params: object) -> int:
    """One statement on the store's database, outside lockgate; the rows it changed."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(query.format(p="?"), params).rowcount
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query.format(p="%s"), params)
        return cursor.rowcount


def test_a_clock_following_a_reading_keeps_its_time() -> None:
    """``follow`` shifts the process's clock by the offset read; ``sleep_until`` waits by the shifted clock."""
    from lockgate.clock import ClockReading

    clock = SystemClock()
    assert abs(clock.now() - time.time()) < 0.05
    clock.follow(ClockReading(database=1_000_000.0, offset=time.time() - 1_000_000.0, round_trip=0.0))
    assert 1_000_000.0 <= clock.now() < 1_000_000.5
    assert clock.offset > 1e9
    began = time.monotonic()
    asyncio.run(clock.sleep_until(clock.now() + 0.05))
    assert 0.04 <= time.monotonic() - began < 1.0


def test_a_slow_reading_moves_the_clock_no_further_than_it_knows() -> None:
    """A reading's round trip bounds what it says: one taken across a stall does not shift time by its guess."""
    from lockgate.clock import ClockReading

    clock = SystemClock()
    clock.follow(ClockReading(database=100.0, offset=0.0, round_trip=0.002))
    clock.follow(ClockReading(database=200.0, offset=1.5, round_trip=4.0))  # the request waited 3 s, the answer not
    assert clock.offset == 0.0
    clock.follow(ClockReading(database=300.0, offset=30.0, round_trip=0.004))  # the host's clock stepped
    assert clock.offset == pytest.approx(29.998)
    clock.follow(ClockReading(database=400.0, offset=0.0, round_trip=50.0))
    assert clock.offset == pytest.approx(25.0)  # moved only as far as the slow reading's bounds force it


def test_a_slow_first_reading_moves_the_clock_no_further_than_it_knows() -> None:
    """The first reading too: one taken across a stall at boot (an outage, a starved host) guessed an offset
    of seconds for a process on the database's own host, enough to take live leases and fire timers early
    until the next heartbeat. Its own clock is where a process starts from; a reading moves it only as far
    as the reading's bounds force it."""
    from lockgate.clock import ClockReading

    clock = SystemClock()
    clock.follow(ClockReading(database=100.0, offset=-9.0, round_trip=18.5))
    assert clock.offset == 0.0
    assert abs(clock.now() - time.time()) < 0.05
    skewed = SystemClock()
    skewed.follow(ClockReading(database=100.0, offset=30.0, round_trip=0.004))  # a clock really 30 s ahead
    assert skewed.offset == pytest.approx(29.998)


# -- commits that do not return ----------------------------------------------------------------


async def test_a_commit_waiting_on_a_missing_synchronous_standby_is_reported(
    private_pg: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """``synchronous_standby_names`` naming a standby that is not there: every commit waits; it is said."""
    url = private_pg.create_database()
    caplog.set_level(logging.WARNING, logger="lockgate.store")
    async with lg.Client(owned, url) as client:
        metrics = client.core.metrics()
        private_pg.admin("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        private_pg.admin("SELECT pg_reload_conf()")
        try:
            start = asyncio.ensure_future(client.start("owned.quick", Job(n=1)))

            async def reported() -> bool:
                return "no synchronous standby is connected" in caplog.text

            await until(reported, timeout=STALLED + 10, what="the stalled commit reported")
            assert not start.done()
            assert metrics.registry.get_sample_value("lockgate_store_stalled_commits_total") == 1
            lines = [r for r in caplog.records if "is still waiting" in r.getMessage()]
            assert len(lines) == 1 and "'ghost'" in lines[0].getMessage()
        finally:
            private_pg.admin("ALTER SYSTEM RESET synchronous_standby_names")
            private_pg.admin("SELECT pg_reload_conf()")
        handle = await asyncio.wait_for(start, timeout=15)
        assert handle.status == "started"

        async def mended() -> bool:
            return "commits return again" in caplog.text

        await until(mended, timeout=5, what="the end of the stall said")


async def test_an_engine_says_within_its_lease_that_the_store_does_not_answer(
    private_pg: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """Its heartbeat's commit blocked: the outage and its cause are said within about the 2 s lease, not at 10 s."""
    url = private_pg.create_database()
    caplog.set_level(logging.WARNING, logger="lockgate")
    async with lg.Engine(owned, url, lease="2s"):
        private_pg.admin("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        private_pg.admin("SELECT pg_reload_conf()")
        try:

            async def said() -> bool:
                text = caplog.text
                return "lease renewal: no answer from the store in 1s" in text and "'ghost'" in text

            await until(said, timeout=2 + 3, what="the unanswered renewal and its cause said")
        finally:
            private_pg.admin("ALTER SYSTEM RESET synchronous_standby_names")
            private_pg.admin("SELECT pg_reload_conf()")

        async def mended() -> bool:
            return "store available again" in caplog.text and "commits return again" in caplog.text

        await until(mended, timeout=10, what="the end of the outage said")
    assert caplog.text.count("store unavailable") == 1
