"""ctx.wait_for_event: no race, consumption, timeouts, parking, replay, bad input (both stores)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.crypto import generate_key
from lockgate.errors import InvalidArgument
from lockgate.http import AccessPolicy, create_app

from .apps.event_waits import Order, app, order_cancelled, order_lost, order_shipped
from .apps.waits import eventually, parked_on

KEY = generate_key()


async def test_an_event_published_after_the_wait_resumes_the_parked_run(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.ship", {"order_id": "o1"})
        await env.settle()
        await parked_on(engine, h.run_id, "event:order.shipped")
        assert len(engine.executing) == 0  # parked: no task, no slot
        run = await engine.get_run(h.run_id)
        assert run.waiting_match == [{"event": "order.shipped", "match": {"order_id": "o1"}}]
        [row] = [r for r in await engine.flow("ew.ship") if r.key == ""]
        assert row.event_waiting == {"order.shipped": 1}
        transport = httpx.ASGITransport(app=create_app(engine.client, policy=AccessPolicy()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            page = await http.get("/ui/events")
            assert page.status_code == 200 and "order.shipped: <strong>1</strong>" in page.text
            api = (await http.get(f"/api/v1/runs/{h.run_id}")).json()["run"]
            assert api["waiting_on"] == "event:order.shipped"
            assert api["waiting_match"] == [{"event": "order.shipped", "match": {"order_id": "o1"}}]
        await engine.publish(order_shipped, None, {"order_id": "o2", "carrier": "dhl"})  # not its order
        eid = await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "fedex"})
        assert await engine.result(h.run_id, timeout=10) == [[eid, "fedex"]]


async def test_an_event_published_before_the_wait_within_lookback_satisfies_it(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        early = await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "early"})
        env.clock.advance(30)
        # lookback covers it: the event published 30 s before the call satisfies the wait at once
        h = await engine.start("ew.ship", {"order_id": "o1", "lookback": 60})
        assert await engine.result(h.run_id, timeout=10) == [[early, "early"]]
        # outside lookback (and before the run started): not satisfied
        env.clock.advance(120)
        late = await engine.start("ew.ship", {"order_id": "o1", "lookback": 60, "timeout": 5})
        await env.settle()
        await env.advance(6)
        assert await engine.result(late.run_id, timeout=10) == [None]
        # lookback=0: only from now
        now_only = await engine.start("ew.ship", {"order_id": "o1", "lookback": 0, "timeout": 5})
        await env.settle()
        await env.advance(6)
        assert await engine.result(now_only.run_id, timeout=10) == [None]


async def test_two_waits_consume_two_events_in_publish_order(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.ship", {"order_id": "o1", "waits": 2})
        await env.settle()
        first = await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "a"})
        env.clock.advance(1)
        second = await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "b"})
        assert await engine.result(h.run_id, timeout=10) == [[first, "a"], [second, "b"]]
        # another run waiting since before both gets the first one too: consumption is per run
        both = await engine.start("ew.ship", {"order_id": "o1", "waits": 2, "lookback": 10})
        assert await engine.result(both.run_id, timeout=10) == [[first, "a"], [second, "b"]]


async def test_a_timeout_returns_none(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.ship", {"order_id": "o1", "timeout": 3 * 86400})
        await env.settle()
        await parked_on(engine, h.run_id, "event:order.shipped")
        await env.advance("2d")
        assert (await engine.get_run(h.run_id)).status == "running"
        await env.advance("1d")
        assert await engine.result(h.run_id, timeout=10) == [None]


async def test_either_of_two_events_and_a_callable_match(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.either", {"order_id": "o1"})
        await env.settle()
        await parked_on(engine, h.run_id, "event:order.shipped|order.cancelled")
        await engine.publish(order_cancelled, None, {"order_id": "o9"})
        eid = await engine.publish(order_cancelled, None, {"order_id": "o1"})
        assert await engine.result(h.run_id, timeout=10) == ["order.cancelled", eid]


async def test_waits_inside_gather(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.gathered", {"order_id": "o1"})
        await env.settle()
        await engine.publish(order_lost, None, {"order_id": "o1"})
        await env.settle()
        assert (await engine.get_run(h.run_id)).status == "running"
        await engine.publish(order_shipped, None, {"order_id": "o1"})
        assert await engine.result(h.run_id, timeout=10) == ["order.shipped", "order.lost"]


async def test_an_encrypted_workflow_matches_and_keeps_the_event_sealed(make_engine: Any) -> None:
    async with make_engine(app, encryption_keys=[KEY]) as engine:
        h = await engine.start("ew.sealed", {"order_id": "o1"})
        await parked_on(engine, h.run_id, "event:order.shipped")
        await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "secret"})
        assert await engine.result(h.run_id, timeout=10) == "secret"


async def test_a_cancel_published_first_wins_over_the_wait(env_factory: Any) -> None:
    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.cancellable", {"order_id": "o-c"})
        await env.settle()
        await engine.publish(order_cancelled, None, {"order_id": "o-c"})
        await engine.publish(order_shipped, None, {"order_id": "o-c"})

        async def cancelled() -> bool:
            return (await engine.get_run(h.run_id)).status == "cancelled"

        await eventually(cancelled, timeout=10.0, interval=0.01, what="cancelled")
        # published after the shipment, a cancel does not undo the wait
        env.clock.advance(1)
        other = await engine.start("ew.cancellable", {"order_id": "o-c"})
        await env.settle()
        env.clock.advance(1)
        await engine.publish(order_shipped, None, {"order_id": "o-c", "carrier": "x"})
        assert await engine.result(other.run_id, timeout=10) == "x"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"match": {"nope": 1}}, "match.nope is not a field"),
        ({"timeout": -1}, "timeout"),
        ({"lookback": -5}, "lookback"),
        ({"match": 3}, "match must be"),
    ],
)
async def test_bad_input_is_a_typed_error_naming_the_field(
    env_factory: Any, options: dict[str, Any], needle: str
) -> None:
    bad = lg.App("event-wait-bad")
    shipped = bad.event("order.shipped", payload=order_shipped.payload)

    @bad.workflow(name="ew.bad")
    async def body(ctx: lg.Context, p: Order) -> str:
        try:
            await ctx.wait_for_event(shipped, **options)
        except InvalidArgument as exc:
            return str(exc)
        return "no error"

    async with env_factory(bad) as env:
        h = await env.engine.start("ew.bad", {"order_id": "o"})
        assert needle in await env.engine.result(h.run_id, timeout=10)


def test_a_match_path_onto_or_into_a_list_is_refused_naming_it() -> None:
    """Published keys index no list's items: such an equality would never match, so it is refused."""
    from pydantic import BaseModel

    from lockgate.engine.event_waits import EventWait
    from lockgate.errors import DefinitionError

    class Line(BaseModel):
        sku: str

    class Basket(BaseModel):
        order_id: str
        lines: list[Line]
        tags: list[str] | None = None
        meta: dict[str, str] = {}

    shop = lg.App("event-wait-lists")
    changed = shop.event("basket.changed", payload=Basket)
    for path, field in (("lines.0.sku", "lines"), ("tags", "tags")):
        with pytest.raises(InvalidArgument) as caught:
            EventWait.of(shop, changed, {path: "x"}, None, None)
        text = str(caught.value)
        assert f"match.{path}: {field} of event 'basket.changed'" in text and "callable" in text
    assert EventWait.of(shop, changed, {"meta.k": "v", "order_id": "o"}, None, None).equalities == {
        "meta.k": '"v"',
        "order_id": '"o"',
    }

    @shop.workflow(name="ew.basket", cancel_on=[lg.CancelOn(event=changed, match={"lines.0.sku": "a"})])
    async def basket(ctx: lg.Context, p: Order) -> None:
        return None

    with pytest.raises(DefinitionError) as refused:
        shop.definitions()
    assert "match.lines.0.sku" in str(refused.value)


