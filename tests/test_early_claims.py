"""A run claimed as another ends, and a step handed its flow slot, start as the COMMIT goes out (engine/early.py).

On PostgreSQL the writer tells an op when its transaction's COMMIT is on its way
(``Tx.when_committing``): the run a hand-off claims for this worker, and the step a release
hands a slot to here, start then instead of when the commit answers. Should that commit not
happen, what started is stopped before the writes are tried again. These tests kill the
writer's server process as a COMMIT goes out and check that nothing ran beyond its limit,
and that every run still ran to its end once.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import wire

from .apps.gate_probes import ledger_rows, pending_rows, slot_rows
from .apps.stepflow import max_overlap
from .apps.waits import eventually


class Job(BaseModel):
    n: int
    hold: bool = False


class Go(BaseModel):
    pass


class Bodies:
    """Spans of the bodies' work, each recorded at its end however it ends (a stopped body's too)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.entered: list[int] = []

    async def work(self, n: int, seconds: float) -> int:
        began = time.monotonic()
        self.entered.append(n)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.spans.append((began, time.monotonic()))
        return n


@contextlib.contextmanager
def killing_commits(url: str, plan: list[bool]) -> Iterator[list[bool]]:
    """While open, each COMMIT that starts something early takes the next answer of ``plan`` (nothing left:
    no): yes, and its server process is killed after the COMMIT is queued and before it reaches the server
    (so it does not commit). Yields ``plan``, emptied as it is used."""
    commit = wire.WireTx.commit

    async def killing(self: wire.WireTx) -> None:
        if plan and self._committing and plan.pop(0):
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (self.conn.info.backend_pid,))
        await commit(self)

    wire.WireTx.commit = killing  # type: ignore[method-assign]
    try:
        yield plan
    finally:
        wire.WireTx.commit = commit  # type: ignore[method-assign]


@pytest.fixture
def kill_at_commit(pg_url: str) -> Iterator[list[bool]]:
    """Arm with ``armed.append(True)``: the next COMMIT that starts something early does not commit."""
    with killing_commits(pg_url, []) as armed:
        yield armed


def conc_app(bodies: Bodies, limit: int, name: str = "conc", seconds: float = 0.3) -> lg.App:
    app = lg.App()

    @app.workflow(name=name, concurrency=lg.Concurrency(limit=limit))
    async def conc(ctx: lg.Context, p: Job) -> int:
        if p.hold:
            await ctx.wait_for_signal("go", Go)
        return int(await ctx.step("work", bodies.work, p.n, 0.0 if p.hold else seconds))

    return app


async def test_a_run_claimed_as_another_ends_starts_before_the_commit_answers(pg_url: str) -> None:
    """The successor is executing by the time its claim's answer reaches the worker."""
    bodies = Bodies()
    async with lg.Engine(conc_app(bodies, 1), pg_url, poll_interval="50ms") as e:
        running_at_answer = _running_at_answer(e)
        first = await e.start("conc", Job(n=0, hold=True))
        await eventually(lambda: _held(pg_url, 1), what="the first run holding the slot")
        second = await e.start("conc", Job(n=1))
        await eventually(lambda: _parked(pg_url, 1), what="the second parked behind the first")
        await e.signal(first.run_id or "", "go", {})
        assert await e.result(await _run_of(e, second), timeout=20) == 1
        assert running_at_answer == [True]
        assert max_overlap(bodies.spans) <= 1


def _running_at_answer(e: lg.Engine) -> list[bool]:
    """From now on, for each run a hand-off claims for ``e``: whether it was executing when the claim's answer came."""
    running_at_answer: list[bool] = []
    dispatcher = e.dispatcher
    passed = dispatcher.passed

    def seen(p: Any) -> None:
        if p.claimed is not None:
            running_at_answer.append(p.claimed["id"] in dispatcher.inflight)
        passed(p)

    dispatcher.passed = seen  # type: ignore[method-assign]
    return running_at_answer


async def _one_holding_three_parked(e: lg.Engine, url: str) -> tuple[Any, list[Any]]:
    """A run holding the one slot (waiting for its ``go``), and three starts parked behind it."""
    first = await e.start("conc", Job(n=0, hold=True))
    await eventually(lambda: _held(url, 1), what="the first run holding the slot")
    rest = [await e.start("conc", Job(n=i)) for i in range(1, 4)]
    await eventually(lambda: _parked(url, 3), what="the rest parked behind the first")
    return first, rest


async def _held(url: str, n: int) -> bool:
    return len(await slot_rows(url)) == n


async def _parked(url: str, n: int) -> bool:
    return len(await pending_rows(url)) == n


async def _all_claimed(e: lg.Engine, run_ids: list[str]) -> bool:
    return all([(await e.get_run(run_id)).owner is not None for run_id in run_ids])


