"""``ctx.start_child(..., flow_control=)``: a child run's own step flow control, checked like ``start``'s."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually


class Job(BaseModel):
    n: int = 0
    tenant: str = "t"
    gate: bool | None = None


class Bad(BaseModel):
    which: int


def make_app(release: asyncio.Event) -> lg.App:
    app = lg.App()

    @app.workflow(name="child", flow_control=lg.FlowControl("child-default", parallelism=2))
    async def child(ctx: lg.Context, p: Job) -> str | None:
        async def probe() -> str | None:
            if p.n == 0:
                await release.wait()
            found = ctx.flow_control
            return None if found is None else f"{found.key}/{found.parallelism}"

        return await ctx.step("probe", probe)  # type: ignore[no-any-return]

    @app.workflow(name="slotted", concurrency=lg.Concurrency(limit=1))
    async def slotted(ctx: lg.Context, p: Job) -> str | None:
        return await child(ctx, p)

    @app.workflow(name="parent")
    async def parent(ctx: lg.Context, p: Job) -> list[Any]:
        given = lg.FlowControl(lambda c: f"tenant:{c.tenant}", parallelism=3)
        handles = [
            await ctx.start_child("child", {"n": 1, "tenant": "a"}, gate=p.gate, flow_control=given),
            await ctx.start_child("child", {"n": 1, "tenant": "b"}, gate=p.gate),  # the workflow's own
        ]
        return [await ctx.wait_child(h) for h in handles]

    @app.workflow(name="queued-parent")
    async def queued_parent(ctx: lg.Context, p: Job) -> list[Any]:
        first = await ctx.start_child("slotted", {"n": 0})
        second = await ctx.start_child("slotted", {"n": 1}, flow_control=lg.FlowControl("later", rate=5))
        return [second.status, await ctx.wait_child(first), await ctx.wait_child(second)]

    bad_controls: list[Any] = [
        lg.FlowControl("k", rate=0),
        lg.FlowControl("  ", parallelism=2),
        lg.FlowControl(lambda c: "", parallelism=2),
        "k",
    ]

    @app.workflow(name="bad-parent")
    async def bad_parent(ctx: lg.Context, p: Bad) -> str:
        try:
            await ctx.start_child("child", {"n": 1}, flow_control=bad_controls[p.which])
        except lg.InvalidArgument as exc:
            return str(exc)
        return "accepted"

    return app


async def test_a_childs_own_flow_control_governs_its_steps(make_engine: Any) -> None:
    release = asyncio.Event()
    release.set()
    async with make_engine(make_app(release)) as engine:
        for gate in (None, False):
            out = await engine.run("parent", {"gate": gate}, timeout=30)
            assert out == ["tenant:a/3", "child-default/2"], gate  # its key resolved from the child's payload


async def test_a_queued_child_keeps_its_flow_control_until_admitted(make_engine: Any) -> None:
    release = asyncio.Event()
    async with make_engine(make_app(release)) as engine:
        handle = await engine.start("queued-parent", {})

        async def parked() -> bool:
            return sum(f.queued for f in await engine.flow(workflow="slotted")) == 1

        await eventually(parked, what="the second child queued at its gate")
        release.set()
        assert await engine.result(str(handle.run_id), timeout=30) == ["queued", None, "later/None"]


async def test_a_bad_child_flow_control_is_refused_and_nothing_started(make_engine: Any) -> None:
    release = asyncio.Event()
    async with make_engine(make_app(release)) as engine:
        fields = ["flow_control.rate", "flow_control.key", "flow_control.key", "flow_control: must be lg.FlowControl"]
        for which, field in enumerate(fields):
            out = await engine.run("bad-parent", {"which": which}, timeout=30)
            assert field in out, out
        assert {r.workflow for r in await engine.list_runs(limit=20)} == {"bad-parent"}
        assert await engine.flow_keys() == []
