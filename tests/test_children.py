"""Child runs: start, wait, lineage, replay, and what closing the parent does to them."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually


class Num(BaseModel):
    x: int


class Close(BaseModel):
    policy: str
    how: str  # how the parent ends while its child is live: "cancel" | "fail" | "succeed"


class Go(BaseModel):
    ok: bool = True


class Other(BaseModel):
    run_id: str


def make_app(
    engine_ref: list[lg.Engine], child_started: asyncio.Event | None = None, broken: set[str] | None = None
) -> lg.App:
    app = lg.App()

    def square(x: int) -> int:
        return x * x

    @app.workflow(name="child.square")
    async def child_square(ctx: lg.Context, p: Num) -> int:
        return int(await ctx.step("square", square, p.x))

    @app.workflow(name="child.lineage")
    async def child_lineage(ctx: lg.Context, p: Num) -> bool:
        async def check() -> bool:
            engine = engine_ref[0]
            me = await engine.get_run(ctx.run_id)
            assert me.parent_id is not None
            entries = await engine.steps(me.parent_id)
            return any(e.kind == "child" and e.output["run_id"] == ctx.run_id for e in entries)

        return bool(await ctx.step("check", check))

    @app.workflow(name="child.fails")
    async def child_fails(ctx: lg.Context, p: Num) -> int:
        def explode() -> int:
            raise KeyError(f"no row {p.x}")

        return int(await ctx.step("explode", explode))

    def fragile(x: int) -> int:
        if broken:
            raise RuntimeError("the child's dependency is down")
        return x * 10

    @app.workflow(name="child.fragile")
    async def child_fragile(ctx: lg.Context, p: Num) -> int:
        return int(await ctx.step("fragile", fragile, p.x))

    @app.workflow(name="parent.of_fragile")
    async def parent_of_fragile(ctx: lg.Context, p: Num) -> int:
        h = await ctx.start_child("child.fragile", {"x": p.x})
        return int(await ctx.wait_child(h)) + 1

    @app.workflow(name="child.waits")
    async def child_waits(ctx: lg.Context, p: Num) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.x

    @app.workflow(name="child.busy")
    async def child_busy(ctx: lg.Context, p: Num) -> int:
        async def hang() -> int:
            assert child_started is not None
            child_started.set()
            await asyncio.Event().wait()
            return 0

        return int(await ctx.step("hang", hang))

    @app.workflow(name="parent.sum")
    async def parent_sum(ctx: lg.Context, p: Num) -> int:
        h = await ctx.start_child("child.square", {"x": p.x}, parent_close="cancel")
        return int(await ctx.wait_child(h)) + 1

    @app.workflow(name="parent.lineage")
    async def parent_lineage(ctx: lg.Context, p: Num) -> bool:
        h = await ctx.start_child(child_lineage, {"x": p.x})
        return bool(await ctx.wait_child(h))

    @app.workflow(name="parent.catches")
    async def parent_catches(ctx: lg.Context, p: Num) -> str:
        h = await ctx.start_child("child.fails" if p.x == 0 else "child.waits", {"x": p.x})
        try:
            await ctx.wait_child(h)
        except lg.RunFailed as exc:
            return f"failed:{exc.error_tag}"
        except lg.RunCancelled as exc:
            return f"cancelled:{exc.reason}"
        return "succeeded"

    @app.workflow(name="parent.uncaught")
    async def parent_uncaught(ctx: lg.Context, p: Num) -> int:
        h = await ctx.start_child("child.fails", {"x": p.x})
        return int(await ctx.wait_child(h))

    @app.workflow(name="parent.replays")
    async def parent_replays(ctx: lg.Context, p: Num) -> int:
        h = await ctx.start_child("child.waits", {"x": p.x})
        await ctx.wait_for_signal("next", Go)
        h2 = await ctx.start_child("child.waits", {"x": p.x + 1})
        await ctx.wait_for_signal("next", Go)
        return int(await ctx.wait_child(h)) + int(await ctx.wait_child(h2))

    @app.workflow(name="parent.closes")
    async def parent_closes(ctx: lg.Context, p: Close) -> str:
        await ctx.start_child("child.waits", {"x": 7}, parent_close=p.policy)  # type: ignore[arg-type]
        await ctx.wait_for_signal("finish", Go)
        if p.how == "fail":
            raise RuntimeError("parent gave up")
        return "done"

    @app.workflow(name="parent.busy_child")
    async def parent_busy_child(ctx: lg.Context, p: Num) -> int:
        h = await ctx.start_child("child.busy", {"x": p.x}, parent_close="terminate")
        return int(await ctx.wait_child(h))

    @app.workflow(name="parent.bad_policy")
    async def parent_bad_policy(ctx: lg.Context, p: Num) -> str:
        await ctx.start_child("child.square", {"x": 1}, parent_close="orphan")  # type: ignore[arg-type]
        return "unreachable"

    @app.workflow(name="parent.unknown_child")
    async def parent_unknown_child(ctx: lg.Context, p: Num) -> str:
        await ctx.start_child("no.such.workflow", {"x": 1})
        return "unreachable"

    @app.workflow(name="parent.not_mine")
    async def parent_not_mine(ctx: lg.Context, p: Other) -> str:
        await ctx.wait_child(lg.ChildHandle(run_id=p.run_id, workflow="child.square"))
        return "unreachable"

    @app.workflow(name="parent.bad_payload")
    async def parent_bad_payload(ctx: lg.Context, p: Num) -> str:
        await ctx.start_child("child.square", {"y": 1})
        return "unreachable"

    return app


async def _children(engine: lg.Engine, parent_id: str) -> list[lg.RunInfo]:
    return await engine.list_runs(parent_id=parent_id)


async def _status(engine: lg.Engine, run_id: str, *statuses: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status in statuses else None


async def _waiting(engine: lg.Engine, run_id: str, on: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "running" and run.waiting_on == on and run.owner is None else None


async def test_wait_child_returns_the_childs_result(make_engine: Any) -> None:
    ref: list[lg.Engine] = []
    async with make_engine(make_app(ref)) as engine:
        ref.append(engine)
        h = await engine.start("parent.sum", {"x": 4})
        assert await engine.result(h.run_id, timeout=15) == 17
        [child] = await _children(engine, h.run_id)
        assert (child.workflow, child.status, child.output) == ("child.square", "succeeded", 16)
        assert (child.parent_id, child.parent_close) == (h.run_id, "cancel")
        started = [e for e in await engine.events(child.id) if e.type == "run-started"]
        assert started[0].data["parent_id"] == h.run_id
        entries = {s.key: s for s in await engine.steps(h.run_id)}
        assert entries["child:child.square#0"].kind == "child"
        assert entries["child:child.square#0"].output["run_id"] == child.id  # the gate's decision, recorded


async def test_lineage_is_durable_before_the_child_body_runs(make_engine: Any) -> None:
    ref: list[lg.Engine] = []
    async with make_engine(make_app(ref)) as engine:
        ref.append(engine)
        h = await engine.start("parent.lineage", {"x": 1})
        assert await engine.result(h.run_id, timeout=15) is True


@pytest.mark.parametrize(("x", "expected"), [(0, "failed:KeyError"), (5, "cancelled:operator said no")])
async def test_wait_child_raises_the_childs_failure(make_engine: Any, x: int, expected: str) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.catches", {"x": x})
        if x:
            [child] = await eventually(lambda: _children(engine, h.run_id), what="child created")
            await eventually(lambda: _waiting(engine, child.id, "signal"), what="child waiting")
            await engine.cancel(child.id, reason="operator said no")
        assert await engine.result(h.run_id, timeout=15) == expected


async def test_an_uncaught_child_failure_fails_the_parent(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.uncaught", {"x": 3})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(h.run_id, timeout=15)
        assert info.value.error_tag == "RunFailed"
        assert "KeyError" in (info.value.error_message or "")


async def test_a_parent_redriven_after_its_child_was_fixed_gets_the_childs_result(make_engine: Any) -> None:
    broken = {"dependency"}
    async with make_engine(make_app([], broken=broken)) as engine:
        h = await engine.start("parent.of_fragile", {"x": 4})
        with pytest.raises(lg.RunFailed):
            await engine.result(h.run_id, timeout=15)
        [child] = await _children(engine, h.run_id)
        wait = [s for s in await engine.steps(h.run_id) if s.kind == "wait_child"]
        assert [(s.status, s.error_tag) for s in wait] == [("failed", "RuntimeError")]
        await engine.redrive(h.run_id)
        with pytest.raises(lg.RunFailed):  # the child is still failed: the parent fails again
            await engine.result(h.run_id, timeout=15)

        broken.clear()
        await engine.redrive(child.id)
        assert await engine.result(child.id, timeout=15) == 40
        await engine.redrive(h.run_id)
        assert await engine.result(h.run_id, timeout=15) == 41
        assert len(await _children(engine, h.run_id)) == 1  # the same child, not a new one


async def test_a_replayed_parent_does_not_start_the_child_again(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.replays", {"x": 10})
        await eventually(lambda: _waiting(engine, h.run_id, "signal"), what="parent parked")
        first = await _children(engine, h.run_id)
        assert len(first) == 1
        await engine.signal(h.run_id, "next", {})
        two = await eventually(lambda: _children_count(engine, h.run_id, 2), what="second child started after re-entry")
        await eventually(lambda: _waiting(engine, h.run_id, "signal"), what="parent parked again")
        for child in two:
            await eventually(functools.partial(_waiting, engine, child.id, "signal"), what="child waiting")
            await engine.signal(child.id, "go", {})
        await engine.signal(h.run_id, "next", {})
        assert await engine.result(h.run_id, timeout=15) == 21
        run = await engine.get_run(h.run_id)
        assert run.entries >= 3  # re-entered twice, replaying start_child each time
        children = await _children(engine, h.run_id)
        assert sorted(c.payload["x"] for c in children) == [10, 11]
        assert first[0].id in {c.id for c in children}


async def _children_count(engine: lg.Engine, parent_id: str, n: int) -> list[lg.RunInfo] | None:
    children = await _children(engine, parent_id)
    return children if len(children) == n else None


@pytest.mark.parametrize("how", ["cancel", "fail", "succeed"])
@pytest.mark.parametrize(
    ("policy", "child_status", "child_tag"),
    [("cancel", "cancelled", "Cancelled"), ("terminate", "cancelled", "Terminated"), ("abandon", "running", None)],
)
async def test_closing_the_parent_applies_the_policy(
    make_engine: Any, policy: str, child_status: str, child_tag: str | None, how: str
) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.closes", {"policy": policy, "how": how})
        await eventually(lambda: _waiting(engine, h.run_id, "signal"), what="parent parked")
        [child] = await _children(engine, h.run_id)
        await eventually(lambda: _waiting(engine, child.id, "signal"), what="child waiting")
        if how == "cancel":
            await engine.cancel(h.run_id, reason="stop it")
        else:
            await engine.signal(h.run_id, "finish", {})
        parent = await eventually(
            lambda: _status(engine, h.run_id, "cancelled", "failed", "succeeded"), what="parent closed"
        )
        assert parent.status == {"cancel": "cancelled", "fail": "failed", "succeed": "succeeded"}[how]
        child_now = await engine.get_run(child.id)
        assert child_now.status == child_status
        if policy == "abandon":
            await engine.signal(child.id, "go", {})
            assert await engine.result(child.id, timeout=15) == 7
            assert (await engine.get_run(child.id)).status == "succeeded"
        else:
            assert child_now.error_tag == child_tag
            with pytest.raises(lg.RunCancelled):
                await engine.result(child.id, timeout=5)
            [event] = [e for e in await engine.events(child.id) if e.type == "run-cancelled"]
            assert event.data == {"reason": "parent-closed", "policy": policy, "parent_id": h.run_id}


async def test_suspending_the_parent_does_not_close_its_children(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.catches", {"x": 9})  # waits on a child that waits for "go"
        [child] = await eventually(lambda: _children(engine, h.run_id), what="child created")
        await eventually(lambda: _waiting(engine, h.run_id, "child"), what="parent waiting on its child")
        await eventually(lambda: _waiting(engine, child.id, "signal"), what="child waiting")
        await engine.suspend(h.run_id)
        await engine.signal(child.id, "go", {})
        assert await engine.result(child.id, timeout=15) == 9  # the child went on and finished
        assert (await engine.get_run(h.run_id)).status == "suspended"
        await engine.resume(h.run_id)
        assert await engine.result(h.run_id, timeout=15) == "succeeded"


async def test_closing_the_parent_stops_a_child_executing_here(make_engine: Any) -> None:
    started = asyncio.Event()
    async with make_engine(make_app([], started)) as engine:
        h = await engine.start("parent.busy_child", {"x": 1})
        await asyncio.wait_for(started.wait(), 15)
        [child] = await _children(engine, h.run_id)
        assert child.id in engine.executing
        await engine.cancel(h.run_id, reason="enough")
        await eventually(lambda: child.id not in engine.executing, what="child execution stopped")
        child_now = await engine.get_run(child.id)
        assert (child_now.status, child_now.error_tag) == ("cancelled", "Terminated")
        assert [s.status for s in await engine.steps(child.id)] == []  # the hung step never recorded


async def test_bad_parent_close_is_refused(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.bad_policy", {"x": 1})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(h.run_id, timeout=15)
        assert info.value.error_tag == "ValueError"
        assert "'orphan'" in (info.value.error_message or "")
        assert "abandon" in (info.value.error_message or "")
        assert await _children(engine, h.run_id) == []


async def test_unknown_child_workflow_fails_the_parent(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.unknown_child", {"x": 1})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(h.run_id, timeout=15)
        assert info.value.error_tag == "UnknownWorkflow"
        assert "no.such.workflow" in (info.value.error_message or "")
        assert "child.square" in (info.value.error_message or "")  # the registered names are listed
        assert await _children(engine, h.run_id) == []


async def test_waiting_on_a_run_that_is_not_a_child_is_refused(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        other = await engine.start("child.square", {"x": 2})
        h = await engine.start("parent.not_mine", {"run_id": other.run_id})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(h.run_id, timeout=15)
        assert info.value.error_tag == "ValueError"
        assert f"run {other.run_id} is not a child of run {h.run_id}" in (info.value.error_message or "")
        missing = await engine.start("parent.not_mine", {"run_id": "run_nope"})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(missing.run_id, timeout=15)
        assert info.value.error_tag == "UnknownRun"


async def test_bad_child_payload_fails_the_parent(make_engine: Any) -> None:
    async with make_engine(make_app([])) as engine:
        h = await engine.start("parent.bad_payload", {"x": 1})
        with pytest.raises(lg.RunFailed) as info:
            await engine.result(h.run_id, timeout=15)
        assert info.value.error_tag == "PayloadError"
        assert "x" in (info.value.error_message or "")
        assert await _children(engine, h.run_id) == []
