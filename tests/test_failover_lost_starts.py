"""A start a failover lost is never recorded as made: its delivery or firing is offered again.

The fan-out sweep starts a delivery's run in one transaction and settles the delivery in the next;
a schedule firing's start and its move to ``started`` are two transactions too. With asynchronous
replication a failover may lose the first and keep the second: the writer re-runs a write whose
COMMIT was not sent on a fresh connection, which reaches the promoted server. The delivery then
named a run that never existed there and the event was never handled; the firing named one too,
and its schedule's later firings waited behind it for good (``max_runtime``, a day). A settle or
a move that names a start (a ticket) now writes only where that start's ledger row is.

The failover itself, on a private primary and its asynchronous standby: an event published and
streamed, the standby cut off, the delivery's run started on the primary alone, the primary
killed and the standby promoted before the settle. Then the same on each store, without a
failover: a settle and a move naming a start the database does not hold.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate import sweeps
from lockgate.handles import RunHandle
from lockgate.store import events as event_ops
from lockgate.store import schedules as sched_ops
from lockgate.sweeps import events as fanout
from lockgate.sweeps import schedules as sweep
from lockgate.testing import TestEnv

from .pgserver import Replicas

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()

app = lg.App()


class PingKey(BaseModel):
    id: str


class PingData(BaseModel):
    n: int


class Slot(BaseModel):
    at: str


ping = app.event("lost.ping", key=PingKey, payload=PingData)


@app.workflow(name="lost.pinged")
async def pinged(ctx: lg.Context, p: PingData) -> int:
    return p.n


@app.workflow(name="lost.tick")
async def tick_wf(ctx: lg.Context, p: Slot) -> str:
    return p.at


app.trigger(on=ping, workflow="lost.pinged", payload=lambda ev: {"n": ev.data.n})
app.schedule("hourly", workflow=tick_wf, every="1h", payload=lambda at: {"at": at.isoformat()}, on_overlap="buffer")


@pytest.fixture(autouse=True)
def no_background_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests fan out and tick themselves: the engine starts neither sweep."""
    own = (sweep.schedule_sweep, fanout.fanout_sweep)
    monkeypatch.setattr(sweeps, "SWEEPS", tuple(s for s in sweeps.SWEEPS if s not in own))


async def _fetch(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await (await conn.execute(query, params)).fetchall()


@pytest.mark.slow
async def test_a_delivery_whose_start_a_failover_lost_is_delivered_again(replica_pair: Replicas) -> None:
    pair = replica_pair
    await asyncio.to_thread(pair.ensure_standby)
    url = pair.create_database("lost")
    await asyncio.to_thread(pair.replicate, synchronous=False)
    async with lg.Client(app, url) as client:
        rt = client.core.runtime
        event_id = await client.publish(ping, {"id": "e1"}, {"n": 1})
        await asyncio.to_thread(pair.cut)  # the standby has the event and its pending delivery; nothing later
        real = fanout.gate_start(rt)
        made: list[RunHandle] = []

        async def start_then_fail_over(workflow: str, payload: Any, *, idempotency_key: str | None = None) -> RunHandle:
            handle = await real(workflow, payload, idempotency_key=idempotency_key)  # on the old primary only
            made.append(handle)
            await asyncio.to_thread(pair.fail)  # its settle goes to the promoted standby
            return handle

        deps = fanout.FanOut(rt.store, rt.clock, app, start_then_fail_over)
        await fanout.fan_out(deps)
        assert len(made) == 1 and made[0].run_id is not None
        assert await _fetch(url, "SELECT id FROM lockgate_runs") == []  # the start was lost
        rows = await _fetch(url, "SELECT status, run_id FROM lockgate_deliveries WHERE event_id = %s", event_id)
        assert rows == [("pending", None)], "a delivery recorded a start the promoted server never had"

        await fanout.fan_out(fanout.FanOut(rt.store, rt.clock, app, real))  # the next pass delivers it
        rows = await _fetch(url, "SELECT status, run_id FROM lockgate_deliveries WHERE event_id = %s", event_id)
        assert [r[0] for r in rows] == ["started"]
        assert await _fetch(url, "SELECT id FROM lockgate_runs") == [(rows[0][1],)]
    async with lg.Engine(app, url) as engine:
        assert await engine.result(rows[0][1], timeout=30) == 1


async def test_a_settle_naming_a_start_the_database_does_not_hold_writes_nothing(store_url: str) -> None:
    async with TestEnv(app, store=store_url, start=T0) as env:
        event_id = await env.engine.publish(ping, {"id": "e2"}, {"n": 2})
        (delivery,) = await env.engine.store.read(event_ops.list_deliveries, event_id)
        settle = env.engine.store.write
        lost = {"status": "started", "outcome": "started", "run_id": "run_lost", "ticket": "tkt_lost"}
        assert not await settle(
            event_ops.settle_delivery, delivery["id"], T0, created_at=delivery["created_at"], **lost
        )
        (still,) = await env.engine.store.read(event_ops.list_deliveries, event_id)
        assert (still["status"], still["run_id"]) == ("pending", None)
        # A settle with no start to name (filtered, refused) is written as before.
        assert await settle(
            event_ops.settle_delivery,
            delivery["id"],
            T0,
            created_at=delivery["created_at"],
            status="skipped",
            reason="filtered",
        )


async def test_a_firing_whose_start_the_database_does_not_hold_is_started_again(store_url: str) -> None:
    async with TestEnv(app, store=store_url, start=T0) as env:
        rt = sweep.runtime_for(env.engine.worker)
        await sweep.register(rt, orphan_others=True)
        slot = app.schedules()["hourly"].next_after(T0)
        key = f"hourly@{datetime.fromtimestamp(slot, UTC).isoformat()}"
        claim = {
            "schedule": "hourly",
            "scheduled_at": slot,
            "manual": 0,
            "cause": "cron",
            "workflow": "lost.tick",
            "source": "schedule:hourly",
            "identity": f"lost.tick\x1f{key}",
            "idempotency_key": key,
            "owner": "w-old",
            "lease_until": slot + 5,
            "now": slot,
        }
        row = await env.engine.store.write(sched_ops.claim_firing, claim)
        assert row is not None
        # What start_claimed_many records after a start that a failover then lost: refused.
        lost = {"firing_id": int(row["id"]), "expect": "claimed", "status": "started", "run_id": "run_lost"}
        moved = await env.engine.store.write(sched_ops.move_firings, [{**lost, "ticket": "tkt_lost"}])
        assert moved == set()
        (firing,) = await env.engine.store.read(sched_ops.firings_of, "hourly", 5)
        assert (firing["status"], firing["run_id"]) == ("claimed", None)
        # Once the claim's lease lapses, the sweep takes it over and starts it: the slot runs, once.
        env.clock.set(slot + 60)
        await sweep.fire_due(rt)
        await env.settle()
        await sweep.fire_due(rt)
        firings = await env.engine.store.read(sched_ops.firings_of, "hourly", 5)
        done = [f for f in firings if f["scheduled_at"] == slot]
        assert [f["status"] for f in done] == ["succeeded"]
        assert await env.engine.result(done[0]["run_id"], timeout=5) == datetime.fromtimestamp(slot, UTC).isoformat()
