"""Signals and updates: durable messages to a run, their validation, order and records."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime


class Ticket(BaseModel):
    waits: int = 1
    nap: float = 0


class Approval(BaseModel):
    ok: bool
    by: str = "someone"


class Add(BaseModel):
    amount: int


async def parked_on(engine: lg.Engine, run_id: str, waiting_on: str) -> bool:
    run = await engine.get_run(run_id)
    return run.waiting_on == waiting_on and run.owner is None and not engine.executing


async def event_types(engine: lg.Engine, run_id: str) -> list[str]:
    return [e.type for e in await engine.events(run_id)]


def signal_app(declared: bool = False) -> lg.App:
    app = lg.App()
    options: dict[str, Any] = {"signals": {"approval": Approval}} if declared else {}

    @app.workflow(name="approvals", **options)
    async def approvals(ctx: lg.Context, p: Ticket) -> list[str]:
        if p.nap:
            await ctx.sleep("nap", p.nap)
        got = []
        for _ in range(p.waits):
            approval = await ctx.wait_for_signal("approval", Approval)
            assert approval is not None
            got.append(f"{approval.by}:{approval.ok}")
        return got

    @app.workflow(name="deadline")
    async def deadline(ctx: lg.Context, p: Ticket) -> str:
        approval = await ctx.wait_for_signal("approval", Approval, timeout="3d")
        return "timed out" if approval is None else f"{approval.by}:{approval.ok}"

    return app


# -- signals -----------------------------------------------------------------------------


async def test_wait_then_signal(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("approvals", {})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "signal")
        await env.engine.signal(handle.run_id, "approval", {"ok": True, "by": "ana"})
        assert await env.engine.result(handle.run_id, timeout=10) == ["ana:True"]
        events = await env.engine.events(handle.run_id)
    types = [e.type for e in events]
    assert types.index("signal-awaited") < types.index("signal-sent") < types.index("signal-received")
    sent = next(e for e in events if e.type == "signal-sent")
    received = next(e for e in events if e.type == "signal-received")
    assert sent.data["name"] == received.data["name"] == "approval"
    assert sent.data["message_id"] == received.data["message_id"]


async def test_signal_sent_before_the_wait_is_kept_and_consumed(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("approvals", {"nap": 3600})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "timer")
        await env.engine.signal(handle.run_id, "approval", {"ok": False, "by": "early"})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "timer")  # a signal does not cut a timer short
        await env.advance("1h")
        assert await env.engine.result(handle.run_id, timeout=10) == ["early:False"]
        types = await event_types(env.engine, handle.run_id)
    assert "signal-awaited" not in types  # it was there before the body asked
    assert types.index("signal-sent") < types.index("signal-received")


@pytest.mark.parametrize("while_parked", [False, True], ids=["sent-early", "sent-while-waiting"])
async def test_signals_of_one_name_are_consumed_in_order(env_factory: Any, while_parked: bool) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("approvals", {"waits": 3, "nap": 0 if while_parked else 60})
        await env.settle()
        for who in ("first", "second", "third"):
            await env.engine.signal(handle.run_id, "approval", {"ok": True, "by": who})
        await env.advance(60)
        assert await env.engine.result(handle.run_id, timeout=10) == ["first:True", "second:True", "third:True"]
        steps = [s for s in await env.engine.steps(handle.run_id) if s.kind == "signal"]
    assert [(s.key, s.output["by"]) for s in steps] == [
        ("signal:approval#0", "first"),
        ("signal:approval#1", "second"),
        ("signal:approval#2", "third"),
    ]


async def test_wait_times_out_with_none(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        t0 = env.clock.now()
        handle = await env.engine.start("deadline", {})
        await env.settle()
        run = await env.engine.get_run(handle.run_id)
        assert (run.waiting_on, run.wake_at) == ("signal", to_datetime(t0 + 3 * 86400))
        await env.advance("3d")
        assert await env.engine.result(handle.run_id, timeout=10) == "timed out"
        types = await event_types(env.engine, handle.run_id)
        assert "signal-timed-out" in types and "signal-received" not in types
        with pytest.raises(lg.RunNotEligible) as info:
            await env.engine.signal(handle.run_id, "approval", {"ok": True})
        assert (info.value.verb, info.value.status) == ("signal", "succeeded")


async def test_signal_before_the_timeout_wins(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("deadline", {})
        await env.settle()
        await env.advance("2d")
        await env.engine.signal(handle.run_id, "approval", {"ok": True, "by": "late"})
        assert await env.engine.result(handle.run_id, timeout=10) == "late:True"


async def test_declared_signal_model_rejects_a_bad_payload_at_send(env_factory: Any) -> None:
    async with env_factory(signal_app(declared=True)) as env:
        handle = await env.engine.start("approvals", {"nap": 60})  # not waiting yet: the declaration decides
        await env.settle()
        with pytest.raises(lg.PayloadError) as info:
            await env.engine.signal(handle.run_id, "approval", {"ok": "perhaps"})
        assert info.value.invalid == ["ok"]
        assert "signal 'approval'" in str(info.value)
        assert "signal-sent" not in await event_types(env.engine, handle.run_id)
        await env.engine.signal(handle.run_id, "approval", Approval(ok=True, by="model"))
        await env.advance(60)
        assert await env.engine.result(handle.run_id, timeout=10) == ["model:True"]


async def test_waiting_model_rejects_a_bad_payload_at_send(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("approvals", {})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "signal")
        with pytest.raises(lg.PayloadError) as info:
            await env.engine.signal(handle.run_id, "approval", {"by": "nobody"})
        assert info.value.missing == ["ok"]
        assert "signal-sent" not in await event_types(env.engine, handle.run_id)


async def test_body_rejects_a_payload_the_sender_could_not_check(env_factory: Any) -> None:
    app = lg.App()

    class Vote(BaseModel):  # local: a sender cannot import it, so only the body checks it
        yes: bool

    @app.workflow(name="vote")
    async def vote(ctx: lg.Context, p: Ticket) -> bool:
        ballot = await ctx.wait_for_signal("vote", Vote)
        assert ballot is not None
        return ballot.yes

    async with env_factory(app) as env:
        handle = await env.engine.start("vote", {})
        await env.settle()
        await env.engine.signal(handle.run_id, "vote", {"yes": "no idea"})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "signal")  # still waiting for a usable one
        await env.engine.signal(handle.run_id, "vote", {"yes": True})
        assert await env.engine.result(handle.run_id, timeout=10) is True
        events = await env.engine.events(handle.run_id)
    rejected = [e for e in events if e.type == "signal-rejected"]
    assert len(rejected) == 1 and "yes" in rejected[0].data["error"]


async def test_signal_refusals(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        with pytest.raises(lg.UnknownRun):
            await env.engine.signal("run_nope", "approval", {"ok": True})
        handle = await env.engine.start("approvals", {"waits": 0})
        await env.engine.result(handle.run_id, timeout=10)
        with pytest.raises(lg.RunNotEligible):
            await env.engine.signal(handle.run_id, "approval", {"ok": True})
        with pytest.raises(lg.PayloadError, match="JSON"):
            await env.engine.signal(handle.run_id, "anything", {"when": object()})


# -- updates -----------------------------------------------------------------------------


def counter_app(*, declared: bool = False, nap: float = 0) -> lg.App:
    app = lg.App()
    options: dict[str, Any] = {"updates": {"add": Add}} if declared else {}

    class Amount(BaseModel):  # local: only the body validates it
        amount: int

    model: type[BaseModel] = Add if declared else Amount

    @app.workflow(name="counter", **options)
    async def counter(ctx: lg.Context, p: Ticket) -> int:
        if nap:
            await ctx.sleep("nap", nap)
        total = 0

        async def add(change: Any) -> int:
            if change.amount < 0:
                raise ValueError(f"cannot add {change.amount}")
            return total + int(change.amount)

        while total < 10:
            # the handler's result is journaled: the body takes its state from it, also on replay
            total = await ctx.handle_update("add", model, add)
        return total

    return app


async def test_update_returns_the_handler_result(env_factory: Any) -> None:
    async with env_factory(counter_app()) as env:
        handle = await env.engine.start("counter", {})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "update")
        assert await env.engine.update(handle.run_id, "add", {"amount": 4}, timeout=10) == 4
        assert await env.engine.update(handle.run_id, "add", {"amount": 5}, timeout=10) == 9
        assert await env.engine.update(handle.run_id, "add", {"amount": 1}, timeout=10) == 10
        assert await env.engine.result(handle.run_id, timeout=10) == 10
        events = await env.engine.events(handle.run_id)
        steps = [s for s in await env.engine.steps(handle.run_id) if s.kind == "update"]
    types = [e.type for e in events]
    assert types.count("update-requested") == types.count("update-received") == types.count("update-completed") == 3
    first_id = events[types.index("update-requested")].data["message_id"]
    first = [e for e in events if e.data and e.data.get("message_id") == first_id]
    assert [e.type for e in first] == ["update-requested", "update-received", "update-completed"]
    assert [(s.key, s.output) for s in steps] == [("update:add#0", 4), ("update:add#1", 9), ("update:add#2", 10)]


async def test_rejected_and_failed_updates_leave_the_body_serving(env_factory: Any) -> None:
    async with env_factory(counter_app()) as env:
        handle = await env.engine.start("counter", {})
        await env.settle()
        with pytest.raises(lg.PayloadError) as rejected:
            await env.engine.update(handle.run_id, "add", {"amount": "lots"}, timeout=10)
        assert rejected.value.invalid == ["amount"]
        assert "update 'add'" in str(rejected.value)
        with pytest.raises(lg.PayloadError) as missing:
            await env.engine.update(handle.run_id, "add", {}, timeout=10)
        assert missing.value.missing == ["amount"]
        with pytest.raises(lg.UpdateFailed) as failed:
            await env.engine.update(handle.run_id, "add", {"amount": -3}, timeout=10)
        assert (failed.value.name, failed.value.error_tag) == ("add", "ValueError")
        assert failed.value.error_message == "cannot add -3"
        assert await env.engine.update(handle.run_id, "add", {"amount": 12}, timeout=10) == 12
        assert await env.engine.result(handle.run_id, timeout=10) == 12
        events = await env.engine.events(handle.run_id)
    failures = [e.data for e in events if e.type == "update-failed"]
    assert [f["error_tag"] for f in failures] == ["PayloadError", "PayloadError", "ValueError"]
    assert all(f["name"] == "add" for f in failures)
    assert [e.type for e in events].count("update-completed") == 1


async def test_update_sent_before_the_body_serves_it_is_answered_later(env_factory: Any) -> None:
    async with env_factory(counter_app(nap=600)) as env:
        handle = await env.engine.start("counter", {})
        await env.settle()
        pending = asyncio.ensure_future(env.engine.update(handle.run_id, "add", {"amount": 11}, timeout=10))
        await env.settle()
        assert not pending.done()
        await env.advance(600)
        assert await pending == 11
        assert await env.engine.result(handle.run_id, timeout=10) == 11


async def test_declared_update_model_rejects_at_send_and_writes_nothing(env_factory: Any) -> None:
    async with env_factory(counter_app(declared=True)) as env:
        handle = await env.engine.start("counter", {})
        await env.settle()
        with pytest.raises(lg.PayloadError) as info:
            await env.engine.update(handle.run_id, "add", {"amount": "lots"}, timeout=10)
        assert info.value.invalid == ["amount"]
        types = await event_types(env.engine, handle.run_id)
        assert "update-requested" not in types and "update-failed" not in types
        assert await env.engine.update(handle.run_id, "add", Add(amount=10), timeout=10) == 10


async def test_update_refusals(env_factory: Any) -> None:
    async with env_factory(counter_app()) as env:
        with pytest.raises(lg.UnknownRun):
            await env.engine.update("run_nope", "add", {"amount": 1}, timeout=10)
        handle = await env.engine.start("counter", {})
        await env.settle()
        assert await env.engine.update(handle.run_id, "add", {"amount": 10}, timeout=10) == 10
        await env.engine.result(handle.run_id, timeout=10)
        with pytest.raises(lg.RunNotEligible) as info:
            await env.engine.update(handle.run_id, "add", {"amount": 1}, timeout=10)
        assert info.value.verb == "update"


async def test_update_times_out_when_nobody_serves_it(env_factory: Any) -> None:
    async with env_factory(signal_app()) as env:
        handle = await env.engine.start("approvals", {})
        await env.settle()
        with pytest.raises(lg.ResultTimeout, match="'reset'"):
            await env.engine.update(handle.run_id, "reset", {}, timeout=0.2)
