"""Releases that meet in one group commit free their slots together and hand the room once.

Steps that began together end together: their releases reach the writer at once, and each read
the key again (a round trip each, with the freed slots idle meanwhile). ``flow.release_many``
frees them all and reads the key once; what it hands must be what the releases one after the
other would have handed, and a hold that lost its lease still frees nothing of the next one's.
"""

from __future__ import annotations

import lockgate as lg
from lockgate.store import flow

from .test_step_flow_fencing import STEP, Job, _execute, _hold, owned

KEY = "together"
DECLARED = {
    "key": KEY,
    "rate": None,
    "period": 1.0,
    "parallelism": 3,
    "burst": None,
    "weighted": False,
    "declared": "together:3",
}
SLOTS = "SELECT run_id, state, epoch FROM lockgate_flow_slots WHERE key = {p} ORDER BY run_id"


async def test_releases_freed_together_hand_every_freed_slot_once(store_url: str) -> None:
    async with lg.Client(owned, store_url) as client:
        store, clock = client.core.store, client.clock
        run_ids = sorted([str((await client.start("fenced.job", Job(n=n))).run_id) for n in range(6)])
        now = clock.now()
        fences = [await _hold(store_url, run_id, "wkr_a", 1, now + 60) for run_id in run_ids]
        for fence in fences[:3]:
            assert (await store.write(flow.acquire, DECLARED, KEY, fence, STEP, 0, clock.now)).granted
        for fence in fences[3:]:  # full: they wait in place, in their worker
            assert not (await store.write(flow.acquire, None, KEY, fence, STEP, 0, clock.now)).granted

        freed = [flow.Freed(fence.run_id, STEP, None, fence.epoch) for fence in fences[:3]]
        woken = await store.write(flow.release_many, KEY, freed, clock.now, "wkr_a")

        granted = sorted(h.run_id for h in woken.handed if h.grant is not None and h.grant.granted)
        assert granted == run_ids[3:]
        rows = await _execute(store_url, SLOTS, KEY)
        assert rows == [(run_id, "running", 1) for run_id in run_ids[3:]]


async def test_a_stale_hold_among_them_frees_nothing_of_the_next_hold(store_url: str) -> None:
    async with lg.Client(owned, store_url) as client:
        store, clock = client.core.store, client.clock
        first, second = sorted([str((await client.start("fenced.job", Job(n=n))).run_id) for n in range(2)])
        now = clock.now()
        one = await _hold(store_url, first, "wkr_a", 1, now + 60)
        zombie = await _hold(store_url, second, "wkr_a", 1, now + 60)
        for fence in (one, zombie):
            assert (await store.write(flow.acquire, DECLARED, KEY, fence, STEP, 0, clock.now)).granted
        taker = await _hold(store_url, second, "wkr_b", 2, now + 60)  # the second run's next hold
        assert (await store.write(flow.acquire, None, KEY, taker, STEP, 0, clock.now)).granted

        freed = [flow.Freed(first, STEP, None, one.epoch), flow.Freed(second, STEP, None, zombie.epoch)]
        await store.write(flow.release_many, KEY, freed, clock.now, "wkr_a")
        assert await _execute(store_url, SLOTS, KEY) == [(second, "running", 2)]
