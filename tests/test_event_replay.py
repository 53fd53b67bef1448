"""Replaying past events to their triggers: dry run, commit, idempotence, --force, filters (both stores)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockgate.errors import InvalidArgument

from .apps.events import app, order_paid
from .test_events import settled

RECEIPT = "order.paid->ev.receipt"


async def test_a_replay_is_a_dry_run_until_committed_and_happens_once(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        eid = await engine.publish(order_paid, {"order_id": "o1"}, {"total": 3, "tenant_id": "t"})
        await settled(engine, eid)
        now = datetime.fromtimestamp(env.clock.now(), UTC)
        window = {"since": now - timedelta(hours=1), "until": now}
        before = len(await engine.list_runs(workflow="ev.receipt"))
        dry = await engine.replay_events("order.paid", trigger=[RECEIPT], **window)
        assert [(r.event_id, r.trigger, r.status, r.replay) for r in dry] == [(eid, RECEIPT, "would-replay", 1)]
        assert len(await engine.list_runs(workflow="ev.receipt")) == before  # nothing started

        [done] = await engine.replay_events("order.paid", trigger=[RECEIPT], commit=True, **window)
        assert (done.status, done.replay) == ("started", 1) and done.run_id is not None
        assert await engine.result(done.run_id, timeout=10) == 3
        assert (await engine.get_run(done.run_id)).source == "event:order.paid"

        [again] = await engine.replay_events("order.paid", trigger=[RECEIPT], commit=True, **window)
        assert again.status == "skipped" and "already replayed" in (again.reason or "")
        [forced] = await engine.replay_events("order.paid", trigger=[RECEIPT], commit=True, force=True, **window)
        assert (forced.status, forced.replay) == ("started", 2) and forced.run_id not in (None, done.run_id)
        assert len(await engine.list_runs(workflow="ev.receipt")) == before + 2

        rows = [d for d in await engine.deliveries(eid) if d.trigger == RECEIPT]
        assert [(d.replay, d.status) for d in rows] == [(0, "started"), (1, "started"), (2, "started")]

        # only the pairs whose first delivery failed (the mapper that raises), and it fails again, with why
        [broken] = await engine.replay_events("order.paid", status=["failed"], commit=True, **window)
        assert (broken.trigger, broken.status) == ("order.paid->broken", "failed")
        assert "mapper broke" in (broken.reason or "")


async def test_bad_replay_input_is_a_typed_error_naming_the_option(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        now = datetime.fromtimestamp(env.clock.now(), UTC)
        cases = [
            ({"event": "order.nowhere"}, "event:"),
            ({"event": "order.paid", "trigger": ["nope"]}, "trigger:"),
            ({"event": "order.paid", "limit": 0}, "limit:"),
            ({"event": "order.paid", "status": ["done"]}, "status:"),
            ({"event": "order.paid", "since": now, "until": now - timedelta(hours=1)}, "until:"),
        ]
        for options, needle in cases:
            args: dict[str, Any] = {"since": now - timedelta(hours=1), "until": now, **options}
            with pytest.raises(InvalidArgument, match=needle):
                await engine.replay_events(args.pop("event"), commit=True, **args)
        assert await engine.list_events() == []


async def test_replay_over_http(make_engine: Any) -> None:
    import httpx

    from lockgate.http import AccessPolicy, create_app

    async with make_engine(app) as engine:
        eid = await engine.publish(order_paid, {"order_id": "o9"}, {"total": 2, "tenant_id": "t"})
        await settled(engine, eid)
        transport = httpx.ASGITransport(app=create_app(engine.client, policy=AccessPolicy()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
            body = {"event": "order.paid", "since": since, "trigger": [RECEIPT], "commit": True}
            answer = await http.post("/api/v1/events/replay", json=body)
            assert answer.status_code == 200, answer.text
            [result] = answer.json()["results"]
            assert (result["event_id"], result["status"], result["replay"]) == (eid, "started", 1)
            bad = await http.post("/api/v1/events/replay", json={**body, "event": "order.nowhere"})
            assert bad.status_code == 422 and "event:" in bad.json()["detail"]
