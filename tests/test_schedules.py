"""Schedules on real stores: firing, overlap, backfill, pause, manual runs and the firing ledger.

The schedule sweep's own loop ticks in real time; these tests move a ``FakeClock`` and tick
by hand (``tick``), so the background loop is switched off (``no_background_sweep``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate import sweeps
from lockgate.engine.firing import ScheduleRuntime, fire
from lockgate.store import schedules as sched_ops
from lockgate.sweeps import schedules as sweep
from lockgate.testing import TestEnv

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()  # a Thursday, before Berlin's spring-forward


class Day(BaseModel):
    day: str


class Go(BaseModel):
    ok: bool = True


@pytest.fixture(autouse=True)
def no_background_sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tests tick the schedules themselves, on the fake clock: the engine starts no schedule sweep."""
    monkeypatch.setattr(sweeps, "SWEEPS", tuple(s for s in sweeps.SWEEPS if s is not sweep.schedule_sweep))
    yield


def make_app(**schedule: Any) -> lg.App:
    app = lg.App()

    @app.workflow(name="sched.quick")
    async def quick(ctx: lg.Context, p: Day) -> str:
        return p.day

    @app.workflow(name="sched.slow")
    async def slow(ctx: lg.Context, p: Day) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.day

    @app.workflow(name="sched.broken")
    async def broken(ctx: lg.Context, p: Day) -> str:
        raise RuntimeError(f"no report for {p.day}")

    for name, options in schedule.items():
        app.schedule(name, **options)
    return app


def by_day(at: datetime) -> dict[str, str]:
    return {"day": at.strftime("%Y-%m-%d %H:%M")}


async def tick(env: TestEnv) -> sweep.Tick:
    rt = sweep.runtime_for(env.engine.worker)
    await sweep.register(rt, orphan_others=True)
    result = await sweep.fire_due(rt)
    await env.settle()
    return result


async def settle_firings(env: TestEnv) -> None:
    """Let runs end, then record their ends in the ledger."""
    await env.settle()
    await sweep.fire_due(sweep.runtime_for(env.engine.worker))


async def ledger(env: TestEnv, name: str) -> list[tuple[str, str, str | None]]:
    rows = await env.engine.schedule_firings(name, limit=500)
    return [(f.scheduled_at.strftime("%m-%d %H:%M"), f.status, f.why) for f in reversed(rows)]


async def test_daily_slots_fire_once_each_with_their_own_payload_and_a_ledger(env_factory: Any) -> None:
    app = make_app(
        nightly={"workflow": "sched.quick", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "payload": by_day}
    )
    async with env_factory(app, start=T0) as env:
        await tick(env)  # registers; nothing due yet
        for _ in range(4):
            env.clock.advance("1d")
            await tick(env)
            await tick(env)  # a second tick at the same time fires nothing again
        await settle_firings(env)
        firings = list(reversed(await env.engine.schedule_firings("nightly")))
        # 03:00 Berlin is 02:00 UTC before the spring-forward, 01:00 UTC after it.
        assert [f.scheduled_at.strftime("%m-%d %H:%M") for f in firings] == [
            "03-27 02:00",
            "03-28 02:00",
            "03-29 01:00",
            "03-30 01:00",
        ]
        assert {f.status for f in firings} == {"succeeded"}
        assert {f.source for f in firings} == {"schedule:nightly"}
        started = {(await env.engine.get_run(f.run_id)).source for f in firings if f.run_id}
        assert started == {"schedule:nightly"}  # the runs record where they came from, as the firings do
        assert {f.cause for f in firings} == {"catch-up"}  # each was reached a day late: caught up once
        results = [await env.engine.result(f.run_id) for f in firings if f.run_id]
        assert results == ["2026-03-27 03:00", "2026-03-28 03:00", "2026-03-29 03:00", "2026-03-30 03:00"]
        assert firings[0].idempotency_key == "nightly@2026-03-27T02:00:00+00:00"
        assert firings[0].workflow == "sched.quick" and firings[0].ticket and firings[0].start_status == "started"


class Region(BaseModel):
    region: str = "eu"


