"""A worker that cannot renew its leases stops its bodies before they lapse, not after another took them.

Cut off from the database (here: a relay in front of it that drops every connection), a worker
cannot learn that its runs were taken over; were its bodies to run on, they would act beside
their new owner's and hold the concurrency and step flow room others count free again. The
lease watch (engine/lease_watch.py) cancels them before the lease it last renewed ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

import lockgate as lg

from .pg import PgProxy

pytestmark = pytest.mark.slow

LEASE = 2.0
SEEN: dict[str, float] = {}  # what the step's body saw: began, cancelled, finished (monotonic)

watched = lg.App("watched")


class Job(BaseModel):
    n: int = 0


async def long_call() -> int:
    SEEN["began"] = time.monotonic()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        SEEN["cancelled"] = time.monotonic()
        raise
    SEEN["finished"] = time.monotonic()
    return 1


@watched.workflow(name="watched.long")
async def long(ctx: lg.Context, job: Job) -> int:
    return await ctx.step("call", long_call)  # type: ignore[no-any-return]


@pytest.fixture
async def proxy() -> AsyncIterator[PgProxy]:
    relay = PgProxy()
    await relay.start()
    yield relay
    await relay.stop()


async def _until(key: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while key not in SEEN and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return key in SEEN


async def test_a_worker_cut_off_from_the_database_stops_its_bodies_before_their_lease_ends(
    pg_url: str, proxy: PgProxy
) -> None:
    SEEN.clear()
    async with lg.Client(watched, pg_url) as client:
        await client.start("watched.long", Job())
    engine = lg.Engine(watched, f"{proxy.url(pg_url)}&pool_timeout=1", lease=f"{LEASE:g}s", poll_interval=0.05)
    async with engine:
        assert await _until("began", 20), "the step never began"
        await asyncio.sleep(LEASE / 2)  # a renewal or two went through
        await proxy.stop()  # from here on nothing reaches the database: no lease is renewed
        cut = time.monotonic()
        stopped = await _until("cancelled", 3 * LEASE)
        await proxy.start()  # so that the engine closes promptly
    assert stopped, f"the body ran on after its lease could not be renewed: {SEEN}"
    # The last renewal that committed was at most a third of the lease before the cut.
    assert SEEN["cancelled"] - cut < LEASE, SEEN
    assert "finished" not in SEEN
