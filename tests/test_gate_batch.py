"""Batch: single-item arrivals gather into one run; flush at ``max_size`` or at the deadline."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import advance, arrival, flow_of, parked, runs, wait_runs


class Issue(BaseModel):
    tenant: str
    key: str
    weight: int = 1


class Refresh(BaseModel):
    items: list[Issue]


def make_app(*, max_size: int = 3, timeout: str = "30s") -> lg.App:
    app = lg.App()

    @app.workflow(
        name="refresh",
        batch=lg.Batch(item=Issue, key=lambda i: i.tenant, max_size=max_size, timeout=timeout),
        idempotency_key=lambda p: f"refresh:{p.items[0].tenant}:{p.items[0].key}:{len(p.items)}",
    )
    async def refresh(ctx: lg.Context, p: Refresh) -> list[str]:
        return [i.key for i in p.items]

    return app


async def test_the_arrival_that_fills_the_batch_starts_the_run(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(max_size=3)) as env:
        engine = env.engine
        first = await engine.start("refresh", {"tenant": "t", "key": "A-1"})
        second = await engine.start("refresh", {"tenant": "t", "key": "A-2"})
        for h in (first, second):
            assert (h.status, h.run_id) == ("queued", None)
            assert h.deferral is not None and h.deferral.mode == "batch"
        assert first.deferral is not None and second.deferral is not None
        assert second.deferral.due_at == first.deferral.due_at
        assert (await arrival(engine, first.ticket))["outcome"] == "batched"
        assert (await arrival(engine, second.ticket))["outcome"] == "batched"

        last = await engine.start("refresh", {"tenant": "t", "key": "A-3"})
        assert last.status == "started" and last.run_id is not None
        # flushed in the arrival's own transaction: nothing is parked any more, the run exists
        assert await parked(engine, "refresh") == 0
        run = await engine.get_run(last.run_id)
        assert run.payload == {"items": [{"tenant": "t", "key": f"A-{n}", "weight": 1} for n in (1, 2, 3)]}
        assert run.idempotency_key == "refresh:t:A-1:3"
        assert await engine.result(last.run_id, timeout=10) == ["A-1", "A-2", "A-3"]
        for h in (first, second, last):
            assert (await engine.trace(h.ticket)).run_id == last.run_id
        flow = await flow_of(engine, "refresh", "t")
        assert (flow.batched, flow.admitted, flow.queued) == (3, 1, 0)


async def test_the_deadline_runs_from_the_first_item_and_is_not_reset(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(max_size=10, timeout="30s")) as env:
        engine = env.engine
        await engine.start("refresh", {"tenant": "t", "key": "A-1"})
        await advance(env, "20s")
        await engine.start("refresh", {"tenant": "t", "key": "A-2"})
        await advance(env, "9s")  # 29s after the first item
        assert await runs(engine, "refresh") == []
        await advance(env, "2s")  # 31s after the first, 11s after the last
        found = await wait_runs(engine, "refresh")
        assert found[0].output == ["A-1", "A-2"]
        # the next item opens a fresh batch with a deadline of its own
        late = await engine.start("refresh", {"tenant": "t", "key": "A-3"})
        assert late.status == "queued" and late.deferral is not None and late.deferral.due_at is not None
        assert late.deferral.due_at.timestamp() == pytest.approx(env.clock.now() + 30)


async def test_a_bad_item_names_the_item_field_and_writes_nothing(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        with pytest.raises(lg.PayloadError) as info:
            await engine.start("refresh", {"tenant": "t", "key": "A-1", "weight": "heavy"})
        assert info.value.invalid == ["weight"]
        assert "item of 'refresh'" in str(info.value)
        with pytest.raises(lg.PayloadError) as info:
            await engine.start("refresh", {"tenant": "t"})
        assert info.value.missing == ["key"]
        # a caller handing over the batch shape is judged by the item model, too
        with pytest.raises(lg.PayloadError, match="missing"):
            await engine.start("refresh", {"items": [{"tenant": "t", "key": "A-1"}]})
        assert await engine.flow("refresh") == []
        assert await runs(engine, "refresh") == []


async def test_keys_partition_batches(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(max_size=2)) as env:
        engine = env.engine
        a1 = await engine.start("refresh", {"tenant": "a", "key": "A-1"})
        b1 = await engine.start("refresh", {"tenant": "b", "key": "B-1"})
        a2 = await engine.start("refresh", {"tenant": "a", "key": "A-2"})
        assert (a1.status, b1.status, a2.status) == ("queued", "queued", "started")
        assert a2.run_id is not None
        assert await engine.result(a2.run_id, timeout=10) == ["A-1", "A-2"]
        assert await parked(engine, "refresh") == 1
        b2 = await engine.start("refresh", {"tenant": "b", "key": "B-2"})
        assert b2.status == "started" and b2.run_id is not None
        assert await engine.result(b2.run_id, timeout=10) == ["B-1", "B-2"]


async def test_an_explicit_idempotency_key_on_an_item_is_refused(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(lg.PayloadError, match="idempotency_key"):
            await env.engine.start("refresh", {"tenant": "t", "key": "A-1"}, idempotency_key="mine")
        assert await env.engine.flow("refresh") == []


async def test_a_batch_of_one_flushes_at_once(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(max_size=1)) as env:
        handle = await env.engine.start("refresh", {"tenant": "t", "key": "A-1"})
        assert handle.status == "started" and handle.run_id is not None
        assert await env.engine.result(handle.run_id, timeout=10) == ["A-1"]


async def test_a_spent_batch_identity_is_existing_not_silent(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(max_size=2)) as env:
        engine = env.engine
        await engine.start("refresh", {"tenant": "t", "key": "A-1"})
        done = await engine.start("refresh", {"tenant": "t", "key": "A-2"})
        assert done.status == "started"
        await engine.start("refresh", {"tenant": "t", "key": "A-1"})
        again = await engine.start("refresh", {"tenant": "t", "key": "A-2"})  # same batch identity as before
        assert (again.status, again.run_id) == ("existing", done.run_id)
        assert len(await runs(engine, "refresh")) == 1