async def test_a_schedule_without_a_payload_starts_runs_with_the_models_defaults(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(name="sched.defaults", schedule=lg.Schedule(cron="0 3 * * *"))
    async def defaults(ctx: lg.Context, p: Region) -> str:
        return p.region

    app.schedule("sched.hourly", workflow="sched.defaults", every="1h")
    async with env_factory(app, start=T0) as env:
        await tick(env)
        env.clock.advance("1d")
        await tick(env)
        await settle_firings(env)
        for name in ("sched.defaults", "sched.hourly"):
            (firing, *_) = await env.engine.schedule_firings(name)
            assert firing.status == "succeeded" and firing.run_id is not None
            assert await env.engine.result(firing.run_id) == "eu"
    required = make_app(bare={"workflow": "sched.quick", "cron": "0 3 * * *"})  # a field without a default
    with pytest.raises(lg.DefinitionError, match=r"payload: .*day"):
        required.definitions()


async def test_a_failed_run_fails_its_firing(env_factory: Any) -> None:
    app = make_app(bad={"workflow": "sched.broken", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        env.clock.advance("1h")
        await tick(env)
        await settle_firings(env)
        assert await ledger(env, "bad") == [("03-26 13:00", "failed", "no report for 2026-03-26 13:00")]


async def test_skip_stands_down_while_the_previous_run_is_live(env_factory: Any) -> None:
    app = make_app(s={"workflow": "sched.slow", "every": "10m", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        for _ in range(3):
            env.clock.advance("10m")
            await tick(env)
        rows = await env.engine.schedule_firings("s")
        first = rows[-1]
        assert await ledger(env, "s") == [
            ("03-26 12:10", "started", None),
            ("03-26 12:20", "skipped", "overlap"),
            ("03-26 12:30", "skipped", "overlap"),
        ]
        assert first.run_id is not None
        await env.engine.signal(first.run_id, "go", {})
        await settle_firings(env)
        env.clock.advance("10m")
        await tick(env)
        assert (await ledger(env, "s"))[0] == ("03-26 12:10", "succeeded", None)
        assert (await ledger(env, "s"))[-1] == ("03-26 12:40", "started", None)


async def test_buffer_queues_in_order_up_to_its_limit(env_factory: Any) -> None:
    app = make_app(
        b={"workflow": "sched.slow", "every": "10m", "payload": by_day, "on_overlap": "buffer", "buffer_limit": 2}
    )
    async with env_factory(app, start=T0) as env:
        await tick(env)
        for _ in range(4):
            env.clock.advance("10m")
            await tick(env)
        assert [s for _, s, _ in await ledger(env, "b")] == ["started", "buffered", "buffered", "skipped"]
        assert (await ledger(env, "b"))[-1][2] == "buffer full"
        for expected_next in ("03-26 12:20", "03-26 12:30"):
            live = [f for f in await env.engine.schedule_firings("b") if f.status == "started"]
            assert len(live) == 1 and live[0].run_id is not None
            await env.engine.signal(live[0].run_id, "go", {})
            await settle_firings(env)
            await settle_firings(env)
            started = [f for f in await env.engine.schedule_firings("b") if f.status == "started"]
            assert [f.scheduled_at.strftime("%m-%d %H:%M") for f in started] == [expected_next]
            # The buffered run gets its own slot's payload.
            assert (await env.engine.get_run(started[0].run_id)).payload == {"day": f"2026-{expected_next}"}


async def test_cancel_other_cancels_the_previous_scheduled_run_but_never_another(env_factory: Any) -> None:
    app = make_app(c={"workflow": "sched.slow", "every": "10m", "payload": by_day, "on_overlap": "cancel_other"})
    async with env_factory(app, start=T0) as env:
        manual = await env.engine.start("sched.slow", {"day": "by hand"})
        await tick(env)
        env.clock.advance("10m")
        await tick(env)
        env.clock.advance("10m")
        await tick(env)
        await settle_firings(env)
        assert [s for _, s, _ in await ledger(env, "c")] == ["cancelled", "started"]
        assert manual.run_id is not None
        assert (await env.engine.get_run(manual.run_id)).status == "running"


@pytest.mark.parametrize(
    ("backfill", "started", "missed"),
    [(None, ["03-29 12:00"], 71), ("all", None, 0), ("6h", ["03-29 07:00", "03-29 12:00"], 66)],
)
async def test_backfill_after_three_days_of_downtime(
    env_factory: Any, backfill: Any, started: list[str] | None, missed: int
) -> None:
    app = make_app(
        h={
            "workflow": "sched.quick",
            "cron": "0 * * * *",
            "payload": by_day,
            "backfill": backfill,
            "on_overlap": "buffer",
            "buffer_limit": 100,
        }
    )
    async with env_factory(app, start=T0) as env:
        await tick(env)
        env.clock.advance("3d")  # nothing ran for three days
        env.clock.advance("30s")
        for _ in range(80):  # buffered firings start one after another as each run ends
            await tick(env)
            if not [f for f in await env.engine.schedule_firings("h", 500) if f.status in ("buffered", "started")]:
                break
        await settle_firings(env)
        rows = list(reversed(await env.engine.schedule_firings("h", 500)))
        slots = [f.scheduled_at.strftime("%m-%d %H:%M") for f in rows]
        assert slots == sorted(slots) and len(set(slots)) == len(slots)
        if started is None:
            assert len(rows) == 72 and slots[0] == "03-26 13:00" and slots[-1] == "03-29 12:00"
        elif backfill is None:
            assert slots == started
        else:
            assert slots == [f"03-29 {h:02d}:00" for h in range(7, 13)]
        assert {f.status for f in rows} == {"succeeded"}
        runs = [await env.engine.get_run(f.run_id) for f in rows if f.run_id]
        assert [r.payload["day"][5:] for r in runs] == slots  # each computed against its own slot
        (info,) = await env.engine.list_schedules()
        assert info.missed == missed


async def test_pause_is_durable_and_unpause_does_not_catch_up(env_factory: Any) -> None:
    app = make_app(p={"workflow": "sched.quick", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        await env.engine.pause_schedule("p", reason="maintenance")
        (info,) = await env.engine.list_schedules()
        assert info.paused and info.paused_reason == "maintenance" and info.next_at is None
        env.clock.advance("3h")
        await tick(env)
        assert await ledger(env, "p") == []
        await env.engine.unpause_schedule("p")
        await tick(env)
        assert await ledger(env, "p") == []  # slots of the pause are not fired late
        env.clock.advance("1h")
        await tick(env)
        await settle_firings(env)
        assert await ledger(env, "p") == [("03-26 16:00", "succeeded", None)]


async def test_run_now_is_a_manual_firing_outside_the_overlap_policy(env_factory: Any) -> None:
    app = make_app(m={"workflow": "sched.slow", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        first = await env.engine.run_schedule("m")
        second = await env.engine.run_schedule("m")
        assert first.status == second.status == "started" and first.run_id != second.run_id
        rows = await env.engine.schedule_firings("m")
        assert {f.cause for f in rows} == {"manual"} and {f.source for f in rows} == {"schedule:m+manual"}
        assert (await env.engine.get_run(first.run_id or "")).payload == {"day": "2026-03-26 12:00"}
        with pytest.raises(lg.InvalidArgument, match="unknown schedule 'nope'"):
            await env.engine.run_schedule("nope")


async def test_each_slot_is_claimed_once_whoever_reaches_it(env_factory: Any) -> None:
    app = make_app(x={"workflow": "sched.quick", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        rt = sweep.runtime_for(env.engine.worker)
        sched = app.schedules()["x"]
        slot = sched.next_after(T0)
        replicas = [ScheduleRuntime(rt.runtime, f"w{i}") for i in range(5)]
        fired = await asyncio.gather(*(fire(r, sched, slot, "cron") for r in replicas))
        assert sorted(f.status for f in fired) == ["started", "taken", "taken", "taken", "taken"]


async def test_a_claim_left_unstarted_by_a_crashed_claimant_is_taken_over(env_factory: Any) -> None:
    app = make_app(x={"workflow": "sched.quick", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        slot = app.schedules()["x"].next_after(T0)
        claim = {
            "schedule": "x",
            "scheduled_at": slot,
            "manual": 0,
            "cause": "cron",
            "workflow": "sched.quick",
            "source": "schedule:x",
            "identity": f"sched.quick\x1fx@{datetime.fromtimestamp(slot, UTC).isoformat()}",
            "idempotency_key": f"x@{datetime.fromtimestamp(slot, UTC).isoformat()}",
            "owner": "dead-worker",
            "lease_until": slot + 5,
            "now": slot,
        }
        assert await env.engine.store.write(sched_ops.claim_firing, claim) is not None  # then it died
        env.clock.set(slot + 1)
        await tick(env)
        assert await ledger(env, "x") == [("03-26 13:00", "claimed", None)]  # its lease still holds
        env.clock.advance("60s")
        await tick(env)
        await settle_firings(env)
        assert await ledger(env, "x") == [("03-26 13:00", "succeeded", None)]


async def test_a_schedule_removed_from_the_code_is_shown_orphaned_and_stops(env_factory: Any, store_url: str) -> None:
    old = make_app(gone={"workflow": "sched.quick", "every": "1h", "payload": by_day})
    async with TestEnv(old, store=store_url, start=T0) as env:
        await tick(env)
    new = make_app(kept={"workflow": "sched.quick", "every": "1h", "payload": by_day})
    async with TestEnv(new, store=store_url, start=T0) as env:
        await tick(env)
        env.clock.advance("2h")
        await tick(env)
        infos = {i.name: i for i in await env.engine.list_schedules()}
        assert infos["gone"].orphaned and infos["gone"].next_at is None
        assert not infos["kept"].orphaned and infos["kept"].next_at is not None
        assert await ledger(env, "gone") == []


async def test_backfill_command_lists_then_fires_a_range_leaving_fired_slots_alone(env_factory: Any) -> None:
    app = make_app(b={"workflow": "sched.slow", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        env.clock.advance("1h")
        await tick(env)  # 13:00 fires on time
        (on_time,) = await env.engine.schedule_firings("b")
        await env.engine.signal(on_time.run_id or "", "go", {})
        await settle_firings(env)
        start = datetime(2026, 3, 26, 10, 0, tzinfo=UTC)
        end = datetime(2026, 3, 26, 13, 0, tzinfo=UTC)
        dry = await env.engine.backfill_schedule("b", start, end)
        assert [(s.scheduled_at.hour, s.outcome) for s in dry] == [
            (10, "would fire"),
            (11, "would fire"),
            (12, "would fire"),
            (13, "already fired"),
        ]
        assert len(await env.engine.schedule_firings("b")) == 1
        done = await env.engine.backfill_schedule("b", start, end, commit=True)
        assert [s.outcome for s in done] == ["started", "skipped", "skipped", "already fired"]  # overlap: skip
        await settle_firings(env)
        causes = {f.scheduled_at.hour: f.cause for f in await env.engine.schedule_firings("b")}
        assert causes == {10: "backfill", 11: "backfill", 12: "backfill", 13: "cron"}


async def test_finished_firings_older_than_the_retention_are_forgotten(env_factory: Any) -> None:
    app = make_app(r={"workflow": "sched.slow", "every": "1h", "payload": by_day})
    async with env_factory(app, start=T0) as env:
        await tick(env)
        for _ in range(3):
            env.clock.advance("1h")
            await tick(env)  # 13:00 starts and stays live; 14:00 and 15:00 are skipped
        rt = sweep.runtime_for(env.engine.worker)
        assert await sweep.forget_firings(rt, T0 + 2 * 3600 + 1) == 1  # 14:00: finished and old enough
        assert [s for _, s, _ in await ledger(env, "r")] == ["started", "skipped"]  # a live one stays


async def test_the_test_env_fires_schedules_as_its_clock_moves(store_url: str) -> None:
    app = make_app(n={"workflow": "sched.quick", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "payload": by_day})
    async with TestEnv(app, store=store_url, start=T0) as env:
        for _ in range(3):
            await env.advance("1d")
            await env.fire_schedules()
        firings = await env.engine.schedule_firings("n")
        assert [f.status for f in firings] == ["succeeded"] * 3


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"cron": "0 0 30 2 *"}, "cron: never comes due"),  # February 30th: valid syntax, no date
        ({"cron": "0 0 31 4,6,9,11 *"}, "cron: never comes due"),
        ({"every": 10**12}, "every: must be at most"),
        ({"every": "99999999999d"}, "every: must be at most"),
    ],
)
def test_a_schedule_that_never_comes_due_is_refused_at_boot(options: dict[str, Any], named: str) -> None:
    app = lg.App()

    @app.workflow(name="fuzzed")
    async def body(ctx: lg.Context, p: Go) -> None:
        return None

    app.schedule("fuzzed-schedule", workflow="fuzzed", payload={}, **options)
    with pytest.raises(lg.DefinitionError, match=named):
        app.definitions()
