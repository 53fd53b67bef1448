"""Timeouts and failure reports: every way a start fails to deliver starts ``on_failure`` once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import advance, arrival, flow_of, parked, runs, wait_runs
from .apps.gate_probes import ledger_rows


class Job(BaseModel):
    name: str
    hold: bool = False


class Go(BaseModel):
    ok: bool = True


class Missing(Exception):
    pass


async def _body(ctx: lg.Context, p: Job) -> str:
    if p.hold:
        await ctx.wait_for_signal("go", Go)

    def work() -> str:
        if p.name.startswith("bad"):
            raise Missing(f"no row {p.name}")
        return p.name

    return str(await ctx.step("work", work))


def make_app(*, with_gone: bool = True) -> lg.App:
    app = lg.App()

    @app.workflow(name="handler")
    async def handler(ctx: lg.Context, p: lg.FailureReport) -> str:
        return f"{p.workflow}:{p.reason}"

    @app.workflow(name="handler.broken")
    async def broken(ctx: lg.Context, p: lg.FailureReport) -> None:
        raise RuntimeError(f"the failure handler itself broke on {p.workflow}")

    app.workflow(name="job.fails", on_failure="handler")(_body)
    app.workflow(name="job.fails.twice", on_failure="handler.broken")(_body)
    app.workflow(
        name="job.finish",
        concurrency=lg.Concurrency(limit=1),
        timeouts=lg.Timeouts(finish="10m"),
        on_failure="handler",
    )(_body)
    app.workflow(
        name="job.start",
        concurrency=lg.Concurrency(limit=1),
        timeouts=lg.Timeouts(start="5m"),
        on_failure="handler",
    )(_body)
    app.workflow(
        name="job.debounced",
        debounce=lg.Debounce(period="10m"),
        timeouts=lg.Timeouts(start="25m"),
        on_failure="handler",
    )(_body)
    if with_gone:
        app.workflow(name="job.gone", concurrency=lg.Concurrency(limit=1), on_failure="handler")(_body)
    return app


async def reports(engine: lg.Client, count: int, handler: str = "handler", status: str = "succeeded") -> list[Any]:
    """The ``count`` failure reports ``handler`` ran with (waits for them)."""
    found = await wait_runs(engine, handler, count, status=status)
    return [lg.FailureReport.model_validate(r.payload) for r in found]


async def test_a_failed_run_reports_once(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        handle = await engine.start("job.fails", {"name": "bad-1"})
        assert handle.run_id is not None
        with pytest.raises(lg.RunFailed):
            await engine.result(handle.run_id, timeout=10)
        await advance(env)
        [report] = await reports(engine, 1)
        assert report.workflow == "job.fails"
        assert report.reason == "failed"
        assert report.run_id == handle.run_id
        assert report.payload == {"name": "bad-1", "hold": False}
        assert report.error_tag is not None and report.error_message is not None
        assert "no row bad-1" in report.error_message
        assert report.failed_at.tzinfo is not None
        await advance(env, "1h")
        assert len(await runs(engine, "handler")) == 1
        # a run that succeeds reports nothing
        ok = await engine.start("job.fails", {"name": "fine"})
        assert await ok.result(timeout=10) == "fine"
        await advance(env, "1h")
        assert len(await runs(engine, "handler")) == 1


async def test_finish_timeout_fails_the_run_and_frees_its_slot(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        slow = await engine.start("job.finish", {"name": "slow", "hold": True})
        assert slow.status == "started" and slow.run_id is not None
        waiting = await engine.start("job.finish", {"name": "next"})
        assert waiting.status == "queued"
        await advance(env, "9m59s")
        assert (await engine.get_run(slow.run_id)).status == "running"
        await advance(env, "2s")
        run = await engine.get_run(slow.run_id)
        assert (run.status, run.error_tag) == ("failed", "FinishTimeout")
        with pytest.raises(lg.RunFailed, match="FinishTimeout"):
            await engine.result(slow.run_id, timeout=10)
        # the slot is free: the waiting start runs
        done = await wait_runs(engine, "job.finish")
        assert done[0].output == "next"
        [report] = await reports(engine, 1)
        assert (report.reason, report.run_id, report.error_tag) == ("finish-timeout", slow.run_id, "FinishTimeout")
        assert report.payload == {"name": "slow", "hold": True}
        await advance(env, "1h")
        assert len(await runs(engine, "handler")) == 1  # reported once


async def test_start_timeout_expires_a_parked_start(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        blocker = await engine.start("job.start", {"name": "blocker", "hold": True})
        stuck = await engine.start("job.start", {"name": "stuck"})
        assert stuck.status == "queued"
        await advance(env, "4m59s")
        assert await parked(engine, "job.start") == 1
        await advance(env, "2s")
        assert await parked(engine, "job.start") == 0
        rows = await ledger_rows(engine, stuck.ticket)
        assert [(r["kind"], r["outcome"]) for r in rows] == [("arrival", "queued"), ("drain", "expired")]
        assert rows[-1]["reason"] == "start-timeout" and rows[-1]["waited"] == pytest.approx(301, abs=0.5)
        trace = await engine.trace(stuck.ticket)
        assert (trace.state, trace.reason, trace.run_id) == ("expired", "start-timeout", None)
        assert (await flow_of(engine, "job.start")).expired == 1
        [report] = await reports(engine, 1)
        assert (report.workflow, report.reason, report.run_id) == ("job.start", "start-timeout", None)
        assert report.payload == {"name": "stuck", "hold": False}
        assert report.error_tag == "StartTimeout"
        await advance(env, "1h")
        assert len(await runs(engine, "handler")) == 1  # reported once
        # the blocker was never affected; finishing it admits nothing (the stuck start is gone)
        assert blocker.run_id is not None
        await engine.signal(blocker.run_id, "go", {})
        assert await engine.result(blocker.run_id, timeout=10) == "blocker"
        assert len(await runs(engine, "job.start")) == 1


async def test_start_timeout_is_measured_from_the_first_arrival_of_a_group(
    env_factory: Callable[..., TestEnv],
) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("job.debounced", {"name": "n0"})
        for n in (1, 2):  # arrivals at 9m and 18m: the debounce never goes quiet for 10m
            await advance(env, "9m")
            await engine.start("job.debounced", {"name": f"n{n}"})
        await advance(env, "6m59s")
        assert await parked(engine, "job.debounced") == 1
        await advance(env, "2s")  # 25m01s after the first arrival, though the last came 7m ago
        assert await parked(engine, "job.debounced") == 0
        assert (await arrival(engine, first.ticket))["outcome"] == "queued"
        assert [r["outcome"] for r in await ledger_rows(engine, first.ticket)][-1] == "expired"
        [report] = await reports(engine, 1)
        assert (report.reason, report.payload) == ("start-timeout", {"name": "n2", "hold": False})


async def test_a_failing_failure_handler_is_not_renotified(
    env_factory: Callable[..., TestEnv], caplog: pytest.LogCaptureFixture
) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        handle = await engine.start("job.fails.twice", {"name": "bad-2"})
        assert handle.run_id is not None
        with pytest.raises(lg.RunFailed):
            await engine.result(handle.run_id, timeout=10)
        await advance(env)
        [failed] = await wait_runs(engine, "handler.broken", status="failed")
        assert failed.payload["run_id"] == handle.run_id
        await advance(env, "1h")
        assert len(await runs(engine, "handler.broken")) == 1
        assert await runs(engine, "handler") == []
        assert await parked(engine, "handler.broken") == 0
        assert any("handler.broken" in r.getMessage() and failed.id in r.getMessage() for r in caplog.records)


def test_a_failure_handler_cannot_declare_its_own_on_failure() -> None:
    app = lg.App()

    @app.workflow(name="handler", on_failure="handler")
    async def handler(ctx: lg.Context, p: lg.FailureReport) -> None:
        return None

    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    assert (info.value.workflow, info.value.fields) == ("handler", ["on_failure"])


@pytest.mark.parametrize("parked_as", ["delayed", "concurrency"])
async def test_a_parked_start_of_an_unregistered_workflow_expires_and_reports(
    env_factory: Callable[..., TestEnv], parked_as: str
) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        if parked_as == "delayed":
            at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=30)
            gone = await engine.start("job.gone", {"name": "renamed-away"}, at=at)
        else:
            await engine.start("job.gone", {"name": "blocker", "hold": True})
            gone = await engine.start("job.gone", {"name": "renamed-away"})
            await env.settle()  # the blocker waits for its signal: nothing of job.gone is left runnable
        assert gone.status == "queued" and gone.deferral is not None and gone.deferral.mode == parked_as
        start = env.clock.now()
    # the next deploy no longer has job.gone, but still has its failure handler
    async with env_factory(make_app(with_gone=False), start=start) as env:
        engine = env.engine
        await advance(env, "1h")
        rows = await ledger_rows(engine, gone.ticket)
        assert (rows[-1]["kind"], rows[-1]["outcome"], rows[-1]["reason"]) == ("drain", "expired", "unregistered")
        [report] = await reports(engine, 1)
        assert (report.workflow, report.reason, report.run_id) == ("job.gone", "unregistered", None)
        assert report.payload == {"name": "renamed-away", "hold": False}
        assert (await engine.trace(gone.ticket)).state == "expired"


async def test_a_delayed_start_is_not_expired_before_it_arrives(env_factory: Callable[..., TestEnv]) -> None:
    """The start timeout of a delayed start runs from ``at``, when it becomes an ordinary arrival."""
    async with env_factory(make_app()) as env:
        engine = env.engine
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(hours=1)
        later = await engine.start("job.start", {"name": "later"}, at=at)
        await advance(env, "59m")  # well past the 5m start timeout, still before ``at``
        assert await parked(engine, "job.start") == 1
        await advance(env, "2m")
        [run] = await wait_runs(engine, "job.start")
        assert (run.output, run.ticket) == ("later", later.ticket)
        assert await runs(engine, "handler") == []
