"""Time at the gate: delayed starts (``at=``), pausing a workflow, pausing a key, provider back-pressure."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import advance, flow_of, parked, runs, wait_runs
from .apps.gate_probes import ledger_rows
from .apps.waits import eventually


class Remind(BaseModel):
    order: str
    tenant: str = "t"
    priority: int = 0


class Reminders(BaseModel):
    items: list[Remind]


class Go(BaseModel):
    ok: bool = True


def tenant(p: Remind) -> str:
    return p.tenant


class ProviderBusy(Exception):
    def __init__(self) -> None:
        super().__init__("429: slow down")
        self.retry_after = 30.0


def make_app(order: list[str] | None = None, calls: list[str] | None = None) -> lg.App:
    app = lg.App()
    seen = order if order is not None else []

    @app.workflow(name="remind")
    async def remind(ctx: lg.Context, p: Remind) -> str:
        return p.order

    @app.workflow(name="remind.limited", concurrency=lg.Concurrency(limit=1), priority=lambda p: p.priority)
    async def limited(ctx: lg.Context, p: Remind) -> str:
        await ctx.step("record", seen.append, p.order)
        return p.order

    @app.workflow(name="remind.debounced", debounce=lg.Debounce(period="1m", key=tenant))
    async def debounced(ctx: lg.Context, p: Remind) -> str:
        return p.order

    @app.workflow(name="remind.batch", batch=lg.Batch(item=Remind, max_size=3, timeout="1h", key=tenant))
    async def batched(ctx: lg.Context, p: Reminders) -> list[str]:
        return [i.order for i in p.items]

    @app.workflow(name="call.provider", concurrency=lg.Concurrency(limit=5, key=tenant))
    async def call_provider(ctx: lg.Context, p: Remind) -> str:
        attempts = calls if calls is not None else []

        def call() -> str:
            attempts.append(p.order)
            if p.order == "busy" and attempts.count("busy") == 1:
                raise ProviderBusy()
            return p.order

        return str(await ctx.step("call", call, retry=lg.Retry(max_attempts=2)))

    return app


# -- delayed starts --------------------------------------------------------------------------


async def test_a_delayed_start_parks_until_at(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(hours=24)
        handle = await engine.start("remind", {"order": "o1"}, at=at)
        assert (handle.status, handle.run_id) == ("queued", None)
        assert handle.deferral is not None
        assert (handle.deferral.mode, handle.deferral.due_at) == ("delayed", at)
        await advance(env, timedelta(hours=24) - timedelta(seconds=1))
        assert await runs(engine, "remind") == []
        assert (await engine.trace(handle.ticket)).state == "parked"
        await advance(env, "2s")
        [run] = await wait_runs(engine, "remind")
        assert (run.output, run.ticket) == ("o1", handle.ticket)
        assert (await engine.trace(handle.ticket)).run_id == run.id


async def test_at_in_the_past_starts_now(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        past = datetime.fromtimestamp(env.clock.now(), tz=UTC) - timedelta(minutes=5)
        handle = await env.engine.start("remind", {"order": "o1"}, at=past)
        assert handle.status == "started" and handle.run_id is not None
        assert await env.engine.result(handle.run_id, timeout=10) == "o1"


async def test_each_delayed_start_is_its_own_row(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=10)
        first = await env.engine.start("remind", {"order": "same"}, at=at)
        second = await env.engine.start("remind", {"order": "same"}, at=at)
        assert first.ticket != second.ticket
        assert await parked(env.engine, "remind") == 2
        await advance(env, "10m")
        done = await wait_runs(env.engine, "remind", 2)
        assert [r.payload for r in done] == [{"order": "same", "tenant": "t", "priority": 0}] * 2


async def test_at_becomes_an_ordinary_arrival_for_the_controls(env_factory: Callable[..., TestEnv]) -> None:
    """When ``at`` comes, the start meets the declared controls: here it folds into an open debounce."""
    async with env_factory(make_app()) as env:
        engine = env.engine
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=5)
        late = await engine.start("remind.debounced", {"order": "late"}, at=at)
        await advance(env, "4m30s")
        await engine.start("remind.debounced", {"order": "early"})  # opens the debounce, due at 5m30s
        await advance(env, "31s")  # 5m01s: the delayed start arrives and folds in, pushing the due time
        assert await runs(engine, "remind.debounced") == []
        outcomes = [r["outcome"] for r in await ledger_rows(engine, late.ticket)]
        assert outcomes[0] == "queued" and "collapsed" in outcomes
        await advance(env, "1m")
        [run] = await wait_runs(engine, "remind.debounced")
        assert run.output == "late"


async def test_a_delayed_start_survives_a_restart(make_engine: Callable[..., lg.Engine]) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        at = datetime.now(tz=UTC) + timedelta(seconds=1.5)
        handle = await engine.start("remind", {"order": "after-restart"}, at=at)
        assert handle.status == "queued"
    async with make_engine(app) as engine:
        [run] = await wait_runs(engine, "remind")
        assert run.output == "after-restart"
        assert run.created_at >= at - timedelta(milliseconds=50)


async def test_at_with_wait_is_refused(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(hours=1)
        with pytest.raises(lg.BlockingStartRefused) as info:
            await env.engine.start("remind", {"order": "o"}, at=at, wait=True)
        assert "at=" in str(info.value) and "wait=True" in str(info.value)
        assert await env.engine.flow("remind") == []


async def test_a_naive_at_is_refused(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(lg.PayloadError, match="timezone-aware"):
            await env.engine.start("remind", {"order": "o"}, at=datetime(2030, 1, 1, 9, 0))
        with pytest.raises(lg.PayloadError, match="timezone-aware"):
            await env.engine.start("remind", {"order": "o"}, at="2030-01-01T09:00:00Z")  # type: ignore[arg-type]
        assert await env.engine.flow("remind") == []


# -- pausing a workflow ----------------------------------------------------------------------


async def test_a_paused_workflow_collects_starts_and_runs_nothing(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        await engine.pause("remind", reason="deploying a fix")
        handles = [await engine.start("remind", {"order": f"o{n}"}) for n in range(3)]
        for h in handles:
            assert (h.status, h.run_id) == ("queued", None)
            assert h.deferral is not None and h.deferral.mode == "paused" and h.deferral.due_at is None
        await advance(env, "1d")
        assert await runs(engine, "remind") == []
        assert (await flow_of(engine, "remind")).modes == {"paused": 3}
        assert [p["scope"] for p in await engine.pauses()] == ["wf:remind"]

        assert await engine.unpause("remind") == 3
        done = await wait_runs(engine, "remind", 3)
        assert sorted(r.output for r in done) == ["o0", "o1", "o2"]
        for h in handles:
            outcomes = [(r["kind"], r["outcome"]) for r in await ledger_rows(engine, h.ticket)]
            assert outcomes[0] == ("arrival", "queued")
            assert ("drain", "released") in outcomes and ("drain", "admitted") in outcomes
        assert await engine.pauses() == []


async def test_unpause_reoffers_in_priority_order_through_the_remaining_controls(
    env_factory: Callable[..., TestEnv],
) -> None:
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        engine = env.engine
        await engine.pause("remind.limited")
        for name, priority in [("low", 1), ("top", 9), ("mid", 5), ("mid2", 5)]:
            await engine.start("remind.limited", {"order": name, "priority": priority})
        await advance(env, "1h")
        assert order == []
        await engine.unpause("remind.limited")
        await eventually(lambda: len(order) == 4, what="every released start admitted")
        assert order == ["top", "mid", "mid2", "low"]
        # every release went through the gate: its admission is counted once its commit lands (a run handed
        # a slot begins as that commit goes out, so the last body may run a moment before)

        async def all_admitted() -> bool:
            return (await flow_of(engine, "remind.limited")).admitted == 4

        await eventually(all_admitted, what="four admissions counted")


async def test_unpause_folds_the_collected_starts_into_a_debounce(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        await engine.pause("remind.debounced")
        handles = [await engine.start("remind.debounced", {"order": f"o{n}"}) for n in range(4)]
        assert {h.deferral.mode for h in handles if h.deferral} == {"paused"}
        await engine.unpause("remind.debounced")
        await advance(env)
        assert await runs(engine, "remind.debounced") == []  # released into the debounce: quiet period first
        assert await parked(engine, "remind.debounced") == 1
        await advance(env, "1m")
        [run] = await wait_runs(engine, "remind.debounced")
        assert run.output == "o3"
        for h in handles:
            assert (await engine.trace(h.ticket)).run_id == run.id


async def test_unpause_gathers_the_collected_items_into_a_batch(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        await engine.pause("remind.batch")
        for n in range(4):
            handle = await engine.start("remind.batch", {"order": f"o{n}"})
            assert handle.status == "queued"
        await engine.unpause("remind.batch")
        await advance(env)
        [full] = await wait_runs(engine, "remind.batch")  # three items fill a batch at once
        assert full.output == ["o0", "o1", "o2"]
        assert await parked(engine, "remind.batch") == 1  # the fourth waits for company or the deadline
        await advance(env, "1h")
        done = await wait_runs(engine, "remind.batch", 2)
        assert done[1].output == ["o3"]


async def test_a_start_arriving_while_unpaused_is_not_parked(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        await env.engine.pause("remind")
        await env.engine.unpause("remind")
        handle = await env.engine.start("remind", {"order": "o"})
        assert handle.status == "started"


# -- pausing a key ---------------------------------------------------------------------------


async def test_pause_key_holds_admissions_under_that_key_until_then(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        until = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=10)
        await engine.pause_key("acme", until=until, reason="provider maintenance")
        held = await engine.start("call.provider", {"order": "a1", "tenant": "acme"})
        assert held.status == "queued" and held.deferral is not None
        assert (held.deferral.mode, held.deferral.due_at, held.deferral.key) == ("key-paused", until, "acme")
        other = await engine.start("call.provider", {"order": "b1", "tenant": "globex"})
        assert other.status == "started"
        await advance(env, "9m59s")
        assert [r.output for r in await runs(engine, "call.provider") if r.status == "succeeded"] == ["b1"]
        await advance(env, "2s")
        done = await wait_runs(engine, "call.provider", 2)
        assert sorted(r.output for r in done) == ["a1", "b1"]


async def test_unpause_key_releases_at_once(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        await engine.pause_key("acme", until=datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(days=1))
        held = await engine.start("call.provider", {"order": "a1", "tenant": "acme"})
        assert held.status == "queued"
        await engine.unpause_key("acme")
        await advance(env)
        [run] = await wait_runs(engine, "call.provider")
        assert run.output == "a1"


async def test_a_start_released_by_an_unpause_is_admitted_even_by_a_stale_view_of_the_pauses(
    env_factory: Callable[..., TestEnv], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain deciding with pauses read before the unpause must not park the start again until the lifted
    pause's end (a day here): a pause the snapshot shows is checked in the deciding transaction."""
    async with env_factory(make_app()) as env:
        engine = env.engine
        await engine.pause_key("acme", until=datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(days=1))
        held = await engine.start("call.provider", {"order": "a1", "tenant": "acme"})
        assert held.status == "queued"
        stale = dict(await engine.pause_snapshot())
        assert "key:acme" in stale

        pauses = engine.core.pauses

        async def keep_stale() -> None:
            pauses._cache = stale

        monkeypatch.setattr(pauses, "refresh", keep_stale)
        await engine.unpause_key("acme")  # lifted in the database; this process still sees it
        await engine.drainer.tick()
        [run] = await wait_runs(engine, "call.provider")
        assert run.output == "a1"
        assert [r["outcome"] for r in await ledger_rows(engine, held.ticket)] == ["queued", "admitted"]


