"""A worker that cannot renew its leases stops its bodies before they lapse, not after another took them.

Cut off from the database (here: a relay in front of it that drops every connection), a worker
cannot learn that its runs were taken over; were its bodies to run on, they would act beside
their new owner's and hold the concurrency and step flow room others count free again. The
lease watch (engine/lease_watch.py) cancels them before the lease it last renewed ends.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually
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


BEGUN: list[float] = []


async def counted_call() -> int:
    BEGUN.append(time.monotonic())
    await asyncio.sleep(4)
    return 1


@watched.workflow(name="watched.counted")
async def counted(ctx: lg.Context, job: Job) -> int:
    return await ctx.step("call", counted_call)  # type: ignore[no-any-return]


async def test_a_run_claimed_again_under_the_hold_it_is_executed_under_is_not_entered_twice(pg_url: str) -> None:
    """A failover that lost a claim: the promoted server shows the run unclaimed, and the very worker that
    executes it claims it again, at the same epoch. It must not start a second execution beside the first
    (two bodies under one hold, whose slots and writes each other's would free)."""
    BEGUN.clear()
    async with lg.Engine(watched, pg_url, lease="6s", poll_interval=0.05) as engine:
        run_id = (await engine.start("watched.counted", Job())).run_id
        deadline = time.monotonic() + 20
        while not BEGUN and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert BEGUN, "the step never began"
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(
                "UPDATE lockgate_runs SET owner = NULL, epoch = epoch - 1, lease_until = 0 WHERE id = %s", (run_id,)
            )

            async def claimed_again() -> bool:  # by this worker (every 0.05 s it looks)
                cur = await conn.execute("SELECT owner FROM lockgate_runs WHERE id = %s", (run_id,))
                row = await cur.fetchone()
                return row is not None and row[0] == engine.worker_id

            await eventually(claimed_again, timeout=20, what="the run claimed again")
        # A second execution would have entered the step before the first one's four seconds are up.
        assert await engine.result(run_id, timeout=30) == 1
        assert len(BEGUN) == 1, f"the body was entered again beside its running execution: {BEGUN}"
