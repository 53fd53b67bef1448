"""Staleness: a live run with no progress past its ``stall_after`` is reported once.

Most tests drive a fake clock and call the sweep's tick (``report_stalled``) directly;
the last ones let the real sweep fire with a small threshold in real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store.base import Row, Tx
from lockgate.sweeps.staleness import report_stalled

from .apps.waits import eventually


class Job(BaseModel):
    tag: str


class Go(BaseModel):
    ok: bool = True


class Watch:
    """What ``on_stalled`` was told, and a step the test can hold and release."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def on_stalled(self, info: dict[str, Any]) -> None:
        self.reports.append(info)

    async def on_stalled_async(self, info: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        self.reports.append(info)


def make_app(watch: Watch, *, quick: bool = False) -> lg.App:
    """The workflows; ``quick`` adds one whose 1s threshold makes the real sweep tick fast (not shorter: a loaded
    machine may take that long to park a new run on its signal, which it would rightly report as no progress)."""
    app = lg.App()

    @app.workflow(name="stale.signal", stall_after="10m", on_stalled=watch.on_stalled)
    async def stale_signal(ctx: lg.Context, p: Job) -> str:
        await ctx.wait_for_signal("go", Go)
        await ctx.wait_for_signal("go", Go)
        return "done"

    @app.workflow(name="stale.default", on_stalled=watch.on_stalled)
    async def stale_default(ctx: lg.Context, p: Job) -> str:
        await ctx.wait_for_signal("go", Go)
        return "done"

    @app.workflow(name="stale.sleeps", stall_after="10m", on_stalled=watch.on_stalled)
    async def stale_sleeps(ctx: lg.Context, p: Job) -> str:
        await ctx.sleep("long", "2h")
        return "rested"

    async def hang() -> str:
        watch.entered.set()
        await watch.release.wait()
        return "unstuck"

    @app.workflow(name="stale.stuck", on_stalled=watch.on_stalled_async)
    async def stale_stuck(ctx: lg.Context, p: Job) -> str:
        return str(await ctx.step("hang", hang))

    if quick:

        @app.workflow(name="stale.quick", stall_after="1s", on_stalled=watch.on_stalled)
        async def stale_quick(ctx: lg.Context, p: Job) -> str:
            await ctx.wait_for_signal("go", Go)
            return "done"

    @app.workflow(name="stale.broken_callback", stall_after="10m", on_stalled=_raise)
    async def stale_broken_callback(ctx: lg.Context, p: Job) -> str:
        await ctx.wait_for_signal("go", Go)
        return "done"

    return app


def _raise(info: dict[str, Any]) -> None:
    raise RuntimeError("pager is down")


async def _stalled(engine: lg.Engine, run_id: str) -> list[Any]:
    return [e.data for e in await engine.events(run_id) if e.type == "run-stalled"]


async def _start(engine: lg.Engine, workflow: str) -> str:
    h = await engine.start(workflow, {"tag": "t"})
    assert h.run_id is not None
    return h.run_id


async def test_a_run_awaiting_a_signal_is_reported_once_per_threshold(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch)) as env:
        quick = await _start(env.engine, "stale.signal")  # stall_after 10m
        slow = await _start(env.engine, "stale.default")  # the engine's default, 30m
        await env.settle()
        await env.advance("9m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0
        await env.advance("2m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        [data] = await _stalled(env.engine, quick)
        assert (data["reason"], data["waiting_on"]) == ("awaiting-signal", "signal")
        assert data["idle_ms"] >= 11 * 60 * 1000
        assert [(r["run_id"], r["workflow"], r["reason"]) for r in watch.reports] == [
            (quick, "stale.signal", "awaiting-signal")
        ]
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0  # once, not on every tick
        await env.advance("1h")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1  # only the 30m run is new
        assert len(await _stalled(env.engine, quick)) == 1
        assert [d["reason"] for d in await _stalled(env.engine, slow)] == ["awaiting-signal"]
        assert [r["run_id"] for r in watch.reports] == [quick, slow]
        assert (await env.engine.get_run(quick)).status == "running"  # a report changes nothing else


async def test_progress_after_a_report_makes_the_run_eligible_again(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch)) as env:
        run_id = await _start(env.engine, "stale.signal")
        await env.settle()
        await env.advance("11m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        await env.engine.signal(run_id, "go", {})  # progress at the very instant of the report
        await env.settle()
        assert (await env.engine.get_run(run_id)).waiting_on == "signal"
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0  # it just moved
        await env.advance("11m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        assert len(await _stalled(env.engine, run_id)) == 2
        await env.engine.signal(run_id, "go", {})
        assert await env.engine.result(run_id, timeout=10) == "done"
        await env.advance("1d")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0  # finished runs are never stale


async def test_a_suspended_run_is_reported_as_suspended(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch)) as env:
        run_id = await _start(env.engine, "stale.signal")
        await env.settle()
        await env.engine.suspend(run_id, reason="look at it")
        await env.advance("11m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        [data] = await _stalled(env.engine, run_id)
        assert data["reason"] == "suspended"
        assert watch.reports[0]["reason"] == "suspended"


async def test_a_run_sleeping_on_a_future_timer_is_not_reported(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch)) as env:
        run_id = await _start(env.engine, "stale.sleeps")
        await env.settle()
        run = await env.engine.get_run(run_id)
        assert (run.status, run.waiting_on) == ("running", "timer")
        await env.advance("1h")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0
        assert await _stalled(env.engine, run_id) == []
        await env.advance("1h")
        assert await env.engine.result(run_id, timeout=10) == "rested"
        assert watch.reports == []


async def test_a_run_stuck_in_a_step_is_reported_as_no_progress(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch), lease="2h") as env:
        run_id = await _start(env.engine, "stale.stuck")
        await asyncio.wait_for(watch.entered.wait(), 10)
        env.clock.advance("29m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 0
        env.clock.advance("2m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        [data] = await _stalled(env.engine, run_id)
        assert (data["reason"], data["waiting_on"]) == ("no-progress", None)
        assert [r["reason"] for r in watch.reports] == ["no-progress"]  # the async callback was awaited
        watch.release.set()
        assert await env.engine.result(run_id, timeout=10) == "unstuck"


async def test_a_failing_callback_does_not_stop_the_report(env_factory: Any) -> None:
    watch = Watch()
    async with env_factory(make_app(watch)) as env:
        broken = await _start(env.engine, "stale.broken_callback")
        other = await _start(env.engine, "stale.signal")
        await env.settle()
        await env.advance("11m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 2
        assert len(await _stalled(env.engine, broken)) == 1
        assert [r["run_id"] for r in watch.reports] == [other]


async def _sweep_ticks(tx: Tx) -> list[Row]:
    return await tx.execute("list_sweeps")


async def _ticks(engine: lg.Engine) -> int:
    rows = await engine.store.read(_sweep_ticks)
    return sum(int(r["ticks"]) for r in rows if r["name"] == "staleness")


@pytest.mark.parametrize(("workflow", "options"), [("stale.quick", {}), ("stale.default", {"stall_after": "1s"})])
async def test_the_real_sweep_reports_a_stalled_run(make_engine: Any, workflow: str, options: dict[str, Any]) -> None:
    watch = Watch()
    async with make_engine(make_app(watch, quick=workflow == "stale.quick"), **options) as engine:
        run_id = await _start(engine, workflow)
        [data] = await eventually(lambda: _stalled(engine, run_id), what="run-stalled written by the sweep")
        assert data["reason"] == "awaiting-signal"
        reports = await eventually(lambda: watch.reports, what="on_stalled called")  # called after the write
        assert [r["run_id"] for r in reports] == [run_id]
        seen = await _ticks(engine)
        await eventually(lambda: _more_ticks(engine, seen + 3), what="three more sweep ticks")
        assert len(await _stalled(engine, run_id)) == 1
        assert len(watch.reports) == 1


async def _more_ticks(engine: lg.Engine, at_least: int) -> bool:
    return await _ticks(engine) >= at_least


async def test_a_run_awaiting_an_update_is_reported_as_awaiting_signal(env_factory: Any) -> None:
    watch = Watch()
    app = make_app(watch)

    @app.workflow(name="stale.update", stall_after="10m", on_stalled=watch.on_stalled)
    async def stale_update(ctx: lg.Context, p: Job) -> str:
        return str(await ctx.handle_update("rename", Job, lambda j: j.tag))

    async with env_factory(app) as env:
        run_id = await _start(env.engine, "stale.update")
        await env.settle()
        assert (await env.engine.get_run(run_id)).waiting_on == "update"
        await env.advance("11m")
        assert await report_stalled(env.engine.worker, env.engine.stall_after) == 1
        [data] = await _stalled(env.engine, run_id)
        assert (data["reason"], data["waiting_on"]) == ("awaiting-signal", "update")


async def _body(ctx: lg.Context, p: Job) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("options", "field", "problem"),
    [({"stall_after": "soon"}, "stall_after", "soon"), ({"on_stalled": "page me"}, "on_stalled", "callable")],
)
async def test_bad_staleness_options_are_refused_at_boot(
    make_engine: Any, options: dict[str, Any], field: str, problem: str
) -> None:
    app = lg.App()
    app.workflow(name="stale.bad", **options)(_body)
    with pytest.raises(lg.DefinitionError) as info:
        async with make_engine(app):
            pass
    assert (info.value.workflow, info.value.fields) == ("stale.bad", [field])
    assert problem in str(info.value)


@pytest.mark.parametrize("value", ["soon", -5])
async def test_a_bad_engine_stall_after_is_refused(make_engine: Any, value: Any) -> None:
    with pytest.raises(ValueError, match="stall_after"):
        make_engine(make_app(Watch()), stall_after=value)