async def _run_of(e: lg.Engine, handle: Any) -> str:
    """The run a parked start was admitted as (once it is)."""
    if handle.run_id:
        return str(handle.run_id)
    found: list[str] = []

    async def admitted() -> bool:
        rows = [r for r in await ledger_rows(e.client, handle.ticket) if r["outcome"] == "admitted"]
        found[:] = [rows[-1]["run_id"]] if rows else []
        return bool(found)

    await eventually(admitted, what="the start admitted")
    return found[0]


async def test_a_claim_whose_commit_fails_stops_what_it_started(pg_url: str, kill_at_commit: list[bool]) -> None:
    """The end's COMMIT is lost with its server process: the successor begun early is stopped before the end
    is written again, the limit is never exceeded, and every run ends once with its output."""
    bodies = Bodies()
    async with lg.Engine(conc_app(bodies, 1), pg_url, poll_interval="50ms") as e:
        first, rest = await _one_holding_three_parked(e, pg_url)
        kill_at_commit.append(True)
        await e.signal(first.run_id or "", "go", {})
        outs = [await e.result(await _run_of(e, h), timeout=30) for h in rest]
        assert not kill_at_commit, "no COMMIT started anything early"
    assert outs == [1, 2, 3]
    assert max_overlap(bodies.spans) <= 1
    assert sorted(set(bodies.entered)) == [0, 1, 2, 3]


def flow_app(bodies: Bodies, key: str) -> lg.App:
    app = lg.App()

    @app.workflow(name="flow", flow_control=lg.FlowControl(key, parallelism=1))
    async def flow(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("work", bodies.work, p.n, 0.15))

    return app


async def test_a_step_handed_a_slot_by_a_release_that_fails_is_stopped(pg_url: str, kill_at_commit: list[bool]) -> None:
    """A release's COMMIT is lost: the step it handed the slot to, started early, is stopped with its run; the
    run resumes from its journal, and the key never has more than its parallelism of steps at once."""
    bodies = Bodies()
    async with lg.Engine(flow_app(bodies, "early-flow"), pg_url, poll_interval="50ms", lease="2s") as e:
        handles = [await e.start("flow", Job(n=i)) for i in range(4)]
        await eventually(lambda: bool(bodies.entered), what="a first step")
        # Every run's claim committed first: the COMMIT armed for is a release's, not a claim's.
        await eventually(lambda: _all_claimed(e, [h.run_id or "" for h in handles]), what="every run claimed")
        kill_at_commit.append(True)
        outs = [await e.result(h.run_id or "", timeout=60) for h in handles]
    assert outs == [0, 1, 2, 3]
    assert max_overlap(bodies.spans) <= 1
    assert sorted(set(bodies.entered)) == [0, 1, 2, 3]
    assert len(bodies.entered) == 5  # the step started early was stopped, and ran again as its run resumed


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    limit=st.integers(min_value=1, max_value=2),
    runs=st.integers(min_value=3, max_value=6),
    ms=st.integers(min_value=100, max_value=300),  # longer than a reconnection: a body left running would overlap
    plan=st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_lost_commits_never_let_a_limit_be_exceeded(
    pg_url: str, limit: int, runs: int, ms: int, plan: list[bool]
) -> None:
    """Any limit and load, with COMMITs that start runs early lost at random: the bodies never exceed the
    limit at any instant, and every run ends with its output."""

    async def lossy() -> None:
        bodies = Bodies()
        name = f"conc-{uuid.uuid4().hex[:8]}"  # examples share the test's store: each its own workflow and key
        with killing_commits(pg_url, list(plan)):
            async with lg.Engine(conc_app(bodies, limit, name, ms / 1000), pg_url, poll_interval="50ms") as e:
                handles = [await e.start(name, Job(n=i)) for i in range(runs)]
                outs = [await e.result(await _run_of(e, h), timeout=60) for h in handles]
        assert outs == list(range(runs))
        assert max_overlap(bodies.spans) <= limit
        assert sorted(set(bodies.entered)) == list(range(runs))

    asyncio.run(lossy())


def plain_app(bodies: Bodies, seconds: float = 0.2) -> lg.App:
    app = lg.App()

    @app.workflow(name="plain")
    async def plain(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("work", bodies.work, p.n, seconds))

    return app


async def test_a_run_the_dispatcher_claims_starts_before_the_claim_answers(pg_url: str) -> None:
    """A start from another process: the worker that claims it is executing it by the time the claim's answer
    comes back (its body began as the claim's COMMIT went out)."""
    bodies = Bodies()
    app = plain_app(bodies, 0.0)
    async with lg.Engine(app, pg_url, poll_interval="50ms") as e, lg.Client(app, pg_url) as client:
        running_at_answer = _claims_answered(e)
        handles = [await client.start("plain", Job(n=i)) for i in range(3)]
        assert [await client.result(h.run_id or "", timeout=20) for h in handles] == [0, 1, 2]
    assert running_at_answer and all(began for _, began in running_at_answer), running_at_answer


