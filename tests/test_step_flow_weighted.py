"""Weighted step flow keys: ``FlowControl(cost=)`` counts units (tokens, say) in the key's window.

A call reserves its cost when admitted; ``ctx.settle`` (or ``settle=``) replaces the reservation
with the units it really used. A call is admitted only when the units counted in the trailing
period plus its own reservation fit the rate. Semantics on the fake clock (the journal's instants
are exact), on both stores.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

T0 = 1_800_000_000.0


class Call(BaseModel):
    reserve: int
    used: int


async def llm(reserve: int, used: int) -> int:
    return used


def weighted_app(**control: Any) -> lg.App:
    app = lg.App()
    fc = lg.FlowControl("llm", rate=100, period="1m", cost=lambda reserve, used: reserve, **control)

    @app.workflow(name="ask", flow_control=fc)
    async def ask(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", llm, p.reserve, p.used))

    return app


async def started(engine: lg.Client, handle: lg.RunHandle) -> float | None:
    for entry in await engine.steps(handle.run_id or ""):
        if entry.name == "llm" and entry.status == "completed":
            assert isinstance(entry.started_at, datetime)
            return entry.started_at.timestamp() - T0
    return None


async def test_a_settled_refund_lets_the_next_call_in_and_an_overrun_holds_the_window(env_factory: Any) -> None:
    app = weighted_app(settle=lambda used: used)
    async with env_factory(app, start=T0, inline_sleep=0) as env:
        engine = env.engine
        a = await engine.start("ask", {"reserve": 60, "used": 20})  # reserves 60, settles at 20
        await env.settle()
        await env.advance("10s")
        b = await engine.start("ask", {"reserve": 50, "used": 70})  # 20 + 50 fit; settles 20 over
        await env.settle()
        c = await engine.start("ask", {"reserve": 40, "used": 40})  # 20 + 70 + 40 > 100: waits
        await env.settle()
        assert [await started(engine, h) for h in (a, b, c)] == [0, 10, None]
        (key,) = await engine.flow_keys("llm")
        assert (key.weighted, key.units_reserved, key.units_settled, key.units_available) == (True, 0, 90, 10)
        assert key.waiting == 1
        await env.advance("50s")  # a's 20 leave the window: 70 + 40 > 100 still
        assert await started(engine, c) is None
        await env.advance("10s")  # b's 70 leave too, at 70s
        assert await started(engine, c) == 70
        assert await engine.result(c.run_id or "", timeout=10) == 40
