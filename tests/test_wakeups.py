"""Wake-ups across processes, and waiting for another connection's write lock.

A worker whose timed polls are ``WORKER_POLL`` apart must still begin, within a deadline far
shorter than that, what another process started, signalled, published to or freed a slot for:
on PostgreSQL by NOTIFY, on SQLite by the change check (``store/sqlite_wakeups.py``). While
another connection holds SQLite's write lock, the event loop keeps running everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.store.base import CHANGED
from lockgate.store.sqlite import SQLiteStore
from lockgate.store.sqlite_wakeups import CHECK_EVERY, EAGER_EVERY, LONGEST_WAIT, ChangeWatch

from .apps.waits import eventually
from .apps.wakeups import app, ping

ROOT = Path(__file__).resolve().parents[1]
WORKER_POLL = "30s"  # a wake-up a test waits for never comes from a timed poll
DEADLINE = 10.0  # seconds: generous on a loaded machine, a third of one poll


class Workers:
    """``tests.apps.runner`` processes over ``tests.apps.wakeups``; their bodies note into one file."""

    def __init__(self, store_url: str, tmp: Path) -> None:
        self.store_url = store_url
        self.effects = tmp / "effects.log"
        self.effects.touch()
        self.logs = tmp / "workers"
        self.logs.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> None:
        env = {
            **os.environ,
            "LOCKGATE_TEST_EFFECTS": str(self.effects),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
        }
        path = self.logs / f"worker-{len(self.procs)}.log"
        cmd = [sys.executable, "-m", "tests.apps.runner", "--store", self.store_url, "--app", "tests.apps.wakeups:app"]
        cmd += ["--poll", WORKER_POLL, "--lease", "1h"]
        with path.open("wb") as log:
            self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))

    async def ready(self) -> None:
        await self.until(lambda: all("ready" in p.read_text() for p in self.logs.iterdir()), "workers ready", 60)
        if not self.store_url.startswith("sqlite"):  # a notification before LISTEN would be missed
            import psycopg

            async def listening() -> bool:
                async with await psycopg.AsyncConnection.connect(self.store_url) as conn:
                    cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN lockgate'")
                    row = await cur.fetchone()
                    return row is not None and row[0] >= len(self.procs)

            await self.until(listening, "workers listening", 60)

    def noted(self) -> list[tuple[str, int, str, float]]:
        out = []
        for line in self.effects.read_text().splitlines():
            what, i, edge, at = line.split()
            out.append((what, int(i), edge, float(at)))
        return out

    def began(self, what: str, i: int) -> bool:
        return any(w == what and n == i and e == "begin" for w, n, e, _ in self.noted())

    async def until(self, probe: object, what: str, timeout: float = DEADLINE) -> object:
        try:
            return await eventually(probe, timeout=timeout, interval=0.01, what=what)  # type: ignore[call-overload]
        except TimeoutError as exc:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.logs.iterdir()))
            raise TimeoutError(f"{exc}\nworker output:\n{logs}") from None

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(store_url, tmp_path)
    yield group
    group.stop()


async def _parked(client: lg.Client, run_id: str) -> bool:
    return (await client.get_run(run_id)).waiting_on is not None


@pytest.mark.slow
async def test_what_another_process_does_wakes_the_worker_at_once(workers: Workers, store_url: str) -> None:
    async with lg.Client(app, store_url) as client:  # migrates before the worker opens the store
        workers.spawn()
        await workers.ready()

        await client.start("wk.start", {"i": 1})
        await workers.until(lambda: workers.began("start", 1), "a started run's body")

        waiting = await client.start("wk.signal", {"i": 2})
        run_id = waiting.run_id or ""
        await workers.until(lambda: _parked(client, run_id), "the run parked on its signal")
        await client.signal(run_id, "go", {"i": 2})
        await workers.until(lambda: workers.began("signal", 2), "a signalled run's body going on")

        await client.publish(ping, {"id": "p"}, {"i": 3})
        await workers.until(lambda: workers.began("publish", 3), "a published event's triggered run")

        holders = [await client.start("wk.gated", {"i": 10 + n, "hold": True}) for n in range(2)]
        for held in holders:
            rid = held.run_id or ""
            await workers.until(lambda rid=rid: _parked(client, rid), "a holder parked with its slot")  # type: ignore[misc]
        queued = await client.start("wk.gated", {"i": 12})
        assert queued.status == "queued"
        await client.cancel(holders[0].run_id or "")
        await workers.until(lambda: workers.began("gated", 12), "the start parked behind a freed slot")


@pytest.mark.slow
async def test_a_client_learns_of_an_end_in_another_process_without_waiting_for_its_poll(
    workers: Workers, store_url: str
) -> None:
    # SQLite: the client's change check sees the end's commit; PostgreSQL: the end notifies (migration 0056).
    async with lg.Client(app, store_url, poll_interval=30) as client:
        workers.spawn()
        await workers.ready()
        handle = await client.start("wk.signal", {"i": 1})
        run_id = handle.run_id or ""
        await workers.until(lambda: _parked(client, run_id), "the run parked on its signal")
        waiting = asyncio.ensure_future(client.result(run_id))
        await asyncio.sleep(6)  # the waiter's reads back off meanwhile: the next is 5 s or more away
        assert not waiting.done()
        signalled = time.monotonic()
        await client.signal(run_id, "go", {"i": 1})
        await asyncio.wait_for(waiting, DEADLINE)
        assert time.monotonic() - signalled < 3  # told of the end, not by the next read


@pytest.mark.slow
async def test_two_workers_pass_slots_across_processes_without_exceeding_or_losing(
    workers: Workers, store_url: str
) -> None:
    n = 40
    async with lg.Client(app, store_url) as client:
        workers.spawn()
        workers.spawn()
        await workers.ready()
        await asyncio.gather(*(client.start("wk.gated", {"i": i}) for i in range(n)))

        def ended() -> bool:
            return sum(1 for w, _, e, _ in workers.noted() if w == "gated" and e == "end") >= n

        # 40 runs of 20 ms two at a time: a slot left to a timed poll would cost 30 s
        await workers.until(ended, "every gated run ended", timeout=3 * DEADLINE)
    noted = [x for x in workers.noted() if x[0] == "gated"]
    assert Counter((i, e) for _, i, e, _ in noted) == {(i, e): 1 for i in range(n) for e in ("begin", "end")}
    edges = sorted((at, 1 if e == "begin" else -1) for _, _, e, at in noted)
    overlap = most = 0
    for _, step in sorted(edges, key=lambda x: (x[0], x[1])):  # an end before a begin at the same instant
        overlap += step
        most = max(most, overlap)
    assert most <= 2


# -- the change check --------------------------------------------------------------------------

_CHANNELS = ("runs", "gate", "events")


@functools.cache
def _migrated_file() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="lockgate-wakeups-"))
    path = folder / "watch.db"

    async def migrate() -> None:
        store = SQLiteStore(f"sqlite:///{path}")
        await store.open()
        await store.close()

    asyncio.run(migrate())
    return path


@given(st.lists(st.tuples(st.sampled_from(["other", "own", "check"]), st.sampled_from([*_CHANNELS, None]))))
@settings(max_examples=60, deadline=None)
def test_a_check_tells_every_channel_another_connection_moved(steps: list[tuple[str, str | None]]) -> None:
    """Whatever the order of commits and checks: a check tells every channel another connection moved
    since the last check, then ``CHANGED``; never a channel nobody moved; nothing when nobody else committed."""
    path = _migrated_file()

    async def scenario() -> None:
        mine = sqlite3.connect(path, isolation_level=None)
        other = sqlite3.connect(path, isolation_level=None)
        told: list[str] = []
        counts = "SELECT channel, seq FROM lockgate_wakeups"
        watch = ChangeWatch(mine, f"{path}-wal", counts, [lambda channel, _: told.append(channel)])
        watch.start()
        try:
            foreign: set[str] = set()
            own: set[str] = set()  # moved here since the last check that read the counters
            committed = False
            for who, channel in [*steps, ("check", None)]:
                if who == "check":
                    told.clear()
                    watch.check()
                    if committed:
                        assert told[-1] == CHANGED and told.count(CHANGED) == 1
                        assert foreign <= set(told[:-1]) <= foreign | own
                        own = set()
                    else:
                        assert told == []
                    foreign, committed = set(), False
                    continue
                conn = other if who == "other" else mine
                conn.execute("BEGIN IMMEDIATE")
                if channel is None:  # a commit that moves no channel
                    conn.execute("UPDATE lockgate_flow_counted SET upto = upto + 1")
                else:
                    conn.execute("UPDATE lockgate_wakeups SET seq = seq + 1 WHERE channel = ?", (channel,))
                conn.execute("COMMIT")
                if who == "other":
                    committed = True
                    if channel is not None:
                        foreign.add(channel)
                elif channel is not None:
                    own.add(channel)
        finally:
            watch.stop()
            mine.close()
            other.close()

    asyncio.run(scenario())


def test_a_watch_of_a_process_executing_nothing_checks_sooner_after_a_write() -> None:
    """``eager``: the series a write starts checks ``EAGER_EVERY`` apart (jittered), else ``CHECK_EVERY``;
    turned on during a long wait of a series, the next check is brought forward."""
    path = _migrated_file()

    async def scenario() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        watch = ChangeWatch(conn, f"{path}-wal", "SELECT channel, seq FROM lockgate_wakeups", [])
        loop = asyncio.get_running_loop()
        watch.start()
        try:
            for on, every in [(False, CHECK_EVERY), (True, EAGER_EVERY), (False, CHECK_EVERY)]:
                if watch._timer is not None:  # a new series each time (one already due sooner is kept)
                    watch._timer.cancel()
                    watch._timer = None
                watch.eager(on)
                before = loop.time()  # the timer is set between these two readings, however slow the machine
                watch._heat()
                after = loop.time()
                assert watch._timer is not None
                assert before + 0.5 * every <= watch._timer.when() <= after + 1.5 * every
            watch._wait = LONGEST_WAIT  # far into a quiet series
            watch._timer.cancel()
            watch._arm()
            watch.eager(True)
            after = loop.time()
            assert watch._timer is not None and watch._timer.when() <= after + 1.5 * EAGER_EVERY
        finally:
            watch.stop()
            conn.close()

    asyncio.run(scenario())


class Nothing(BaseModel):
    pass


async def test_an_engine_looks_eagerly_for_starts_only_while_it_executes_nothing(tmp_path: Path) -> None:
    release = asyncio.Event()
    held = lg.App()

    @held.workflow(name="held")
    async def holding(ctx: lg.Context, p: Nothing) -> None:
        await release.wait()

    async with lg.Engine(held, f"sqlite:///{tmp_path / 'eager.db'}") as engine:
        watch = engine.store._watch  # type: ignore[attr-defined]
        assert watch is not None and watch._first == EAGER_EVERY
        handle = await engine.start(holding, Nothing())
        await eventually(lambda: watch._first == CHECK_EVERY, what="the run executing")
        release.set()
        await engine.result(handle.run_id or "", timeout=10)
        await eventually(lambda: watch._first == EAGER_EVERY, what="nothing executing again")


async def test_a_client_looks_eagerly_only_while_it_awaits_a_run_executed_elsewhere(tmp_path: Path) -> None:
    app = lg.App()

    @app.workflow(name="elsewhere")
    async def elsewhere(ctx: lg.Context, p: Nothing) -> None:
        return None

    async with lg.Client(app, f"sqlite:///{tmp_path / 'awaits.db'}") as client:
        handle = await client.start(elsewhere, Nothing())  # no engine here: another process would execute it
        waiting = asyncio.create_task(client.result(handle.run_id or "", timeout=30))
        watch = await eventually(lambda: client.store._watch, what="the client watching for ends")  # type: ignore[attr-defined]
        await eventually(lambda: watch._first == EAGER_EVERY, what="eager while the result is awaited")
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await eventually(lambda: watch._first == CHECK_EVERY, what="back to the usual checks")