async def test_a_resuming_run_the_dispatcher_claims_starts_on_the_claims_answer(pg_url: str) -> None:
    """A run claimed to resume reads its journal back, from a reader that sees only what has committed: it
    is launched once its claim has (a redrive in the claim's own group commit reopened a failed step, and
    the run, begun early, replayed the failure it had just been cleared of)."""
    bodies = Bodies()
    app = conc_app(bodies, 5)
    async with lg.Engine(app, pg_url, poll_interval="50ms") as e, lg.Client(app, pg_url) as client:
        running_at_answer = _claims_answered(e)
        handle = await client.start("conc", Job(n=4, hold=True))
        await eventually(lambda: _parked_on_signal(e, handle.run_id or ""), what="the run parked on its signal")
        await client.signal(handle.run_id or "", "go", {})
        assert await client.result(handle.run_id or "", timeout=20) == 4
    assert [began for _, began in running_at_answer] == [True, False], running_at_answer


def _claims_answered(e: lg.Engine) -> list[tuple[str, bool]]:
    """From now on, for each run the dispatcher claims: its id, and whether it was executing when the claim's
    answer came."""
    dispatcher = e.dispatcher
    answered: list[tuple[str, bool]] = []
    claimed = dispatcher.early.claimed

    def seen(row: Any, launch: Any) -> None:
        answered.append((row["id"], row["id"] in dispatcher.inflight))
        claimed(row, launch)

    dispatcher.early.claimed = seen  # type: ignore[method-assign]
    return answered


async def _parked_on_signal(e: lg.Engine, run_id: str) -> bool:
    """Whether the run waits for its ``go`` with no execution of it left here (parked, held by no worker)."""
    return (await e.get_run(run_id)).waiting_on == "signal" and run_id not in e.dispatcher.inflight


async def test_a_dispatcher_claim_whose_commit_fails_stops_the_run_it_began(
    pg_url: str, kill_at_commit: list[bool]
) -> None:
    """The claim's COMMIT is lost with its server process: the run begun early is stopped before the claim is
    tried again; it is claimed again and ends once with its output."""
    bodies = Bodies()
    app = plain_app(bodies)
    async with lg.Client(app, pg_url) as client:
        handle = await client.start("plain", Job(n=7))
        kill_at_commit.append(True)  # the worker's first claim
        async with lg.Engine(app, pg_url, poll_interval="50ms", lease="2s"):
            assert await client.result(handle.run_id or "", timeout=30) == 7
        assert not kill_at_commit, "no COMMIT started anything early"
    assert set(bodies.entered) == {7}
    assert sum(1 for began, ended in bodies.spans if ended - began >= 0.19) == 1  # the early one was stopped
    assert max_overlap(bodies.spans) <= 1


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/early.db"


async def test_on_sqlite_a_run_handed_on_starts_while_its_commit_syncs(sqlite_url: str) -> None:
    """SQLite commits a batch that starts a run on a thread of its own: the successor is executing by the time
    that commit's answer is back, and the limit holds."""
    bodies = Bodies()
    async with lg.Engine(conc_app(bodies, 1), sqlite_url, poll_interval="50ms") as e:
        running_at_answer = _running_at_answer(e)
        handles = [await e.start("conc", Job(n=i)) for i in range(4)]
        outs = [await e.result(await _run_of(e, h), timeout=30) for h in handles]
    assert outs == [0, 1, 2, 3]
    assert running_at_answer and all(running_at_answer), running_at_answer
    assert max_overlap(bodies.spans) <= 1


async def test_on_sqlite_a_commit_that_fails_stops_what_it_started(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first COMMIT that starts a run fails (a disk error, say): the run begun as it went out is stopped,
    nothing of it kept; every run still ends once with its output and the limit holds."""
    from lockgate.store import sqlite as sqlite_store

    commit = sqlite_store._commit
    failures = [True]

    def failing(conn: Any) -> None:
        if failures:
            failures.pop()
            raise sqlite3.OperationalError("disk I/O error")
        commit(conn)

    bodies = Bodies()
    async with lg.Engine(conc_app(bodies, 1), sqlite_url, poll_interval="50ms", lease="2s") as e:
        first, rest = await _one_holding_three_parked(e, sqlite_url)
        monkeypatch.setattr(sqlite_store, "_commit", failing)
        await e.signal(first.run_id or "", "go", {})
        outs = [await e.result(await _run_of(e, h), timeout=60) for h in rest]
    assert not failures, "no COMMIT started anything early"
    assert outs == [1, 2, 3]
    assert max_overlap(bodies.spans) <= 1
    assert sorted(set(bodies.entered)) == [0, 1, 2, 3]
