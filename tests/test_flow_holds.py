"""A store that forgot the flow slots it granted (what a failover to a standby behind does) never
lets one process execute more than a key's parallelism: the step granted past it waits here."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.engine.flow_holds import LocalHolds

from .apps.waits import eventually


class Job(BaseModel):
    n: int


def _forget_slots(store_url: str) -> None:
    """Delete the key's slot rows behind the engine's back, as a failover that lost their commits would."""
    sql = "DELETE FROM lockgate_flow_slots WHERE key = 'provider'"
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
    else:
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(sql)


async def test_a_grant_past_the_parallelism_waits_for_a_step_here_to_end(
    make_engine: Any, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = lg.App()
    executing: set[int] = set()
    most = 0
    go = {n: asyncio.Event() for n in range(3)}

    async def call(n: int) -> int:
        nonlocal most
        executing.add(n)
        most = max(most, len(executing))
        try:
            await go[n].wait()
        finally:
            executing.discard(n)
        return n

    @app.workflow(name="held", flow_control=lg.FlowControl("provider", parallelism=2))
    async def held(ctx: lg.Context, p: Job) -> int:
        return await ctx.step("call", call, p.n)

    caplog.set_level(logging.WARNING, logger="lockgate.flow")
    async with make_engine(app) as engine:
        first = [await engine.start("held", Job(n=n)) for n in range(2)]
        await eventually(lambda: executing == {0, 1}, timeout=15, what="two steps executing")
        _forget_slots(store_url)
        third = await engine.start("held", Job(n=2))
        await eventually(lambda: "the store lost slots it had granted" in caplog.text, timeout=15, what="the warning")
        assert executing == {0, 1}  # granted by the store, held back here
        go[2].set()
        go[0].set()
        assert await engine.result(first[0].run_id, timeout=15) == 0
        assert await engine.result(third.run_id, timeout=15) == 2
        go[1].set()
        assert await engine.result(first[1].run_id, timeout=15) == 1
    assert most == 2


def _taker(holds: LocalHolds, order: list[str]) -> Callable[[str], Coroutine[Any, Any, None]]:
    """A step of key ``k`` (parallelism 1) that, once counted, notes its name in ``order``."""

    async def take(name: str) -> None:
        await holds.take("k", 1, name)
        order.append(name)

    return take


async def test_local_holds_wait_in_order_and_pass_on_a_cancelled_turn() -> None:
    holds, order = LocalHolds(), []
    assert holds.try_take("k", 1)
    take = _taker(holds, order)
    a = asyncio.create_task(take("a"))
    b = asyncio.create_task(take("b"))
    c = asyncio.create_task(take("c"))
    await eventually(lambda: holds.waiting("k") == 3, timeout=5, what="three waiting")
    assert not holds.try_take("k", 1)  # others wait for the key: no one passes them
    holds.give("k")  # a's turn
    a.cancel()  # ... cancelled before it took it: b's
    await eventually(lambda: order == ["b"], timeout=5, what="b's turn")
    assert order == ["b"] and holds.executing("k") == 1
    holds.give("k")
    await eventually(lambda: order == ["b", "c"], timeout=5, what="c's turn")
    assert order == ["b", "c"]
    holds.give("k")
    assert holds.executing("k") == 0 and holds.try_take("k", 1)
    await asyncio.gather(a, b, c, return_exceptions=True)


async def test_a_woken_step_passed_by_a_newcomer_waits_again_and_is_woken() -> None:
    holds, order = LocalHolds(), []
    assert holds.try_take("k", 1)
    take = _taker(holds, order)
    a = asyncio.create_task(take("a"))
    x = asyncio.create_task(take("x"))
    await eventually(lambda: holds.waiting("k") == 2, timeout=5, what="two waiting")
    x.cancel()  # x leaves the line first, emptying it ...
    y = asyncio.create_task(take("y"))  # ... y finds no one waiting and takes the room a was given ...
    holds.give("k")
    await eventually(lambda: order == ["y"] and holds.waiting("k") == 1, timeout=5, what="y in, a waiting again")
    holds.give("k")  # ... and a, waiting again, is woken by the next end
    await eventually(lambda: order == ["y", "a"], timeout=5, what="a's turn")
    assert holds.executing("k") == 1 and holds.waiting("k") == 0
    await asyncio.gather(a, x, y, return_exceptions=True)
