"""Closing ends every loop, even one whose cancellation was lost below it (as Python 3.11's
``asyncio.wait_for``, under psycopg_pool's wait for a connection, may lose one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import stop_tasks
from lockgate.testing import TestEnv

from .apps.waits import eventually


class Deaf:
    """A loop that loses its first ``swallow`` cancellations, as a library converting one would."""

    def __init__(self, swallow: int = 1) -> None:
        self.swallow = swallow
        self.lost = 0
        self.started = False

    async def loop(self) -> None:
        self.started = True
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if self.lost >= self.swallow:
                    raise
                self.lost += 1


class Nothing(BaseModel):
    pass


async def _failed_loop() -> None:
    raise RuntimeError("this loop failed before it was stopped")


async def test_a_loop_that_lost_its_cancellation_is_cancelled_again() -> None:
    deaf = Deaf(swallow=3)
    looping = asyncio.create_task(deaf.loop())
    failed = asyncio.create_task(_failed_loop())
    await eventually(lambda: deaf.started and failed.done(), timeout=5, what="both loops begun")
    async with asyncio.timeout(5):
        await stop_tasks([looping, failed], again_after=0.02)
    assert looping.cancelled() and deaf.lost == 3
    assert isinstance(failed.exception(), RuntimeError)  # ended, its failure kept (and retrieved)


async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    deaf = Deaf(swallow=10**9)
    looping = asyncio.create_task(deaf.loop())
    stopper = asyncio.create_task(stop_tasks([looping], again_after=0.01))
    await eventually(lambda: deaf.lost >= 2, timeout=5, what="two cancellations lost")
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert not looping.done() and deaf.lost >= 2  # cancelled again while the stopper waited
    deaf.swallow = deaf.lost  # the next cancellation is let through
    looping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await looping


async def test_an_engine_closes_with_a_loop_that_lost_its_cancellation(
    env_factory: Callable[..., TestEnv],
) -> None:
    app = lg.App()

    @app.workflow(name="noop")
    async def noop(ctx: lg.Context, p: Nothing) -> int:
        return 1

    deaf = Deaf()
    async with env_factory(app) as env:
        env.engine.dispatcher.adopt([asyncio.create_task(deaf.loop(), name="deaf")])
        handle = await env.engine.start("noop", {})
        assert await env.engine.result(handle.run_id, timeout=10) == 1
    assert deaf.lost == 1  # lost once, then cancelled again: the close returned