async def test_pause_key_refuses_bad_input(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(ValueError, match="the key must not be empty"):
            await env.engine.pause_key(" ")
        with pytest.raises(ValueError, match="timezone-aware"):
            await env.engine.pause_key("acme", until=datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="is not in the future"):
            await env.engine.pause_key("acme", until=datetime.fromtimestamp(env.clock.now(), tz=UTC))
        assert await env.engine.inspector.pauses() == []  # nothing written on a refusal


async def test_retry_after_from_a_step_pauses_its_key_for_other_starts(env_factory: Callable[..., TestEnv]) -> None:
    calls: list[str] = []
    async with env_factory(make_app(calls=calls)) as env:
        engine = env.engine
        busy = await engine.start("call.provider", {"order": "busy", "tenant": "acme"})
        assert busy.status == "started" and busy.run_id is not None
        await env.settle()
        assert calls == ["busy"]  # the first attempt got a 429 and waits 30s before its retry
        pauses = await eventually(engine.pauses, what="the key pause from the step's retry_after")
        assert [p["scope"] for p in pauses] == ["key:acme"]
        # The pause is in the database once its commit returns; this process's gate takes it from that commit's
        # answer, a moment later (the pause is written in the background of the failed attempt).
        await eventually(lambda: "key:acme" in engine.core.pauses._cache, what="the gate sees the pause")

        held = await engine.start("call.provider", {"order": "next", "tenant": "acme"})
        assert held.status == "queued" and held.deferral is not None and held.deferral.mode == "key-paused"
        assert held.deferral.due_at is not None
        assert held.deferral.due_at.timestamp() == pytest.approx(env.clock.now() + 30, abs=0.01)
        elsewhere = await engine.start("call.provider", {"order": "other", "tenant": "globex"})
        assert elsewhere.status == "started"

        await advance(env, "30s")
        done = await wait_runs(engine, "call.provider", 3)
        assert sorted(r.output for r in done) == ["busy", "next", "other"]
        assert calls.count("busy") == 2
