"""cancel_on: one event cancels correlated live runs and parked starts, never later ones (both stores)."""

from __future__ import annotations

import asyncio
from typing import Any

import lockgate as lg
from lockgate.events import EventDef
from lockgate.store import events as event_ops
from lockgate.sweeps.cancel_on import CancelOnSweep, sweep_cancel_on
from lockgate.testing import FakeClock

from .apps.events import app, row_deleted
from .apps.gate import parked
from .apps.gate_probes import ledger_rows


async def status_of(engine: lg.Client, run_id: str) -> str:
    return (await engine.get_run(run_id)).status


async def until(probe: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await probe():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.02)


async def test_one_event_cancels_sleeping_waiting_and_parked_work(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        sleeping = await engine.start("ev.narrate", {"row_id": "r1"})
        other = await engine.start("ev.narrate", {"row_id": "r2"})
        waiting = await engine.start("ev.approve", {"row_id": "r1"})
        debounced = await engine.start("ev.debounced", {"row_id": "r1", "n": 1})
        first = await engine.start("ev.limited", {"row_id": "r1"})
        queued = await engine.start("ev.limited", {"row_id": "r1", "n": 2})
        await env.settle()
        assert (debounced.status, queued.status) == ("queued", "queued")
        run = await engine.get_run(waiting.run_id)
        assert run.waiting_on == "signal"

        await engine.publish(row_deleted, {"row_id": "r1"}, {"row_id": "r1"})

        async def done() -> bool:
            return await status_of(engine, first.run_id) == "cancelled" and await parked(engine, "ev.limited") == 0

        await until(done)
        for handle in (sleeping, waiting, first):
            run = await engine.get_run(handle.run_id)
            assert (run.status, run.error_message) == ("cancelled", "cancel-on:row.deleted")
        assert await status_of(engine, other.run_id) == "running"
        assert await parked(engine, "ev.debounced") == 0
        assert await engine.list_runs(workflow="ev.debounced") == []
        for handle in (debounced, queued):
            rows = [r for r in await ledger_rows(engine, handle.ticket) if r["outcome"] == "cancelled"]
            assert [(r["kind"], r["reason"]) for r in rows] == [("drain", "cancel-on:row.deleted")]
        rows = [r for r in await ledger_rows(engine, sleeping.ticket) if r["outcome"] == "cancelled"]
        assert [(r["kind"], r["control"], r["reason"]) for r in rows] == [("run", "cancel-on", "cancel-on:row.deleted")]
        events = [e.type for e in await engine.events(sleeping.run_id)]
        assert events[-1] == "run-cancelled"

        async def reported() -> bool:
            return bool(await engine.list_runs(workflow="ev.failed"))

        await env.advance("1s")
        await until(reported)
        report = (await engine.list_runs(workflow="ev.failed"))[0]
        assert report.payload["reason"] == "cancel-on" and report.payload["run_id"] == sleeping.run_id


async def sweep(client: lg.Client) -> Any:
    stopped: list[str] = []
    deps = CancelOnSweep(client.store, client.clock, client.app, lambda ids, _reason: stopped.extend(ids))
    return await sweep_cancel_on(deps)


async def test_a_sweep_catching_up_cancels_only_runs_older_than_the_event(store_url: str) -> None:
    clock = FakeClock()
    async with lg.Client(app, store_url, clock=clock) as client:
        before = await client.start("ev.narrate", {"row_id": "r1"})
        clock.advance("10s")
        await client.publish(row_deleted, {"row_id": "r1"}, {"row_id": "r1"})
        clock.advance("10s")
        after = await client.start("ev.narrate", {"row_id": "r1"})  # the sweep was down meanwhile
        done = await sweep(client)
        assert (done.events, done.runs) == (1, [before.run_id])
        assert await status_of(client, before.run_id) == "cancelled"
        assert await status_of(client, after.run_id) == "running"
        assert (await sweep(client)).events == 0  # the watermark moved past it


async def test_within_only_cancels_runs_started_that_long_before(store_url: str) -> None:
    clock = FakeClock()
    async with lg.Client(app, store_url, clock=clock) as client:
        old = await client.start("ev.recent_only", {"row_id": "a"})
        clock.advance("2h")
        recent = await client.start("ev.recent_only", {"row_id": "b"})
        clock.advance("1m")
        await client.publish(row_deleted, {"row_id": "zzz"}, {"row_id": "zzz"})
        done = await sweep(client)
        assert done.runs == [recent.run_id]
        assert (await client.get_run(recent.run_id)).error_message == "row gone"
        assert await status_of(client, old.run_id) == "running"


async def test_an_undecodable_event_is_reported_and_cancels_nothing(store_url: str) -> None:
    clock = FakeClock()
    async with lg.Client(app, store_url, clock=clock) as client:
        victim = await client.start("ev.narrate", {"row_id": "r1"})
        clock.advance("1s")
        row = {
            "id": "evt_bad",
            "name": row_deleted.name,
            "key": '{"row_id": "r1"}',
            "data": '{"unexpected": true}',
            "source": "api",
            "trace_id": None,
            "subject": None,
            "occurred_at": clock.now(),
        }
        await client.store.write(event_ops.publish, row, [])
        done = await sweep(client)
        assert list(done.problems) == ["evt_bad"] and done.runs == []
        assert await status_of(client, victim.run_id) == "running"
        stored = await client.get_event("evt_bad")
        assert stored.problem is not None and "does not decode" in stored.problem


def test_cancel_on_reason_defaults_to_the_event_name() -> None:
    entry = lg.CancelOn(event=EventDef("x.y"), match=lambda ev, p: True)
    assert entry.reason_text == "cancel-on:x.y"


async def test_the_worked_example_of_the_docs(env_factory: Any) -> None:
    async with env_factory(app) as env:
        engine = env.engine
        first = await engine.start("ev.tour", {"row_id": "r1", "n": 1})
        await env.advance("16m")  # the debounce admits the first edit; its run sleeps a week

        async def asleep() -> bool:
            found = await engine.list_runs(workflow="ev.tour")
            return len(found) == 1 and found[0].waiting_on == "timer"

        await until(asleep)
        (sleeping,) = await engine.list_runs(workflow="ev.tour")
        second = await engine.start("ev.tour", {"row_id": "r1", "n": 2})
        assert second.status == "queued"

        await engine.publish(row_deleted, {"row_id": "r1"}, {"row_id": "r1"})

        async def gone() -> bool:
            return await status_of(engine, sleeping.id) == "cancelled" and await parked(engine, "ev.tour") == 0

        await until(gone)
        assert (await engine.get_run(sleeping.id)).error_message == "row deleted"
        assert (await engine.trace(second.ticket)).state == "cancelled"
        await env.advance("2h")
        assert [r.id for r in await engine.list_runs(workflow="ev.tour")] == [sleeping.id]

        async def reported() -> bool:  # the failure handlers' runs are started by the drainer, not at once
            return len(await engine.list_runs(workflow="ev.failed")) >= 1

        await until(reported)
        await env.advance("1s")
        await env.settle()
        reports = await engine.list_runs(workflow="ev.failed")
        # one report, the cancelled run's: the discarded duplicate never ran (docs/events.md)
        assert [(r.payload["reason"], r.payload["run_id"]) for r in reports] == [("cancel-on", sleeping.id)]
        assert first.ticket != second.ticket
