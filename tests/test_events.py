"""Domain events: publish, durable fan-out to triggers, the delivery log (both stores)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import events as event_ops

from .apps.events import app, order_paid, row_edited, user_signed_up


async def settled(engine: lg.Engine, event_id: str, timeout: float = 10.0) -> list[lg.DeliveryRecord]:
    """The event's deliveries once none is pending."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        rows = await engine.deliveries(event_id)
        if rows and all(d.status != "pending" for d in rows):
            return rows
        if loop.time() > deadline:
            raise TimeoutError(f"deliveries of {event_id} still pending: {rows}")
        await asyncio.sleep(0.02)


async def test_one_event_fans_out_to_every_trigger(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        eid = await engine.publish(order_paid, {"order_id": "o1"}, {"total": 12.5, "tenant_id": "t1"})
        events = await engine.list_events()
        assert [(e.id, e.name, e.key, e.source) for e in events] == [(eid, "order.paid", {"order_id": "o1"}, "api")]
        deliveries = {d.trigger: d for d in await settled(engine, eid)}
        assert sorted(deliveries) == [
            "*->ev.audit",
            "order.paid->broken",
            "order.paid->ev.fulfil",
            "order.paid->ev.receipt",
        ]
        fulfil = deliveries["order.paid->ev.fulfil"]
        assert (fulfil.status, fulfil.outcome, fulfil.idempotency_key) == (
            "started",
            "started",
            f"{eid}:{fulfil.trigger}",
        )
        assert fulfil.run_id is not None and fulfil.ticket is not None
        assert await engine.result(fulfil.run_id, timeout=10) == "fulfilled o1"
        assert await engine.result(deliveries["order.paid->ev.receipt"].run_id, timeout=10) == 12.5
        assert await engine.result(deliveries["*->ev.audit"].run_id, timeout=10) == "order.paid"
        broken = deliveries["order.paid->broken"]
        assert (broken.status, broken.run_id) == ("failed", None)
        assert "mapper broke" in (broken.reason or "")
        run = await engine.get_run(fulfil.run_id)
        assert run.source == "event:order.paid"
        assert (await engine.trace(fulfil.ticket)).source == "event:order.paid"
        assert {r.id for r in await engine.list_runs(source="event:order.paid")} == {
            deliveries[t].run_id for t in ("order.paid->ev.fulfil", "order.paid->ev.receipt", "*->ev.audit")
        }


async def test_a_filter_skips_and_a_duplicate_key_starts_nothing(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        eid = await engine.publish(order_paid, {"order_id": "o0"}, {"total": 0, "tenant_id": "t1"})
        fulfil = {d.trigger: d for d in await settled(engine, eid)}["order.paid->ev.fulfil"]
        assert (fulfil.status, fulfil.reason, fulfil.run_id) == ("skipped", "filtered", None)

        first = await engine.publish(user_signed_up, {"user_id": "u1"}, {"plan": "pro"})
        again = await engine.publish(user_signed_up, {"user_id": "u1"}, {"plan": "pro"})
        one = {d.trigger: d for d in await settled(engine, first)}["user.signed_up->ev.onboard"]
        two = {d.trigger: d for d in await settled(engine, again)}["user.signed_up->ev.onboard"]
        assert (one.status, one.idempotency_key) == ("started", "onboard:u1")
        assert (two.status, two.reason, two.run_id) == ("skipped", "duplicate", None)
        assert [r.id for r in await engine.list_runs(workflow="ev.onboard")] == [one.run_id]


async def test_a_bad_key_or_payload_is_refused_with_nothing_written(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        with pytest.raises(lg.PayloadError) as refused:
            await engine.publish(order_paid, {"order": "o1"}, {"total": "lots"})
        message = str(refused.value)
        assert "key.order_id" in message and "payload.total" in message and "payload.tenant_id" in message
        with pytest.raises(lg.InvalidArgument, match="not declared"):
            await engine.publish("nope", {}, {})
        assert await engine.list_events() == []
        assert await engine.store.read(event_ops.pending_deliveries, [t.name for t in app.triggers], 10) == []


async def test_ctx_publish_publishes_once_from_a_body(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        handle = await engine.start("ev.publisher", {"order_id": "o7"})
        await env.settle()
        events = await engine.list_events(name="order.paid")
        assert [(e.key, e.source) for e in events] == [({"order_id": "o7"}, f"run:{handle.run_id}")]
        await env.advance("2h")  # the body is re-entered after its sleep: the publish replays from the journal
        assert await engine.result(handle.run_id, timeout=10) == events[0].id
        assert len(await engine.list_events(name="order.paid")) == 1
        assert len(await settled(engine, events[0].id)) == 4


async def test_a_client_publishes_and_an_engine_delivers(env_factory: Any, store_url: str) -> None:
    async with env_factory(app) as env, lg.Client(app, store_url) as client:
        eid = await client.publish(order_paid, {"order_id": "o2"}, {"total": 1, "tenant_id": "t"})
        assert (await client.get_event(eid)).source == "client"
        receipt = {d.trigger: d for d in await settled(env.engine, eid)}["order.paid->ev.receipt"]
        assert receipt.status == "started"


class K(BaseModel):
    id: str


async def test_boot_refuses_undeclared_events_and_missing_match() -> None:
    other = lg.App("other")
    stray = lg.App("stray").event("stray", key=K, payload=K)

    @other.workflow(name="w")
    async def w(ctx: lg.Context, p: K) -> None:
        return None

    other.trigger(on=stray, workflow="w")
    with pytest.raises(lg.DefinitionError, match=r"'stray'.*not declared"):
        other.definitions()

    twice = lg.App("twice")
    twice.event("e", key=K, payload=K)
    twice.event("e", key=K, payload=K)
    with pytest.raises(lg.DefinitionError, match="two events"):
        twice.definitions()

    no_match = lg.App("no-match")
    ev = no_match.event("e", key=K, payload=K)

    @no_match.workflow(name="w", cancel_on=[lg.CancelOn(event=ev)])
    async def w2(ctx: lg.Context, p: K) -> None:
        return None

    with pytest.raises(lg.DefinitionError, match=r"'w'.*cancel_on\[0\]\.match.*event 'e'.*required"):
        no_match.definitions()


def _ttls(engine: lg.Engine) -> dict[str, float | None]:
    return {"event_retention": engine.event_retention, "delivery_retention": engine.delivery_retention}


async def test_events_and_deliveries_have_their_own_retention(env_factory: Any) -> None:
    from lockgate.sweeps.retention import forget_expired

    async with env_factory(app, retention=None, event_retention="2h", delivery_retention="1h") as env:
        engine = env.engine
        first = await engine.publish(user_signed_up, {"user_id": "u9"}, {"plan": "pro"})
        await settled(engine, first)
        await env.advance("90m")
        forgotten = await forget_expired(engine.worker, engine.retention, **_ttls(engine))
        assert (forgotten.events, forgotten.deliveries, forgotten.runs) == (0, 2, 0)
        assert [e.id for e in await engine.list_events()] == [first]
        # The delivery row was the dedupe window of the custom key: the same key starts again.
        again = await engine.publish(user_signed_up, {"user_id": "u9"}, {"plan": "pro"})
        onboard = {d.trigger: d for d in await settled(engine, again)}["user.signed_up->ev.onboard"]
        assert onboard.status == "started"
        await env.advance("1h")
        assert (await forget_expired(engine.worker, engine.retention, **_ttls(engine))).events == 1


async def test_flow_names_the_event_a_parked_start_came_from(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        ids = [await engine.publish(row_edited, {"row_id": "r9"}, {"row_id": "r9", "n": n}) for n in range(3)]
        for eid in ids:
            await settled(engine, eid)
        (row,) = [r for r in await engine.flow("ev.debounced") if r.key == "r9"]
        assert (row.queued, row.collapsed, row.sources) == (1, 2, {"event:row.edited": 1})
        await env.advance("16m")  # the debounce settles: the drainer admits the folded start
        drained = await env.engine.inspector.ledger(workflow="ev.debounced", kind="drain")
        assert [(d.outcome, d.source) for d in drained] == [("admitted", "event:row.edited")]
