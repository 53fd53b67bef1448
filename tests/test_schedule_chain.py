"""A buffered schedule's next firing starts as its run ends (``engine/schedule_chain.py``), in the
process where the run ended, without waiting for the sweep's next tick; once per slot across
engines racing, and by an index-driven claim."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

import lockgate as lg
from lockgate.engine.firing import ScheduleRuntime
from lockgate.engine.firing_settle import settle
from lockgate.engine.schedule_book import ScheduleBook
from lockgate.engine.schedule_chain import start_next
from lockgate.store.sql_files import load_queries
from lockgate.sweeps import schedules as sweep
from lockgate.testing import TestEnv

# The schedules' payloads, and the tests tick the schedules themselves (no background sweep: an autouse fixture).
from .test_schedules import Day, Go, no_background_sweep  # noqa: F401

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="slow")
    async def slow(ctx: lg.Context, p: Day) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.day

    return app


async def ledger(env: TestEnv, name: str) -> list[tuple[str, str]]:
    rows = await env.engine.schedule_firings(name, limit=100)
    return [(f.scheduled_at.strftime("%H:%M"), f.status) for f in reversed(rows)]


async def until(probe: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(0.01)


async def backlog(env: TestEnv, names: list[str], **options: Any) -> None:
    """``names`` every 10 minutes, buffered: 12:10 started, then 12:20, 12:30 and 12:40 buffered behind it."""
    for name in names:
        await env.engine.schedules.create(
            name,
            workflow="slow",
            every="10m",
            payload={"day": name},
            on_overlap="buffer",
            buffer_limit=9,
            backfill="all",
            **options,
        )
    rt = sweep.runtime_for(env.engine.worker)
    for at in (T0 + 601, T0 + 601 + 35 * 60):
        env.clock.set(at)
        await sweep.fire_due(rt)
        await env.settle()


async def live_run(env: TestEnv, name: str) -> str:
    """The run of the schedule's newest started firing (the older ones' runs ended)."""
    live = next(f for f in await env.engine.schedule_firings(name) if f.status == "started")
    assert live.run_id is not None
    return live.run_id


async def test_a_run_that_ends_starts_its_schedules_next_buffered_firing_without_a_tick(store_url: str) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        await backlog(env, ["digest:4711"])
        assert await ledger(env, "digest:4711") == [
            ("12:10", "started"),
            ("12:20", "buffered"),
            ("12:30", "buffered"),
            ("12:40", "buffered"),
        ]
        for n, slot in enumerate(("12:20", "12:30"), start=1):
            await env.engine.signal(await live_run(env, "digest:4711"), "go", {})

            async def next_started(slot: str = slot) -> bool:
                return (slot, "started") in await ledger(env, "digest:4711")

            # No tick: the clock stands still and the sweep is off; the end of the run started the next firing.
            await until(next_started, f"{slot} started")
            # One at a time: the slots behind it still wait (the ended run's firing is recorded by the sweep).
            assert [s for _, s in await ledger(env, "digest:4711")][n:] == ["started"] + ["buffered"] * (3 - n)
            started = (await env.engine.schedule_firings("digest:4711"))[3 - n]
            assert started.status == "started" and started.run_id is not None
            run = await env.engine.get_run(started.run_id)
            assert run.payload == {"day": "digest:4711"} and run.source == "schedule:digest:4711"
        await env.settle()
        await settle(sweep.runtime_for(env.engine.worker))  # the sweep records the ends and finds nothing to start
        assert await ledger(env, "digest:4711") == [
            ("12:10", "succeeded"),
            ("12:20", "succeeded"),
            ("12:30", "started"),
            ("12:40", "buffered"),
        ]


async def test_engines_racing_to_start_the_next_firings_start_each_schedules_oldest_once(store_url: str) -> None:
    """Two engines' chains and the sweep's settle reach the same schedules at once: each schedule starts its
    oldest buffered firing, once, and nothing behind it."""
    names = [f"t:{i:02d}" for i in range(12)]
    async with (
        TestEnv(make_app(), store=store_url, start=T0) as env,
        TestEnv(make_app(), store=store_url, start=T0) as other,
    ):
        await backlog(env, names)
        other.clock.set(env.clock.now())
        rts = [ScheduleRuntime(e.engine.runtime, e.engine.worker_id) for e in (env, other)]
        for slot in ("12:20", "12:30"):
            for name in names:  # a cancel ends the run outside its body: no chain starts the next firing
                await env.engine.cancel(await live_run(env, name), "next")
            await asyncio.gather(
                start_next(rts[0], ScheduleBook({}), names),
                start_next(rts[1], ScheduleBook({}), names),
                start_next(rts[1], ScheduleBook({}), names[::-1]),
                settle(rts[0]),
            )
            await settle(rts[1])  # records the cancelled runs' ends; starts nothing more
            for name in names:
                firings = await env.engine.schedule_firings(name)
                assert [f.scheduled_at.strftime("%H:%M") for f in firings if f.status == "started"] == [slot], name
                runs = [f.run_id for f in firings if f.run_id is not None]
                assert len(runs) == len(set(runs)), name
        runs = await env.engine.inspector.runs(workflow="slow", limit=100)
        assert len(runs) == 3 * len(names)  # 12:10, 12:20 and 12:30 of each, once each
        assert len({r.idempotency_key for r in runs}) == len(runs)


async def test_a_skip_schedules_run_end_writes_nothing(store_url: str) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        await env.engine.schedules.create("s", workflow="slow", every="10m", payload={"day": "s"}, on_overlap="skip")
        env.clock.set(T0 + 601)
        await sweep.fire_due(sweep.runtime_for(env.engine.worker))
        await env.settle()
        rt = sweep.runtime_for(env.engine.worker)
        assert await start_next(rt, ScheduleBook({}), ["s", "unknown"]) == []


async def test_the_next_firing_claim_is_index_driven_among_60000_firings(store_url: str) -> None:
    """The claim reads each named schedule's oldest buffered firing through the live firings' partial
    index, and updates those rows by their key: never the whole ledger."""
    async with TestEnv(lg.App(), store=store_url, start=T0):
        pass  # migrated
    fill = (
        "INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, manual, cause, workflow, source, identity, "
        "idempotency_key, status, claimed_at) SELECT 'idle:' || (i % 20000), i, 0, 'cron', 'digest', 's', 'i' || i, "
        "'k' || i, CASE WHEN i % 50 = 0 THEN 'buffered' ELSE 'succeeded' END, 0 "
    )
    names = json.dumps([f"idle:{i}" for i in range(1, 400, 3)])
    if store_url.startswith("sqlite"):
        query = load_queries("sqlite")["firings_take_buffered"]
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as lite:
            lite.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60000) " + fill + "FROM n"
            )
            lite.execute("ANALYZE")
            params = {"names": names, "owner": "w", "lease_until": T0}
            plan = " ".join(str(r[3]) for r in lite.execute("EXPLAIN QUERY PLAN " + query, params))
        assert "USING INDEX lockgate_schedule_firings_live" in plan, plan
        assert "SCAN lockgate_schedule_firings" not in plan.replace("SCAN lockgate_schedule_firings USING", ""), plan
        return
    query = load_queries("postgres")["firings_take_buffered"]
    async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as pg:
        await pg.execute(fill + "FROM generate_series(1, 60000) AS i")
        await pg.execute("ANALYZE lockgate_schedule_firings")
        params = {"names": names, "owner": "w", "lease_until": T0}
        rows = await (await pg.execute("EXPLAIN " + query, params)).fetchall()
        plan = " ".join(r[0] for r in rows)
    # The firings are partitioned by slot (docs/history.md): each partition's live index (the first partition's
    # here, where the slots are), and its empty default partition read as it is.
    assert "lockgate_schedule_firings_p0_live" in plan and "_p0_pkey" in plan, plan
    assert "Seq Scan" not in plan.replace("Seq Scan on lockgate_schedule_firings_kept", ""), plan
