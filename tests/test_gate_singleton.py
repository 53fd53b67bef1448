"""Singleton: one live run per key; ``skip`` stands the newcomer down, ``cancel`` evicts the incumbent."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import advance, arrival, flow_of, runs, wait_runs


class Sync(BaseModel):
    tenant: str
    n: int = 0
    hold: bool = True


class Go(BaseModel):
    ok: bool = True


def tenant(p: Sync) -> str:
    return p.tenant


def make_app() -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Sync) -> int:
        if p.hold:
            await ctx.wait_for_signal("go", Go)
        return p.n

    app.workflow(name="sync.skip", singleton=lg.Singleton(key=tenant, mode="skip"))(body)
    app.workflow(name="sync.cancel", singleton=lg.Singleton(key=tenant, mode="cancel"))(body)
    app.workflow(
        name="sync.skip.limited",
        singleton=lg.Singleton(key=tenant, mode="skip"),
        concurrency=lg.Concurrency(limit=1),  # one slot for every tenant: a second tenant parks
    )(body)
    return app


async def test_skip_returns_the_incumbents_run(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("sync.skip", {"tenant": "t", "n": 1})
        assert first.status == "started"
        await env.settle()
        second = await engine.start("sync.skip", {"tenant": "t", "n": 2})
        assert (second.status, second.run_id) == ("skipped", first.run_id)
        assert second.ticket != first.ticket
        row = await arrival(engine, second.ticket)
        assert (row["outcome"], row["control"], row["key"], row["run_id"]) == (
            "skipped",
            "singleton",
            "t",
            first.run_id,
        )
        # another key is free
        other = await engine.start("sync.skip", {"tenant": "u", "n": 3})
        assert other.status == "started"
        assert (await flow_of(engine, "sync.skip", "t")).skipped == 1
        # the skipped handle is a real, pollable run: the incumbent's
        assert first.run_id is not None
        await engine.signal(first.run_id, "go", {})
        assert await second.result(timeout=10) == 1


async def test_skip_on_a_blocking_path_raises_singleton_held(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("sync.skip", {"tenant": "t"})
        with pytest.raises(lg.SingletonHeld) as info:
            await engine.run("sync.skip", {"tenant": "t", "hold": False}, timeout=10)
        assert (info.value.run_id, info.value.workflow) == (first.run_id, "sync.skip")
        with pytest.raises(lg.SingletonHeld) as info:
            await engine.start("sync.skip", {"tenant": "t", "hold": False}, wait=True, timeout=10)
        assert info.value.run_id == first.run_id
        assert len(await runs(engine, "sync.skip")) == 1
        # blocking starts work when the key is free
        assert await engine.run("sync.skip", {"tenant": "u", "n": 7, "hold": False}, timeout=10) == 7


async def test_after_the_incumbent_finishes_a_new_start_runs(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("sync.skip", {"tenant": "t", "n": 1})
        assert first.run_id is not None
        await env.settle()
        assert (await engine.start("sync.skip", {"tenant": "t"})).status == "skipped"
        await engine.signal(first.run_id, "go", {})
        assert await engine.result(first.run_id, timeout=10) == 1
        again = await engine.start("sync.skip", {"tenant": "t", "n": 2, "hold": False})
        assert again.status == "started" and again.run_id != first.run_id
        assert await again.result(timeout=10) == 2
        # a cancelled incumbent frees the key too
        third = await engine.start("sync.skip", {"tenant": "t", "n": 3})
        assert third.run_id is not None
        await engine.cancel(third.run_id, "operator")
        assert (await engine.start("sync.skip", {"tenant": "t", "hold": False})).status == "started"


async def test_a_parked_start_holds_the_key_too(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        blocker = await engine.start("sync.skip.limited", {"tenant": "a", "n": 1})
        assert blocker.status == "started" and blocker.run_id is not None
        waiting = await engine.start("sync.skip.limited", {"tenant": "b", "n": 2})
        assert waiting.status == "queued" and waiting.deferral is not None
        assert waiting.deferral.mode == "concurrency"
        # tenant b has no run yet, but its parked start is the incumbent
        newcomer = await engine.start("sync.skip.limited", {"tenant": "b", "n": 3})
        assert (newcomer.status, newcomer.run_id) == ("skipped", None)
        assert waiting.ticket in (await arrival(engine, newcomer.ticket))["reason"]

        await engine.signal(blocker.run_id, "go", {})
        assert await engine.result(blocker.run_id, timeout=10) == 1
        [b_run] = await wait_runs(engine, "sync.skip.limited", status="running")
        assert b_run.payload["n"] == 2
        later = await engine.start("sync.skip.limited", {"tenant": "b", "n": 4})
        assert (later.status, later.run_id) == ("skipped", b_run.id)


async def test_cancel_admits_the_newcomer_and_evicts_the_incumbent(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("sync.cancel", {"tenant": "t", "n": 1})
        assert first.run_id is not None
        await env.settle()
        second = await engine.start("sync.cancel", {"tenant": "t", "n": 2})
        assert second.status == "started" and second.run_id not in (None, first.run_id)
        old = await engine.get_run(first.run_id)
        assert old.status == "cancelled"
        assert old.error_message is not None and "replaced" in old.error_message
        assert second.run_id is not None and second.run_id in old.error_message
        with pytest.raises(lg.RunCancelled, match="replaced"):
            await engine.result(first.run_id, timeout=10)
        other = await engine.start("sync.cancel", {"tenant": "u", "n": 3})  # another key: nothing evicted
        await advance(env)
        assert (await engine.get_run(second.run_id)).status == "running"
        await engine.signal(second.run_id, "go", {})
        assert await engine.result(second.run_id, timeout=10) == 2
        assert other.run_id is not None
        assert (await engine.get_run(other.run_id)).status == "running"


async def test_cancel_on_a_blocking_path_replaces_and_waits(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        first = await engine.start("sync.cancel", {"tenant": "t"})
        assert first.run_id is not None
        assert await engine.run("sync.cancel", {"tenant": "t", "n": 5, "hold": False}, timeout=10) == 5
        assert (await engine.get_run(first.run_id)).status == "cancelled"
