"""A hold that lost its lease (a zombie) cannot take, nor free, the step flow slot of the run's next hold.

Under the nemesis suite a worker frozen or cut off past its lease came back and freed its step's
slot by the step's name alone: that deleted the place in line the run's next hold had parked
on (the run stayed parked on the key for ever), or the slot it held (the key went one over its
parallelism). It could also turn the next hold's waiting row into a slot of its own dead epoch.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import flow, shared

KEY = "fenced-provider"
STEP = "call#0"

owned = lg.App("fenced")


class Job(BaseModel):
    n: int = 0


@owned.workflow(name="fenced.job")
async def job(ctx: lg.Context, j: Job) -> int:
    return j.n


DECLARED = {
    "key": KEY,
    "rate": None,
    "period": 1.0,
    "parallelism": 1,
    "burst": None,
    "weighted": False,
    "declared": "fenced-provider:1",
}


async def _execute(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(query.format(p="?"), params).fetchall()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query.format(p="%s"), params)
        return await cursor.fetchall() if cursor.description else []


async def _hold(url: str, run_id: str, owner: str, epoch: int, lease_until: float) -> shared.Fence:
    query = "UPDATE lockgate_runs SET owner = {p}, epoch = {p}, lease_until = {p} WHERE id = {p}"
    await _execute(url, query, owner, epoch, lease_until, run_id)
    return shared.Fence(run_id, owner, epoch)


async def test_a_zombie_neither_takes_nor_frees_the_slot_of_the_runs_next_hold(store_url: str) -> None:
    async with lg.Client(owned, store_url) as client:
        run_id = (await client.start("fenced.job", Job())).run_id
        assert run_id is not None
        store, clock = client.core.store, client.clock
        now = clock.now()
        zombie = await _hold(store_url, run_id, "wkr_a", 1, now + 60)
        first = await store.write(flow.acquire, DECLARED, KEY, zombie, STEP, 0, clock.now)
        assert first.granted
        # Its lease lapsed and another worker took the run: the slot counts no more, the next hold takes it.
        taker = await _hold(store_url, run_id, "wkr_b", 2, now + 60)
        second = await store.write(flow.acquire, None, KEY, taker, STEP, 0, clock.now)
        assert second.granted
        slots = "SELECT state, epoch FROM lockgate_flow_slots WHERE run_id = {p}"
        assert await _execute(store_url, slots, run_id) == [("running", 2)]

        # The zombie comes back: it may not take the step's slot again, nor free the taker's.
        with pytest.raises(shared.Fenced):
            await store.write(flow.acquire, None, KEY, zombie, STEP, 0, clock.now)
        await store.write(flow.release, KEY, run_id, STEP, clock.now, "wkr_a", None, zombie.epoch)
        assert await _execute(store_url, slots, run_id) == [("running", 2)]

        await store.write(flow.release, KEY, run_id, STEP, clock.now, "wkr_b", None, taker.epoch)
        assert await _execute(store_url, slots, run_id) == []
