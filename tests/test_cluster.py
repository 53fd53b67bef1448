"""Many ``lockgate serve`` processes on one PostgreSQL database.

Real worker subprocesses (``tests/cluster/``), short leases, side effects recorded in the
same database by the steps themselves: work spreads, a killed worker's runs finish elsewhere
without re-running completed steps, a frozen worker's late writes are fenced, limits hold
across processes, sweeps run on one replica, and cut connections lose nothing. Wake-ups
between processes come from the database (migration 0003) and are shown with polling
turned down to once every 30 seconds. ``lockgate cluster status`` runs on every store.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import workers as store_workers

from .cluster.app import Job
from .cluster.app import app as cluster_app
from .cluster.harness import ROOT, Cluster, until
from .pg import PgProxy

pytestmark = pytest.mark.slow


@pytest.fixture
async def client(pg_url: str) -> AsyncIterator[lg.Client]:
    async with lg.Client(cluster_app, pg_url) as c:
        yield c


async def start_many(client: lg.Client, workflow: str, count: int, hold: float) -> list[str]:
    handles = await asyncio.gather(*(client.start(workflow, Job(n=i, hold=hold)) for i in range(count)))
    return [h.run_id or h.ticket for h in handles]


# -- wake-ups between processes ---------------------------------------------------------------

wake_app = lg.App()


class Note(BaseModel):
    text: str = ""


@wake_app.workflow(name="wake.echo")
async def echo(ctx: lg.Context, note: Note) -> str:
    return note.text


@wake_app.workflow(name="wake.signalled")
async def signalled(ctx: lg.Context, note: Note) -> str:
    got = await ctx.wait_for_signal("go", Note)
    return f"{note.text}+{got.text if got else ''}"


@wake_app.workflow(name="wake.napper")
async def napper(ctx: lg.Context, note: Note) -> str:
    await ctx.sleep("nap", 1.5)  # longer than inline_sleep: the run parks with a timer
    return note.text


@wake_app.workflow(name="wake.limited", concurrency=lg.Concurrency(limit=1, key=lambda n: "one"))
async def limited_echo(ctx: lg.Context, note: Note) -> str:
    await ctx.wait_for_signal("go", Note)
    return note.text


def idle_engine(url: str) -> lg.Engine:
    """An engine that polls only every 30 s: anything it does within seconds, a wake-up made it do."""
    return lg.Engine(wake_app, url, poll_interval=30.0, lease="2s")


async def test_starts_and_signals_from_another_process_wake_an_idle_worker(pg_url: str) -> None:
    async with idle_engine(pg_url) as engine, lg.Client(wake_app, pg_url) as client:
        await asyncio.sleep(0)  # the dispatcher's first look found nothing: it now waits up to 30 s
        started = time.monotonic()
        handle = await client.start("wake.echo", {"text": "hi"})
        assert handle.run_id is not None
        assert await client.result(handle.run_id, timeout=10) == "hi"
        waiting = await client.start("wake.signalled", {"text": "a"})
        assert waiting.run_id is not None
        await until(lambda: _parked(client, waiting.run_id or ""), what="run parked on its signal")
        await client.signal(waiting.run_id, "go", {"text": "b"})
        assert await client.result(waiting.run_id, timeout=10) == "a+b"
        assert time.monotonic() - started < 20  # far below one poll interval
        assert engine.worker_id


async def _parked(client: lg.Client, run_id: str) -> bool:
    run = await client.get_run(run_id)
    return run.waiting_on is not None and run.owner is None


async def test_a_timer_parked_by_another_process_wakes_an_idle_worker(pg_url: str) -> None:
    async with idle_engine(pg_url) as idle:
        await asyncio.sleep(0)
        async with idle_engine(pg_url) as busy:
            handle = await busy.start("wake.napper", {"text": "rested"})
            assert handle.run_id is not None
            run_id = handle.run_id
            await until(lambda: _parked(busy, run_id), what="run parked on its timer")
            first = (await busy.get_run(run_id)).owner
        # `busy` is gone; only the idle engine can fire the timer, and it was told when by the park
        assert await idle.result(run_id, timeout=15) == "rested"
        run = await idle.get_run(run_id)
        assert run.status == "succeeded" and first is None
        assert [e.type for e in await idle.events(run_id)].count("run-succeeded") == 1


async def test_gate_work_from_another_process_reaches_the_drainer(pg_url: str) -> None:
    async with idle_engine(pg_url) as engine, lg.Client(wake_app, pg_url) as client:
        await until(lambda: _holds_drainer(engine), what="the engine holds the drain lease")
        # a delayed start parked by another process: due in half a second, not at the next poll
        at = datetime.now(UTC) + timedelta(milliseconds=500)
        delayed = await client.start("wake.echo", {"text": "later"}, at=at)
        assert delayed.status == "queued"
        run = await until(lambda: _admitted(client, delayed.ticket), timeout=15, what="delayed start admitted")
        assert run is not None
        assert await client.result(run, timeout=10) == "later"
        # a slot freed by another process lets the next parked start in
        first = await client.start("wake.limited", {"text": "1"})
        second = await client.start("wake.limited", {"text": "2"})
        assert first.status == "started" and second.status == "queued" and first.run_id
        await until(lambda: _parked(client, first.run_id or ""), what="first run waits for its signal")
        await client.cancel(first.run_id, "make room")  # frees the slot in this (other) process
        admitted = await until(lambda: _admitted(client, second.ticket), timeout=15, what="second admitted")
        assert admitted != first.run_id


async def _holds_drainer(engine: lg.Engine) -> bool:
    rows = await engine.store.read(store_workers.cluster_status, engine.clock.now())
    return any(engine.worker_id == s["owner"] for s in rows["sweeps"] if s["name"] == "drainer")


async def _admitted(client: lg.Client, ticket: str) -> str | None:
    trace = await client.trace(ticket)
    return trace.run_id


@wake_app.workflow(name="wake.many_steps")
async def many_steps(ctx: lg.Context, note: Note) -> int:
    total = 0
    for i in range(STEPS):
        total += await ctx.step(f"s{i}", _tick, i)
    return total


STEPS = 150


async def _tick(i: int) -> int:
    await asyncio.sleep(0.01)
    return i


async def test_a_run_whose_write_fails_on_the_store_is_handed_back_not_failed(
    pg_url: str, proxy: PgProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate.engine")
    store = proxy.url(pg_url) + "&pool_timeout=0.2"  # give up on the server within seconds, not half a minute
    async with lg.Engine(wake_app, store, poll_interval=0.05, lease="2s") as engine:
        handle = await engine.start("wake.many_steps", {})
        run_id = handle.run_id
        assert run_id is not None

        def engine_said(text: str) -> bool:
            return any(text in r.getMessage() for r in caplog.records if r.name == "lockgate.engine")

        await until(lambda: _journaled(engine, run_id, 3), what="the run under way")
        await proxy.stop()  # the server is gone for longer than the store retries a write
        await until(_async(lambda: engine_said(f"run {run_id}: ")), timeout=60, what="the run's write failed")
        await proxy.start()
        assert await engine.result(run_id, timeout=60) == sum(range(STEPS))
        # Handed back once the store answered, or stopped before its lease lapsed (engine/lease_watch.py) and
        # taken again after it: either way re-entered, not failed.
        assert engine_said(f"run {run_id}: handed back") or engine_said(f"run {run_id}: lease lost (not renewed")
        assert (await engine.get_run(run_id)).entries >= 2  # re-entered from its journal
    events = [e.type for e in await _events(pg_url, run_id)]
    assert events.count("run-succeeded") == 1 and "run-failed" not in events


async def _journaled(engine: lg.Engine, run_id: str, count: int) -> bool:
    return len(await engine.steps(run_id)) >= count


def _async(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return predicate()

    return probe


async def _events(url: str, run_id: str) -> list[lg.EventInfo]:
    async with lg.Client(wake_app, url) as client:
        return await client.events(run_id)


# -- worker processes -------------------------------------------------------------------------


async def test_work_spreads_and_a_killed_workers_runs_finish_elsewhere(cluster: Cluster, client: lg.Client) -> None:
    cluster.spawn(3, lease="2s", max_runs=4)
    await cluster.ready()
    run_ids = await start_many(client, "cluster.steps", 12, hold=2.0)

    async def victim_mid_step() -> tuple[int, set[str]] | None:
        """A worker and the runs it started step two of within the last half second (far from done)."""
        rows = await cluster.fetch(
            "SELECT pid, array_agg(run_id) FROM cluster_effects s WHERE step = 'two-start' AND at > %s "
            "AND NOT EXISTS (SELECT 1 FROM cluster_effects d WHERE d.run_id = s.run_id AND d.step = 'two') "
            "GROUP BY pid ORDER BY count(*) DESC",
            time.time() - 0.5,
        )
        return (rows[0][0], set(rows[0][1])) if rows else None

    found = await until(victim_mid_step, what="a worker in the middle of step two")
    victim, interrupted = found
    cluster.by_pid(victim).kill()
    await until(lambda: cluster.all_succeeded("cluster.steps", 12), timeout=45, what="all runs succeeded")

    runners = {pid for _, _, pid in await cluster.effects("one")}
    assert len(runners) >= 2, f"work did not spread: {runners}"
    effects = Counter((run, step) for run, step, _ in await cluster.effects())
    for run_id in run_ids:
        assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
        assert [s.status for s in await client.steps(run_id)] == ["completed"] * 3
    for run_id in interrupted:
        result = await client.result(run_id, timeout=5)
        assert effects[(run_id, "one")] == 1, "a journaled step ran again"
        assert result[0] == victim, "step one, journaled by the killed worker, was replayed"
        assert result[1] != victim and result[2] != victim
        assert effects[(run_id, "two-start")] == 2, "the interrupted step ran once more, elsewhere"
        assert effects[(run_id, "two")] == 1 and effects[(run_id, "three")] == 1


async def test_a_frozen_worker_is_fenced_when_it_wakes(cluster: Cluster, client: lg.Client) -> None:
    cluster.spawn(3, lease="1s")
    await cluster.ready()
    handle = await client.start("cluster.gated", Job())
    run_id = handle.run_id
    assert run_id is not None
    first = await until(lambda: cluster.effects("work-start"), what="the step started")
    zombie = cluster.by_pid(first[0][2])
    await cluster.freeze(zombie)

    async def taken_over() -> bool:
        return any(pid != zombie.pid for _, _, pid in await cluster.effects("work-start"))

    await until(taken_over, timeout=20, what="another worker took the run over")
    await cluster.execute("INSERT INTO cluster_flags (name) VALUES ('release')")
    await until(lambda: cluster.all_succeeded("cluster.gated", 1), what="the survivor finished the run")
    survivor = (await client.result(run_id, timeout=5))[0]
    zombie.signal(signal.SIGCONT)

    async def zombie_noticed() -> bool:
        return run_id in zombie.log() and "lease lost" in zombie.log()

    await until(zombie_noticed, timeout=20, what="the woken worker noticed its lease was lost")
    assert survivor != zombie.pid
    assert await client.result(run_id, timeout=5) == [survivor, survivor]
    journal = {s.key: s for s in await client.steps(run_id)}
    assert journal["work#0"].output == survivor
    assert [(s, p) for _, s, p in await cluster.effects("after")] == [("after", survivor)], (
        "the zombie's completion of 'work' did not commit, so it never went on to 'after'"
    )
    assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
    assert zombie.alive()


async def test_a_concurrency_limit_holds_across_processes(cluster: Cluster, client: lg.Client) -> None:
    cluster.spawn(3, lease="2s", max_runs=10)
    await cluster.ready()
    await start_many(client, "cluster.limited", 15, hold=0.1)
    await until(lambda: cluster.all_succeeded("cluster.limited", 15), timeout=60, what="all limited runs")
    [(peak, inflight)] = await cluster.fetch("SELECT peak, inflight FROM cluster_gauge WHERE name = 'limited'")
    assert inflight == 0
    assert 1 <= peak <= 3, f"{peak} steps were in flight at once under a limit of 3"
    assert len({pid for _, _, pid in await cluster.effects("gauged")}) >= 2


async def test_sweeps_run_on_one_replica_and_move_when_it_dies(cluster: Cluster, client: lg.Client) -> None:
    cluster.spawn(3, lease="1s")
    await cluster.ready()
    first = await start_many(client, "cluster.waiter", 3, hold=0)

    async def stalled(run_ids: list[str]) -> list[tuple[str, str, int]] | None:
        rows = [e for e in await cluster.effects("stalled") if e[0] in run_ids]
        return rows if {r for r, _, _ in rows} == set(run_ids) else None

    reports = await until(lambda: stalled(first), what="stalled runs reported")
    reporters = {pid for _, _, pid in reports}
    assert len(reporters) == 1, f"the staleness sweep ran on several replicas at once: {reporters}"
    holder = cluster.by_pid(reporters.pop())
    holder.kill()
    later = await start_many(client, "cluster.waiter", 2, hold=0)
    reports = await until(lambda: stalled(later), timeout=20, what="stalls reported after the holder died")
    assert holder.pid not in {pid for _, _, pid in reports}
    every = Counter(run for run, _, _ in await cluster.effects("stalled"))
    assert all(every[r] == 1 for r in first + later), f"a stall was reported more than once: {every}"

    async def drainer_moved() -> bool:
        rows = await cluster.fetch(
            "SELECT w.pid FROM lockgate_sweep_leases s JOIN lockgate_workers w ON w.id = s.owner "
            "WHERE s.name = 'drainer' AND s.lease_until > %s",
            time.time(),
        )
        return bool(rows) and rows[0][0] != holder.pid

    await until(drainer_moved, timeout=20, what="a live worker holds the drain lease")


async def test_cut_connections_lose_no_run_and_no_step(cluster: Cluster, client: lg.Client) -> None:
    cluster.spawn(3, lease="2s", max_runs=6)
    await cluster.ready()
    run_ids = await start_many(client, "cluster.steps", 12, hold=0.5)

    async def busy() -> bool:
        return len(await cluster.effects("two-start")) >= 4

    await until(busy, what="runs in the middle of step two")
    cut = await cluster.terminate_backends()
    assert cut >= 3
    await until(lambda: cluster.all_succeeded("cluster.steps", 12), timeout=60, what="every run succeeded")
    for run_id in run_ids:
        steps = await client.steps(run_id)
        assert [(s.key, s.status) for s in steps] == [
            ("one#0", "completed"),
            ("two#0", "completed"),
            ("three#0", "completed"),
        ]
        assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
    for worker in cluster.workers:
        text = worker.log()
        assert worker.alive(), text
        assert text.count("database unreachable") <= 1, f"{worker.name} logged one outage more than once:\n{text}"
        assert text.count("store unavailable") <= 1, text


async def test_a_database_outage_longer_than_the_lease_loses_nothing(
    proxy: PgProxy, cluster: Cluster, client: lg.Client
) -> None:
    cluster.spawn(3, lease="1s", max_runs=6, store=proxy.url(cluster.url))  # the test cuts the way in
    await cluster.ready()
    run_ids = await start_many(client, "cluster.steps", 9, hold=0.5)

    async def busy() -> bool:
        return len(await cluster.effects("two-start")) >= 3

    await until(busy, what="runs in the middle of step two")
    await proxy.stop()
    down = time.monotonic()

    async def everyone_noticed() -> bool:
        noticed = all("database unreachable" in w.log() for w in cluster.workers)
        return noticed and time.monotonic() - down > 2.0  # twice the lease: every lease lapsed meanwhile

    await until(everyone_noticed, timeout=30, what="every worker saw the outage")
    await proxy.start()
    await until(lambda: cluster.all_succeeded("cluster.steps", 9), timeout=90, what="every run succeeded")
    for run_id in run_ids:
        assert [s.status for s in await client.steps(run_id)] == ["completed"] * 3, "a step result was lost"
        assert [e.type for e in await client.events(run_id)].count("run-succeeded") == 1
        assert (await client.get_run(run_id)).status == "succeeded"
    effects = Counter((run, step) for run, step, _ in await cluster.effects())
    assert all(effects[(r, "three")] >= 1 for r in run_ids)
    for worker in cluster.workers:
        text = worker.log()
        assert worker.alive(), text
        assert text.count("database unreachable") == 1, f"{worker.name} logged one outage more than once:\n{text}"
        # Each spell the engine found the store unavailable is said once and ended once; a loaded server
        # slow to commit after coming back may make a second, shorter one (its own pair of lines).
        said = re.findall(r"store (unavailable|available again)", text)
        assert all(a != b for a, b in itertools.pairwise(said)) and said[-1:] != ["unavailable"], text
        assert "Traceback" not in text, text


# -- cluster status -----------------------------------------------------------------------------


def status_cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "cluster", "status", "--store", store, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


async def test_cluster_status_shows_workers_leases_and_stale_ones(store_url: str) -> None:
    async with lg.Engine(wake_app, store_url, poll_interval=0.05, lease="2s") as engine:
        await until(lambda: _holds_drainer(engine), what="the engine holds the drain lease")
        await engine.store.write(
            store_workers.register_with_lease, "wkr_gone", "elsewhere.invalid", 4242, time.time() - 60, 2.0
        )
        waiting = await engine.start("wake.signalled", {"text": "x"})
        assert waiting.run_id is not None
        result = await asyncio.to_thread(status_cli, store_url, "--format", "json")
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["dialect"] == ("postgres" if store_url.startswith("postgres") else "sqlite")
        workers = {w["id"]: w for w in document["workers"]}
        me = workers[engine.worker_id]
        assert me["pid"] == os.getpid() and me["state"] == "live" and "drainer" in me["sweeps"]
        assert me["lease"] == 2.0 and me["heartbeat_age"] < 2.0
        gone = workers["wkr_gone"]
        assert gone["state"] == "stale" and gone["heartbeat_age"] >= 59 and gone["sweeps"] == []
        table = await asyncio.to_thread(status_cli, store_url)
        assert table.returncode == 0, table.stderr
        assert engine.worker_id in table.stdout and "stale" in table.stdout and "drainer" in table.stdout
        await engine.store.write(store_workers.stop_worker, "wkr_gone", time.time())


def test_cluster_status_on_a_missing_sqlite_file_is_a_clear_error(tmp_path: Path) -> None:
    result = status_cli(f"sqlite:///{tmp_path}/nothing.db")
    assert result.returncode == 1
    assert "no lockgate database" in result.stderr
