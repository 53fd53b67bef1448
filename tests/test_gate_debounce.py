"""Debounce: a burst folds into one run; the timer resets per arrival; ``timeout`` caps it; ``keep``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import workers
from lockgate.testing import TestEnv

from .apps.gate import advance, arrival, flow_of, parked, payloads, runs, wait_runs


class Edit(BaseModel):
    row: str
    n: int


class Edits(BaseModel):
    items: list[Edit]


class Go(BaseModel):
    ok: bool = True


def row_key(p: Edit) -> str:
    return p.row


def make_app(*, period: str = "15m", timeout: str | None = None, keep: str = "last") -> lg.App:
    app = lg.App()

    @app.workflow(name="narrate", debounce=lg.Debounce(key=row_key, period=period, timeout=timeout))
    async def narrate(ctx: lg.Context, p: Edit) -> int:
        return p.n

    @app.workflow(name="narrate.first", debounce=lg.Debounce(key=row_key, period=period, keep="first"))
    async def narrate_first(ctx: lg.Context, p: Edit) -> int:
        return p.n

    @app.workflow(name="narrate.all", debounce=lg.Debounce(key=lambda i: i.row, period=period, keep="all"))
    async def narrate_all(ctx: lg.Context, p: Edits) -> list[int]:
        return [i.n for i in p.items]

    @app.workflow(
        name="narrate.replace",
        debounce=lg.Debounce(key=row_key, period=period),
        singleton=lg.Singleton(key=row_key, mode="cancel"),
    )
    async def narrate_replace(ctx: lg.Context, p: Edit) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    return app


async def test_twenty_arrivals_fold_into_one_run_with_the_latest_payload(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        engine = env.engine
        handles = [await engine.start("narrate", {"row": "r1", "n": n}) for n in range(20)]
        assert {h.status for h in handles} == {"queued"}
        assert {h.run_id for h in handles} == {None}
        assert all(h.deferral is not None and h.deferral.mode == "debounce" for h in handles)
        assert len({h.ticket for h in handles}) == 20
        # every arrival is accounted for: one parked row, nineteen folded into it
        first = await arrival(engine, handles[0].ticket)
        assert (first["outcome"], first["control"], first["key"]) == ("queued", "debounce", "r1")
        for h in handles[1:]:
            row = await arrival(engine, h.ticket)
            assert (row["outcome"], row["control"], row["pending_id"]) == ("collapsed", "debounce", first["pending_id"])
            assert handles[0].ticket in row["reason"]
        assert await parked(engine, "narrate") == 1
        flow = await flow_of(engine, "narrate", "r1")
        assert (flow.queued, flow.collapsed, flow.admitted) == (1, 19, 0)

        await advance(env, "15m")
        done = await wait_runs(engine, "narrate")
        assert len(done) == 1 and done[0].payload == {"row": "r1", "n": 19}
        assert done[0].output == 19
        flow = await flow_of(engine, "narrate", "r1")
        assert (flow.queued, flow.collapsed, flow.admitted) == (0, 19, 1)
        # the handle of the first arrival's run is the one every ticket traces to
        for h in (handles[0], handles[7], handles[19]):
            assert (await engine.trace(h.ticket)).run_id == done[0].id


async def test_each_arrival_resets_the_timer(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(period="10m")) as env:
        engine = env.engine
        first = await engine.start("narrate", {"row": "r", "n": 1})
        assert first.deferral is not None and first.deferral.due_at is not None
        assert first.deferral.due_at.timestamp() == pytest.approx(env.clock.now() + 600)
        await advance(env, "9m59s")
        second = await engine.start("narrate", {"row": "r", "n": 2})
        assert second.deferral is not None and second.deferral.due_at is not None
        assert second.deferral.due_at.timestamp() == pytest.approx(env.clock.now() + 600)
        await advance(env, "9m59s")
        assert await runs(engine, "narrate") == []  # 19m58s after the first arrival: still quiet-timing
        await advance(env, "2s")
        done = await wait_runs(engine, "narrate")
        assert payloads(done) == [{"row": "r", "n": 2}]


async def test_timeout_caps_the_wait_from_the_first_arrival(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(period="10m", timeout="25m")) as env:
        engine = env.engine
        started = env.clock.now()
        for n in range(3):  # arrivals at 0, 9 and 18 minutes, each well inside the quiet period
            handle = await engine.start("narrate", {"row": "r", "n": n})
            if n < 2:
                await advance(env, "9m")
        assert handle.deferral is not None and handle.deferral.due_at is not None
        assert handle.deferral.due_at.timestamp() == pytest.approx(started + 25 * 60)  # not 18m + 10m
        await advance(env, "6m59s")
        assert await runs(engine, "narrate") == []
        await advance(env, "2s")  # 25m01s after the first arrival, 7m after the last
        done = await wait_runs(engine, "narrate")
        assert payloads(done) == [{"row": "r", "n": 2}]
        flow = await flow_of(engine, "narrate", "r")
        assert (flow.collapsed, flow.admitted) == (2, 1)


async def test_keep_first_runs_the_first_payload(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(period="1m")) as env:
        for n in (5, 6, 7):
            await env.engine.start("narrate.first", {"row": "r", "n": n})
        await advance(env, "1m")
        done = await wait_runs(env.engine, "narrate.first")
        assert payloads(done) == [{"row": "r", "n": 5}]


async def test_keep_all_delivers_every_payload_in_order(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(period="1m")) as env:
        engine = env.engine
        for n in (3, 1, 2, 1):
            handle = await engine.start("narrate.all", {"row": "r", "n": n})
            assert handle.status == "queued"
        other = await engine.start("narrate.all", {"row": "s", "n": 9})
        await advance(env, "1m")
        done = await wait_runs(engine, "narrate.all", 2)
        by_row = {r.payload["items"][0]["row"]: r for r in done}
        assert by_row["r"].payload == {"items": [{"row": "r", "n": n} for n in (3, 1, 2, 1)]}
        assert by_row["r"].output == [3, 1, 2, 1]
        assert by_row["s"].output == [9]
        assert (await engine.trace(other.ticket)).run_id == by_row["s"].id


async def test_keep_all_validates_each_arrival_as_an_item(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        with pytest.raises(lg.PayloadError) as info:
            await env.engine.start("narrate.all", {"row": "r", "n": "many"})
        assert info.value.invalid == ["n"]
        with pytest.raises(lg.PayloadError, match="missing row"):
            await env.engine.start("narrate.all", {"items": [{"row": "r", "n": 1}]})
        assert await env.engine.flow("narrate.all") == []


async def test_different_keys_fold_separately(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(period="1m")) as env:
        engine = env.engine
        for n in range(6):
            await engine.start("narrate", {"row": f"r{n % 3}", "n": n})
        assert await parked(engine, "narrate") == 3
        await advance(env, "1m")
        done = await wait_runs(engine, "narrate", 3)
        assert sorted((r.payload["row"], r.payload["n"]) for r in done) == [("r0", 3), ("r1", 4), ("r2", 5)]
        for key in ("r0", "r1", "r2"):
            flow = await flow_of(engine, "narrate", key)
            assert (flow.collapsed, flow.admitted) == (1, 1)


async def test_singleton_cancel_evicts_the_incumbent_only_when_the_newcomer_is_admitted(
    env_factory: Callable[..., TestEnv],
) -> None:
    async with env_factory(make_app(period="10m")) as env:
        engine = env.engine
        await engine.start("narrate.replace", {"row": "r", "n": 1})
        await advance(env, "10m")
        [incumbent] = await runs(engine, "narrate.replace")
        assert incumbent.status == "running"

        newcomer = await engine.start("narrate.replace", {"row": "r", "n": 2})
        assert newcomer.status == "queued"
        await advance(env, "9m")
        await engine.start("narrate.replace", {"row": "r", "n": 3})  # resets the quiet period
        await advance(env, "9m")
        # the whole quiet period long, the incumbent keeps working
        assert (await engine.get_run(incumbent.id)).status == "running"
        assert len(await runs(engine, "narrate.replace")) == 1

        await advance(env, "1m")
        found = await wait_runs(engine, "narrate.replace", 2, status=None)
        replacement = found[1]
        assert replacement.payload == {"row": "r", "n": 3}
        assert replacement.status == "running"
        old = await engine.get_run(incumbent.id)
        assert old.status == "cancelled"
        assert old.error_message is not None and replacement.id in old.error_message
        assert "replaced" in old.error_message
        await engine.signal(replacement.id, "go", {})
        assert await engine.result(replacement.id, timeout=10) == 3


async def test_real_drainer_fires_a_short_debounce(make_engine: Callable[..., lg.Engine]) -> None:
    async with make_engine(make_app(period="300ms")) as engine:
        handles = [await engine.start("narrate", {"row": "r", "n": n}) for n in range(5)]
        assert {h.status for h in handles} == {"queued"}
        done = await wait_runs(engine, "narrate")
        assert payloads(done) == [{"row": "r", "n": 4}]
        trace = await engine.trace(handles[2].ticket)
        assert (trace.absorbed_by, trace.run_id, trace.state) == (handles[0].ticket, done[0].id, "succeeded")


async def test_advance_admits_what_fell_due_before_it_returns(env_factory: Callable[..., TestEnv]) -> None:
    """``env.advance`` has the gate decide what fell due by the new instant before it settles: the drainer's
    own loop runs on real time and may not have ticked since the clock moved (here another worker holds the
    drain lease, so this engine's loop never drains)."""
    env = env_factory(make_app())
    async with lg.Client(env.engine.app, env.store_url, clock=env.clock) as elsewhere:
        now = env.clock.now()
        assert await elsewhere.store.write(workers.acquire_sweep, "drainer", "wkr_elsewhere", now, 86400.0)
    async with env:
        engine = env.engine
        for n in range(3):
            await engine.start("narrate", {"row": "r1", "n": n})
        await env.advance("15m")
        assert not engine.drainer.holds_lease
        flow = await flow_of(engine, "narrate", "r1")
        assert (flow.queued, flow.collapsed, flow.admitted) == (0, 2, 1)
        [done] = await runs(engine, "narrate")
        assert (done.status, done.output) == ("succeeded", 2)
