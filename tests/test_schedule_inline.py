"""A firing of a workflow with no gate control starts in the write that claims it (``engine/firing_inline``):
the sweep's batch claim and a run end's take of a buffered firing each insert the runs and their ledger rows
and move the firings to ``started`` in one commit. Anything else still starts through the gate after it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

import lockgate as lg
from lockgate.engine.schedule_book import ScheduleBook
from lockgate.engine.schedule_chain import start_next
from lockgate.store import Store
from lockgate.sweeps import schedules as sweep
from lockgate.testing import TestEnv

# The schedules' payloads, and the tests tick the schedules themselves (no background sweep: an autouse fixture).
from .test_schedules import Day, Go, no_background_sweep  # noqa: F401

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()

AFTER_A_CLAIM = {"_admit_bare", "offer", "move_firings"}
"""The writes that start a claimed firing through the gate and record its answer."""


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Day) -> str:
        return p.day

    @app.workflow(name="slow")
    async def slow(ctx: lg.Context, p: Day) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.day

    @app.workflow(name="pooled", concurrency=lg.Concurrency(limit=1))
    async def pooled(ctx: lg.Context, p: Day) -> str:
        return p.day

    return app


@contextmanager
def writes_of(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the writes ``store`` is asked for meanwhile (each its own commit, or a share of a group's)."""
    seen: list[str] = []
    real = store.write

    async def counted(op: Any, /, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(op, "__qualname__", repr(op)))
        return await real(op, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(store, "write", counted)
        yield seen


async def test_a_ticks_slots_of_a_bare_workflow_start_in_its_claim_write(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        names = [f"t:{i}" for i in range(6)]
        for name in names:
            await env.engine.schedules.create(name, workflow="digest", every="1m", payload={"day": name})
        rt = sweep.runtime_for(env.engine.worker)
        env.clock.set(T0 + 60.2)
        with writes_of(env.engine.store, monkeypatch) as writes:
            tick = await sweep.fire_due(rt)
        # One commit for the six: no admission, no move after the claim (the runs' own claims aside).
        assert writes.count("fire_many.<locals>.claim") == 1 and not set(writes) & AFTER_A_CLAIM, writes
        assert sorted(f.schedule for f in tick.fired) == names
        assert all(f.status == "started" and f.run_id and f.ticket for f in tick.fired), tick.fired
        for f in tick.fired:
            (firing,) = await env.engine.schedule_firings(f.schedule)
            assert (firing.status, firing.run_id) == ("started", f.run_id)
            run = await env.engine.inspector.run(f.run_id or "")
            assert run.source == f"schedule:{f.schedule}"
            entries = await env.engine.inspector.ledger(ticket=f.ticket)
            assert [(e.outcome, e.run_id, e.source) for e in entries] == [("admitted", f.run_id, run.source)]
        await env.settle()
        await sweep.fire_due(rt)  # records the runs' ends
        for name in names:
            assert [f.status for f in await env.engine.schedule_firings(name)] == ["succeeded"]


async def test_a_gated_or_paused_workflows_slots_start_through_the_gate(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        await env.engine.schedules.create("gated", workflow="pooled", every="1m", payload={"day": "g"})
        await env.engine.schedules.create("held", workflow="digest", every="1m", payload={"day": "h"})
        await env.engine.pause("digest")
        rt = sweep.runtime_for(env.engine.worker)
        env.clock.set(T0 + 60.2)
        with writes_of(env.engine.store, monkeypatch) as writes:
            tick = await sweep.fire_due(rt)
        assert {"offer", "move_firings"} <= set(writes), writes  # the gate's answer, recorded after the claim
        fired = {f.schedule: f for f in tick.fired}
        assert fired["gated"].status == "started" and fired["gated"].run_id
        assert fired["held"].status == "started" and fired["held"].run_id is None  # parked while paused
        await env.engine.unpause("digest")
        deadline = time.monotonic() + 10
        while (held := (await env.engine.schedule_firings("held"))[0]).run_id is None:  # the drainer admits it
            assert time.monotonic() < deadline, held
            await env.settle()
            await sweep.fire_due(rt)
            await asyncio.sleep(0.01)
        runs = await env.engine.inspector.runs(workflow="digest", limit=10)
        assert [r.id for r in runs] == [held.run_id]


async def test_a_run_end_starts_the_next_buffered_firing_in_one_write(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        names = ["a", "b", "c"]
        for name in names:
            await env.engine.schedules.create(
                name,
                workflow="slow",
                every="10m",
                payload={"day": name},
                on_overlap="buffer",
                buffer_limit=9,
                backfill="all",
            )
        rt = sweep.runtime_for(env.engine.worker)
        for at in (T0 + 601, T0 + 601 + 25 * 60):  # 12:10 started, 12:20 and 12:30 buffered behind it
            env.clock.set(at)
            await sweep.fire_due(rt)
            await env.settle()
        for name in names:  # a cancel ends the run outside its body: no chain starts the next firing
            (live,) = [f for f in await env.engine.schedule_firings(name) if f.status == "started"]
            await env.engine.cancel(live.run_id or "", "next")
        with writes_of(env.engine.store, monkeypatch) as writes:
            fired = await start_next(rt, ScheduleBook({}), names)
        assert writes.count("start_buffered.<locals>.take") == 1 and not set(writes) & AFTER_A_CLAIM, writes
        assert sorted((f.schedule, f.status) for f in fired) == [(n, "started") for n in names]
        for name in names:
            firings = {f.scheduled_at.strftime("%H:%M"): f for f in await env.engine.schedule_firings(name)}
            assert firings["12:20"].status == "started" and firings["12:20"].run_id is not None
            assert firings["12:30"].status == "buffered"
            run = await env.engine.inspector.run(firings["12:20"].run_id or "")
            assert run.status in ("pending", "running")
