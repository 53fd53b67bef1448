"""A publish made by an engine claims the waiting runs it wakes and executes them at once (both stores).

The claim is made in the publish's transaction (``store/event_waits.Claim``): only runs the worker
takes, at most the room it reserved, each claimed as ``claim_runs`` would (epoch and entries moved
on); the others it wakes stay due for any worker.
"""

from __future__ import annotations

import json
from typing import Any

import lockgate as lg
from lockgate.engine.publish_claims import PUBLISH_CLAIMS
from lockgate.ids import new_id
from lockgate.matching import leaf_keys
from lockgate.store import event_waits as store_waits
from lockgate.store import events as event_ops
from lockgate.store import runs
from lockgate.store.event_waits import Claim

from .apps.event_waits import app, order_shipped
from .apps.waits import eventually, parked_on
from .test_event_waits import KEY


def _event(order_id: str, now: float) -> tuple[dict[str, Any], list[str]]:
    data = json.dumps({"order_id": order_id, "carrier": "ups"})
    row = {
        "id": new_id("evt"),
        "name": "order.shipped",
        "key": "null",
        "data": data,
        "source": "test",
        "trace_id": None,
        "subject": None,
        "occurred_at": now,
    }
    return row, leaf_keys("order.shipped", data)


async def test_a_publish_claims_the_runs_it_wakes_that_its_worker_takes_up_to_its_room(
    make_engine: Any, store_url: str
) -> None:
    async with make_engine(app, encryption_keys=[KEY]) as engine:
        ships = [await engine.start("ew.ship", {"order_id": "same"}) for _ in range(3)]
        either = await engine.start("ew.either", {"order_id": "same"})  # a callable match: the event's ANY key
        for h in ships:
            await parked_on(engine, h.run_id, "event:order.shipped")
        await parked_on(engine, either.run_id, "event:order.shipped|order.cancelled")
    async with lg.Client(app, store_url, encryption_keys=[KEY]) as client:
        store = client.store
        before = {h.run_id: await store.read(runs.find_run, h.run_id) for h in [*ships, either]}
        now = client.clock.now()
        row, keys = _event("same", now)
        claim = Claim("w-test", now + 60, 2, json.dumps(["ew.ship\x1f"]), "{}")
        claimed, woken = await store.write(event_ops.publish, row, [], keys, claim)
        # the two lowest ids of the runs it takes; the third and the other workflow's run are woken for anyone
        assert sorted(r["id"] for r in claimed) == sorted(h.run_id for h in ships)[:2]
        assert woken == 2
        for r in claimed:
            assert r["owner"] == "w-test" and r["lease_until"] == now + 60
            assert int(r["epoch"]) == int(before[r["id"]]["epoch"]) + 1
            assert int(r["entries"]) == int(before[r["id"]]["entries"]) + 1
        rest = [h.run_id for h in [*ships, either] if h.run_id not in {r["id"] for r in claimed}]
        for run_id in rest:
            now_row = await store.read(runs.find_run, run_id)
            assert now_row is not None and now_row["owner"] is None and float(now_row["wake_at"]) <= now
        # a second publish finds no run parked any more: nothing is claimed twice
        row, keys = _event("same", client.clock.now())
        assert await store.write(event_ops.publish, row, [], keys, claim) == ([], 0)


async def test_an_engine_executes_the_runs_its_publish_wakes_each_once(make_engine: Any) -> None:
    async with make_engine(app, encryption_keys=[KEY], max_concurrent_runs=3) as engine:
        handles = [await engine.start("ew.ship", {"order_id": "o-h", "waits": 2}) for _ in range(5)]
        for h in handles:
            await parked_on(engine, h.run_id, "event:order.shipped")
        first = await engine.publish(order_shipped, None, {"order_id": "o-h", "carrier": "a"})
        # each run consumes the event once, then parks again for its second wait
        ids = [h.run_id for h in handles]
        await eventually(lambda: _consumed_once(engine, ids), what="every run consumed the first event")
        second = await engine.publish(order_shipped, None, {"order_id": "o-h", "carrier": "b"})
        for h in handles:
            assert await engine.result(h.run_id, timeout=15) == [[first, "a"], [second, "b"]]


async def test_the_publish_consumes_the_event_for_an_equality_wait_and_leaves_a_callable_to_the_run(
    make_engine: Any, store_url: str
) -> None:
    async with make_engine(app, encryption_keys=[KEY]) as engine:
        ship = await engine.start("ew.ship", {"order_id": "o-eq"})
        either = await engine.start("ew.either", {"order_id": "o-cb"})
        await parked_on(engine, ship.run_id, "event:order.shipped")
        await parked_on(engine, either.run_id, "event:order.shipped|order.cancelled")
        shipped = await engine.publish(order_shipped, None, {"order_id": "o-eq", "carrier": "dhl"})
        assert await engine.result(ship.run_id, timeout=10) == [[shipped, "dhl"]]
        other = await engine.publish(order_shipped, None, {"order_id": "o-cb", "carrier": "ups"})
        assert await engine.result(either.run_id, timeout=10) == ["order.shipped", other]
        for h, eid in ((ship, shipped), (either, other)):
            received = [e.data for e in await engine.events(h.run_id) if e.type == "event-received"]
            assert [d["event_id"] for d in received] == [eid]  # journaled once, by the publish or by the run
            [step] = [s for s in await engine.steps(h.run_id) if s.kind == "event"]
            assert step.status == "completed"
    async with lg.Client(app, store_url, encryption_keys=[KEY]) as client:
        for h in (ship, either):
            assert await client.store.read(store_waits.run_waits, h.run_id) == []  # no wait left behind


async def _consumed_once(engine: lg.Engine, run_ids: list[str]) -> bool:
    for run_id in run_ids:
        steps = await engine.steps(run_id)
        if sum(1 for s in steps if s.kind == "event" and s.status == "completed") != 1:
            return False
    return True


async def test_the_room_a_publish_reserves_counts_against_max_concurrent_runs(make_engine: Any) -> None:
    async with make_engine(app, encryption_keys=[KEY], max_concurrent_runs=2) as engine:
        dispatcher = engine.dispatcher
        claims = []
        while (claim := dispatcher.publish_claim()) is not None:
            claims.append(claim)
        assert sum(c.limit for c in claims) == 2  # publishes in flight hold the whole room, and no more
        for claim in claims:
            dispatcher.after_publish(claim, [], 0)
        again = dispatcher.publish_claim()
        assert again is not None and again.limit == min(2, PUBLISH_CLAIMS)  # given back
        dispatcher.after_publish(again, [], 0)


async def test_a_claim_makes_the_look_of_a_run_another_process_woke(make_engine: Any, store_url: str) -> None:
    """Published by a client (no engine of its own): the dispatcher that claims the woken run consumes the
    oldest matching event for it in the claim, in publish order across two waits."""
    async with (
        make_engine(app, encryption_keys=[KEY]) as engine,
        lg.Client(app, store_url, encryption_keys=[KEY]) as client,
    ):
        twice = await engine.start("ew.ship", {"order_id": "o-x", "waits": 2})
        await parked_on(engine, twice.run_id, "event:order.shipped")
        first = await client.publish(order_shipped, None, {"order_id": "o-x", "carrier": "a"})
        second = await client.publish(order_shipped, None, {"order_id": "o-x", "carrier": "b"})
        assert await engine.result(twice.run_id, timeout=10) == [[first, "a"], [second, "b"]]
        received = [e.data["event_id"] for e in await engine.events(twice.run_id) if e.type == "event-received"]
        assert received == [first, second]
        assert await client.store.read(store_waits.run_waits, twice.run_id) == []
