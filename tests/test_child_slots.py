"""A parent gives its concurrency slot back while it waits on a child: limited parents and children never deadlock."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually


class Depth(BaseModel):
    n: int
    tag: str = "r"


class Go(BaseModel):
    ok: bool = True


class Busy:
    """How many bodies of a limited workflow are inside a step at once, and the most ever seen."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def inside(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.02)
        self.now -= 1


def nested_app(busy: Busy) -> lg.App:
    """One ``Concurrency(limit=1)`` workflow whose runs start (and wait on) a child of the same workflow."""
    app = lg.App()

    @app.workflow(name="nest", concurrency=lg.Concurrency(limit=1))
    async def nest(ctx: lg.Context, p: Depth) -> str:
        await ctx.step("before", busy.inside)
        if p.n == 0:
            return "leaf"
        child = await ctx.start_child("nest", {"n": p.n - 1})  # through its gate: the default
        inner = await ctx.wait_child(child)
        await ctx.step("after", busy.inside)
        return f"{child.status}({inner})"

    return app


async def test_a_limit_one_parent_waits_on_a_child_of_its_own_workflow(make_engine: Any) -> None:
    busy = Busy()
    async with make_engine(nested_app(busy)) as engine:
        handle = await engine.start("nest", {"n": 2})
        out = await engine.result(str(handle.run_id), timeout=30)
        assert out == "queued(queued(leaf))"  # each child waited for the slot its parent gave back
        assert busy.most == 1  # never two bodies of the workflow at work at once
        runs = await engine.list_runs(limit=10)
        assert sorted(r.status for r in runs) == ["succeeded"] * 3
        assert sum(f.queued for f in await engine.flow(workflow="nest")) == 0


def crossed_app() -> lg.App:
    """Two limit-1 workflows whose runs each wait on a child of the other."""
    app = lg.App()

    async def body(ctx: lg.Context, p: Depth, other: str) -> str:
        if p.n == 0:
            return p.tag
        child = await ctx.start_child(other, {"n": p.n - 1, "tag": p.tag})
        return f"{other}:{await ctx.wait_child(child)}"

    @app.workflow(name="left", concurrency=lg.Concurrency(limit=1))
    async def left(ctx: lg.Context, p: Depth) -> str:
        return await body(ctx, p, "right")

    @app.workflow(name="right", concurrency=lg.Concurrency(limit=1))
    async def right(ctx: lg.Context, p: Depth) -> str:
        return await body(ctx, p, "left")

    return app


async def test_limited_parents_of_limited_children_cannot_wait_on_each_other(make_engine: Any) -> None:
    """``left`` holds its slot and waits on a ``right`` child queued behind the ``right`` run, which waits
    on a ``left`` child queued behind the first: each parent's slot, given back, lets the other's child in."""
    async with make_engine(crossed_app()) as engine:
        a = await engine.start("left", {"n": 1, "tag": "a"})
        b = await engine.start("right", {"n": 1, "tag": "b"})
        assert await engine.result(str(a.run_id), timeout=30) == "right:a"
        assert await engine.result(str(b.run_id), timeout=30) == "left:b"


def held_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="limited", concurrency=lg.Concurrency(limit=1))
    async def limited(ctx: lg.Context, p: Depth) -> str:
        if p.n > 0:
            return str(await ctx.wait_child(await ctx.start_child("free", {"n": 0})))
        await ctx.wait_for_signal("go", Go)
        return "held"

    @app.workflow(name="free")
    async def free(ctx: lg.Context, p: Depth) -> str:
        await ctx.wait_for_signal("go", Go)
        return "child"

    return app


async def _status(engine: lg.Engine, run_id: str, waiting_on: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "running" and run.waiting_on == waiting_on and run.owner is None else None


async def test_a_parent_takes_a_slot_again_before_it_goes_on(make_engine: Any) -> None:
    """While the parent waits on its child another run takes the slot; the parent, woken, waits for it."""
    async with make_engine(held_app()) as engine:
        parent = await engine.start("limited", {"n": 1})
        await eventually(lambda: _status(engine, str(parent.run_id), "child"), what="parent parked on its child")
        other = await engine.start("limited", {"n": 0})
        assert other.status == "started"  # the parent gave its slot back
        await eventually(lambda: _status(engine, str(other.run_id), "signal"), what="the other run waits")
        (child,) = [r for r in await engine.list_runs(limit=10) if r.workflow == "free"]
        await engine.signal(child.id, "go", {})
        await eventually(lambda: _status(engine, str(parent.run_id), "slot"), what="parent waits for a slot")
        assert (await engine.get_run(str(parent.run_id))).status == "running"
        await engine.signal(str(other.run_id), "go", {})
        assert await engine.result(str(parent.run_id), timeout=30) == "child"
        assert await engine.result(str(other.run_id), timeout=30) == "held"


async def test_a_parent_resumed_after_a_suspension_takes_a_slot_again(make_engine: Any) -> None:
    async with make_engine(held_app()) as engine:
        parent = await engine.start("limited", {"n": 1})
        await eventually(lambda: _status(engine, str(parent.run_id), "child"), what="parent parked on its child")
        await engine.suspend(str(parent.run_id), "look at it")
        other = await engine.start("limited", {"n": 0})
        assert other.status == "started"
        await eventually(lambda: _status(engine, str(other.run_id), "signal"), what="the other run waits")
        await engine.resume(str(parent.run_id))
        await eventually(lambda: _status(engine, str(parent.run_id), "slot"), what="resumed parent waits for a slot")
        await engine.signal(str(other.run_id), "go", {})
        await eventually(lambda: _status(engine, str(parent.run_id), "child"), what="parent back on its child")
        (child,) = [r for r in await engine.list_runs(limit=10) if r.workflow == "free"]
        await engine.signal(child.id, "go", {})
        assert await engine.result(str(parent.run_id), timeout=30) == "child"
