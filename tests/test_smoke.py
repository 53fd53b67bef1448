from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg


class Numbers(BaseModel):
    x: int


class Approval(BaseModel):
    ok: bool


def make_app(calls: list[int]) -> lg.App:
    app = lg.App()

    def double(x: int) -> int:
        calls.append(x)
        return x * 2

    @app.workflow(name="pipeline")
    async def pipeline(ctx: lg.Context, p: Numbers) -> int:
        a = await ctx.step("double", double, p.x)
        b, c = await asyncio.gather(ctx.step("left", double, a), ctx.step("right", double, a + 1))
        await ctx.sleep("cool-off", "7d")
        approval = await ctx.wait_for_signal("approval", Approval, timeout="3d")
        return int(b + c + (1 if approval and approval.ok else 0))

    return app


async def test_pipeline_with_fake_clock(env_factory: Any) -> None:
    calls: list[int] = []
    async with env_factory(make_app(calls)) as env:
        handle = await env.engine.start("pipeline", {"x": 3})
        await env.settle()
        run = await env.engine.get_run(handle.run_id)
        assert (run.status, run.waiting_on) == ("running", "timer")
        await env.advance("7d")
        run = await env.engine.get_run(handle.run_id)
        assert run.waiting_on == "signal"
        await env.engine.signal(handle.run_id, "approval", {"ok": True})
        assert await env.engine.result(handle.run_id, timeout=10) == 12 + 14 + 1
        assert sorted(calls) == [3, 6, 7]
