"""``engine.trace(ticket)``: what became of one start, through collapse and parking to its run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import advance, wait_runs


class Job(BaseModel):
    tenant: str = "t"
    n: int = 0
    hold: bool = False
    fail: bool = False


class Go(BaseModel):
    ok: bool = True


def tenant(p: Job) -> str:
    return p.tenant


async def _body(ctx: lg.Context, p: Job) -> int:
    if p.hold:
        await ctx.wait_for_signal("go", Go)
    else:
        await ctx.sleep("work", "1m")  # every run takes a minute: the estimate has something to go on
    if p.fail:
        raise ValueError(f"job {p.n} cannot be done")
    return p.n


def make_app() -> lg.App:
    app = lg.App()
    app.workflow(name="plain")(_body)
    app.workflow(name="gated", concurrency=lg.Concurrency(limit=1, key=tenant))(_body)
    app.workflow(name="folded", debounce=lg.Debounce(period="5m", key=tenant))(_body)
    app.workflow(name="capped", rate_limit=lg.RateLimit(limit=1, period="1h", key=tenant))(_body)
    return app


async def test_a_directly_admitted_start(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        for workflow in ("plain", "gated"):
            handle = await engine.start(workflow, {"n": 1})
            await env.settle()
            trace = await engine.trace(handle.ticket)
            assert (trace.ticket, trace.workflow, trace.outcome) == (handle.ticket, workflow, "admitted")
            assert (trace.state, trace.run_id, trace.run_status) == ("running", handle.run_id, "running")
            assert trace.absorbed_by is None and trace.position is None
            await advance(env, "1m")
            trace = await engine.trace(handle.ticket)
            assert (trace.state, trace.run_status, trace.run_error) == ("succeeded", "succeeded", None)
            assert [h["outcome"] for h in trace.history] == ["admitted"]
            assert trace.to_dict()["run_id"] == handle.run_id


async def test_a_collapsed_arrival_is_followed_to_the_run_that_absorbed_it(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("folded", {"n": 1, "fail": True})
        second = await engine.start("folded", {"n": 2, "fail": True})
        trace = await engine.trace(second.ticket)
        assert (trace.outcome, trace.state, trace.absorbed_by) == ("collapsed", "parked", first.ticket)
        assert (trace.control, trace.key, trace.run_id) == ("debounce", "t", None)
        assert trace.estimated_admission is not None  # a debounce has a due time
        assert trace.estimated_admission.timestamp() == pytest.approx(env.clock.now() + 300)
        own = await engine.trace(first.ticket)
        assert (own.outcome, own.state, own.absorbed_by) == ("queued", "parked", None)

        await advance(env, "5m")
        await advance(env, "1m")
        [run] = await wait_runs(engine, "folded", status="failed")
        for ticket, absorbed in ((first.ticket, None), (second.ticket, first.ticket)):
            trace = await engine.trace(ticket)
            assert (trace.run_id, trace.absorbed_by) == (run.id, absorbed)
            assert (trace.state, trace.run_status) == ("failed", "failed")
            assert trace.run_error is not None and "job 2 cannot be done" in trace.run_error
        outcomes = [h["outcome"] for h in (await engine.trace(second.ticket)).history]
        assert outcomes[:2] == ["queued", "collapsed"] and outcomes[-1] == "admitted"


async def test_a_parked_start_shows_its_control_key_position_and_estimate(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        blocker = await engine.start("gated", {"tenant": "acme", "hold": True})
        first_wait = await engine.start("gated", {"tenant": "acme", "n": 1})
        trace = await engine.trace(first_wait.ticket)
        assert (trace.state, trace.control, trace.key, trace.position) == ("parked", "concurrency", "acme", 0)
        assert trace.estimated_admission is None  # no finished run yet to estimate from

        # one run of a minute finishes elsewhere: now there is a duration to go on
        await engine.start("gated", {"tenant": "other", "n": 9})
        await env.settle()
        await advance(env, "1m")
        await wait_runs(engine, "gated")
        waiting = [first_wait] + [await engine.start("gated", {"tenant": "acme", "n": n}) for n in (2, 3)]
        traces = [await engine.trace(h.ticket) for h in waiting]
        assert [t.position for t in traces] == [0, 1, 2]
        assert {(t.state, t.control, t.key, t.outcome) for t in traces} == {("parked", "concurrency", "acme", "queued")}
        etas = [t.estimated_admission for t in traces]
        now = env.clock.now()
        assert [e.timestamp() - now if e else None for e in etas] == pytest.approx([60.0, 120.0, 180.0])
        assert etas[0] is not None and traces[0].to_dict()["estimated_admission"] == etas[0].isoformat()

        # the queue moves: the next one is admitted, the others move up
        assert blocker.run_id is not None
        await engine.signal(blocker.run_id, "go", {})
        assert await engine.result(blocker.run_id, timeout=10) == 0
        await advance(env)
        moved = [await engine.trace(h.ticket) for h in waiting]
        assert (moved[0].state, moved[0].run_id is not None) == ("running", True)
        assert [t.position for t in moved[1:]] == [0, 1]


async def test_a_delayed_start_is_parked_until_its_instant(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(hours=2)
        handle = await env.engine.start("plain", {"n": 1}, at=at)
        trace = await env.engine.trace(handle.ticket)
        assert (trace.state, trace.control, trace.estimated_admission) == ("parked", "delayed", at)


async def test_a_dropped_start(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        assert (await engine.start("capped", {"n": 1})).status == "started"
        dropped = await engine.start("capped", {"n": 2})
        assert dropped.status == "dropped"
        trace = await engine.trace(dropped.ticket)
        assert (trace.outcome, trace.state, trace.control, trace.key) == ("dropped", "dropped", "rate_limit", "t")
        assert trace.reason is not None and "retry after" in trace.reason
        assert (trace.run_id, trace.position, trace.estimated_admission) == (None, None, None)


async def test_an_unknown_ticket_is_an_error(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(lg.LockgateError, match="tkt_nope"):
            await env.engine.trace("tkt_nope")
