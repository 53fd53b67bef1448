"""Durable time: timers that park the run and fire at their instant; journaled clock and randomness."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime


class Nap(BaseModel):
    seconds: float = 7 * 86400
    at: float | None = None
    offset_hours: int = 0


class Go(BaseModel):
    go: bool = True


async def parked_on(engine: lg.Engine, run_id: str, waiting_on: str) -> bool:
    run = await engine.get_run(run_id)
    return run.status == "running" and run.waiting_on == waiting_on and run.owner is None and not engine.executing


async def wait_until(check: Any, *, timeout: float = 10.0) -> None:
    """Poll the async ``check()`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


def sleeper_app(log: list[str]) -> lg.App:
    app = lg.App()

    @app.workflow(name="sleeper")
    async def sleeper(ctx: lg.Context, p: Nap) -> float:
        log.append("entered")
        await ctx.sleep("cool-off", p.seconds)
        log.append("woke")
        return (await ctx.now()).timestamp()

    @app.workflow(name="until")
    async def until(ctx: lg.Context, p: Nap) -> float:
        assert p.at is not None
        tz = timezone(timedelta(hours=p.offset_hours))
        await ctx.sleep_until("alarm", datetime.fromtimestamp(p.at, tz=tz))
        return (await ctx.now()).timestamp()

    @app.workflow(name="naive")
    async def naive(ctx: lg.Context, p: Nap) -> None:
        await ctx.sleep_until("alarm", datetime(2030, 1, 1, 9, 0))

    return app


async def test_sleep_parks_the_run_and_fires_at_the_instant(env_factory: Any) -> None:
    log: list[str] = []
    async with env_factory(sleeper_app(log)) as env:
        t0 = env.clock.now()
        handle = await env.engine.start("sleeper", {})
        await env.settle()
        run = await env.engine.get_run(handle.run_id)
        assert (run.status, run.waiting_on, run.owner) == ("running", "timer", None)
        assert env.engine.executing == []  # no execution is held while the timer runs
        assert run.wake_at == to_datetime(t0 + 7 * 86400)

        await env.advance(timedelta(days=7) - timedelta(seconds=1))
        assert (await env.engine.get_run(handle.run_id)).status == "running"
        assert log == ["entered"]

        await env.advance("1s")
        assert await env.engine.result(handle.run_id, timeout=10) == pytest.approx(t0 + 7 * 86400)
        assert log == ["entered", "entered", "woke"]
        timer = next(s for s in await env.engine.steps(handle.run_id) if s.kind == "sleep")
        events = [e.type for e in await env.engine.events(handle.run_id)]
    assert (timer.key, timer.status, timer.due_at) == ("cool-off#0", "completed", to_datetime(t0 + 7 * 86400))
    assert events.index("timer-set") < events.index("timer-fired") < events.index("run-succeeded")


@pytest.mark.parametrize("offset_hours", [0, -5, 9])
async def test_sleep_until_an_aware_datetime(env_factory: Any, offset_hours: int) -> None:
    async with env_factory(sleeper_app([])) as env:
        at = float(int(env.clock.now()) + 3600)  # whole seconds: exact as a datetime and as a float
        handle = await env.engine.start("until", {"at": at, "offset_hours": offset_hours})
        await env.settle()
        assert await parked_on(env.engine, handle.run_id, "timer")
        assert (await env.engine.get_run(handle.run_id)).wake_at == to_datetime(at)
        env.clock.set(at - 0.001)
        await env.settle()
        assert (await env.engine.get_run(handle.run_id)).status == "running"
        env.clock.set(at)
        await env.settle()
        assert await env.engine.result(handle.run_id, timeout=10) == at


async def test_sleep_until_the_past_and_zero_sleep_return_at_once(env_factory: Any) -> None:
    async with env_factory(sleeper_app([])) as env:
        now = env.clock.now()
        assert await env.engine.run("until", {"at": now - 60}, timeout=10) == pytest.approx(now)
        assert await env.engine.run("sleeper", {"seconds": 0}, timeout=10) == pytest.approx(now)


async def test_naive_datetime_is_refused(env_factory: Any) -> None:
    async with env_factory(sleeper_app([])) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("naive", {}, timeout=10)
    assert info.value.error_tag == "ValueError"
    assert "ctx.sleep_until('alarm')" in (info.value.error_message or "")
    assert "timezone-aware" in (info.value.error_message or "")


async def test_short_sleep_waits_in_place(env_factory: Any) -> None:
    log: list[str] = []
    async with env_factory(sleeper_app(log), inline_sleep="1m") as env:
        handle = await env.engine.start("sleeper", {"seconds": 30})
        await env.settle()
        run = await env.engine.get_run(handle.run_id)
        assert run.waiting_on is None and run.owner is not None
        assert env.engine.executing == [handle.run_id]  # held, waiting on the clock
        await env.advance(29)
        assert (await env.engine.get_run(handle.run_id)).status == "running"
        await env.advance(1)
        await env.engine.result(handle.run_id, timeout=10)
    assert log == ["entered", "woke"]  # one entry: it never parked


async def test_durable_sleep_survives_a_restart(make_engine: Any) -> None:
    log: list[str] = []
    app = sleeper_app(log)
    async with make_engine(app, inline_sleep=0) as first:
        handle = await first.start("sleeper", {"seconds": 1.0})
        run_id = handle.run_id
        await wait_until(lambda: parked_on(first, run_id, "timer"))
        due = (await first.get_run(run_id)).wake_at
    assert log == ["entered"]
    async with make_engine(app, inline_sleep=0) as second:
        woke_at = await second.result(run_id, timeout=10)
        run = await second.get_run(run_id)
    assert due is not None and woke_at >= due.timestamp()
    assert run.status == "succeeded"
    assert log == ["entered", "entered", "woke"]


async def test_now_uuid_and_random_are_journaled(env_factory: Any) -> None:
    app = lg.App()
    seen: list[tuple[datetime, str, float]] = []

    @app.workflow(name="facts")
    async def facts(ctx: lg.Context, p: Go) -> list[str]:
        values = (await ctx.now(), await ctx.uuid(), await ctx.random())
        seen.append(values)
        await ctx.wait_for_signal("go", Go)
        return [values[0].isoformat(), values[1], repr(values[2])]

    async with env_factory(app) as env:
        t0 = env.clock.now()
        handle = await env.engine.start("facts", {})
        await env.settle()
        await env.advance("3h")  # a re-entry later must still see the first instant
        await env.engine.signal(handle.run_id, "go", {})
        result = await env.engine.result(handle.run_id, timeout=10)
        kinds = {s.key: s.kind for s in await env.engine.steps(handle.run_id)}
    assert len(seen) == 2 and seen[0] == seen[1]
    when, uid, rnd = seen[0]
    assert when == to_datetime(t0) and when.tzinfo is UTC
    assert len(uid) == 36 and 0 <= rnd < 1
    assert result == [when.isoformat(), uid, repr(rnd)]
    assert {k: v for k, v in kinds.items() if k.startswith("$")} == {
        "$now#0": "value",
        "$uuid#0": "value",
        "$random#0": "value",
    }