async def test_an_undeclared_event_is_refused(env_factory: Any) -> None:
    bad = lg.App("event-wait-undeclared")

    @bad.workflow(name="ew.undeclared")
    async def body(ctx: lg.Context, p: Order) -> str:
        try:
            await ctx.wait_for_event("order.nowhere")
        except InvalidArgument as exc:
            return str(exc)
        return "no error"

    async with env_factory(bad) as env:
        h = await env.engine.start("ew.undeclared", {"order_id": "o"})
        assert "'order.nowhere' is not declared" in await env.engine.result(h.run_id, timeout=10)


async def test_lockgate_check_replays_a_wait_from_its_journal(env_factory: Any, store_url: str) -> None:
    from lockgate.inspect import connect
    from lockgate.testing import replay_check

    async with env_factory(app, encryption_keys=[KEY]) as env:
        engine = env.engine
        h = await engine.start("ew.ship", {"order_id": "o1", "waits": 2})
        await env.settle()
        first = await engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "a"})
        await env.settle()
        await parked_on(engine, h.run_id, "event:order.shipped")  # the second wait
        async with connect(store_url) as inspector:
            export = await inspector.export_run(h.run_id or "")
        verdict = await replay_check(app, export)
        assert not verdict.breaks, verdict.to_dict()
        assert first in export.to_json()
