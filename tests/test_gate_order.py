"""The order parked starts are admitted in: priority (higher first), ties by arrival, ``fair_by`` turns."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate import parked, wait_runs
from .apps.waits import eventually


class Task(BaseModel):
    name: str
    tenant: str = "t"
    priority: int = 0
    hold: bool = False


class Go(BaseModel):
    ok: bool = True


def make_app(order: list[str]) -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Task) -> str:
        if p.hold:
            await ctx.wait_for_signal("go", Go)
        await ctx.step("record", order.append, p.name)
        return p.name

    one_at_a_time = lg.Concurrency(limit=1)
    app.workflow(name="work.priority", concurrency=one_at_a_time, priority=lambda p: p.priority)(body)
    app.workflow(
        name="work.fair", concurrency=one_at_a_time, priority=lambda p: p.priority, fair_by=lambda p: p.tenant
    )(body)
    app.workflow(
        name="work.fair.keyed",
        concurrency=lg.Concurrency(limit=1, pool="provider"),
        fair_by=lambda p: p.tenant,
    )(body)
    return app


async def _hold_the_slot(env: TestEnv, workflow: str, tenant: str = "t") -> str:
    blocker = await env.engine.start(workflow, {"name": "blocker", "tenant": tenant, "hold": True})
    assert blocker.status == "started" and blocker.run_id is not None
    await env.settle()
    return blocker.run_id


async def _release(env: TestEnv, run_id: str, order: list[str], expected: int) -> list[str]:
    await env.engine.signal(run_id, "go", {})
    await eventually(lambda: len(order) == expected, what=f"{expected} admissions")
    return order


async def test_higher_priority_first_ties_by_arrival(env_factory: Callable[..., TestEnv]) -> None:
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        blocker = await _hold_the_slot(env, "work.priority")
        for name, priority in [("a", 0), ("b", 5), ("c", 1), ("d", 5), ("e", 0), ("f", -3), ("g", 1)]:
            handle = await env.engine.start("work.priority", {"name": name, "priority": priority})
            assert handle.status == "queued" and handle.deferral is not None
            assert handle.deferral.mode == "concurrency"
        assert await parked(env.engine, "work.priority") == 7
        assert await _release(env, blocker, order, 8) == ["blocker", "b", "d", "c", "g", "a", "e", "f"]
        await wait_runs(env.engine, "work.priority", 8)


async def test_a_start_that_finds_room_is_not_ordered(env_factory: Callable[..., TestEnv]) -> None:
    """Priority orders the queue only: with a free slot, a low-priority start runs at once."""
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        low = await env.engine.start("work.priority", {"name": "low", "priority": -100})
        assert low.status == "started"
        await wait_runs(env.engine, "work.priority")
        assert order == ["low"]


async def test_fair_by_takes_turns_across_tenants(env_factory: Callable[..., TestEnv]) -> None:
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        blocker = await _hold_the_slot(env, "work.fair")
        for n in range(1, 6):
            await env.engine.start("work.fair", {"name": f"A{n}", "tenant": "A"})
        for n in range(1, 3):
            await env.engine.start("work.fair", {"name": f"B{n}", "tenant": "B"})
        admitted = await _release(env, blocker, order, 8)
        assert admitted == ["blocker", "A1", "B1", "A2", "B2", "A3", "A4", "A5"]
        assert [name[0] for name in admitted[1:]] == list("ABABAAA")


async def test_priority_outranks_fairness(env_factory: Callable[..., TestEnv]) -> None:
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        blocker = await _hold_the_slot(env, "work.fair")
        await env.engine.start("work.fair", {"name": "A1", "tenant": "A"})
        await env.engine.start("work.fair", {"name": "A2", "tenant": "A"})
        await env.engine.start("work.fair", {"name": "B1", "tenant": "B"})
        await env.engine.start("work.fair", {"name": "A3", "tenant": "A", "priority": 9})
        await env.engine.start("work.fair", {"name": "A4", "tenant": "A", "priority": 9})
        admitted = await _release(env, blocker, order, 6)
        # A's two urgent runs go first; they were A's turns, so B is next among the rest
        assert admitted == ["blocker", "A3", "A4", "B1", "A1", "A2"]


async def test_fair_by_across_a_pool(env_factory: Callable[..., TestEnv]) -> None:
    """One tenant spreading its work over the whole pool does not starve the other."""
    order: list[str] = []
    async with env_factory(make_app(order)) as env:
        blocker = await _hold_the_slot(env, "work.fair.keyed", tenant="A")
        for n in range(1, 4):
            await env.engine.start("work.fair.keyed", {"name": f"A{n}", "tenant": "A"})
        await env.engine.start("work.fair.keyed", {"name": "B1", "tenant": "B"})
        admitted = await _release(env, blocker, order, 5)
        assert admitted == ["blocker", "A1", "B1", "A2", "A3"]


async def test_a_tenant_arriving_late_starts_level(env_factory: Callable[..., TestEnv]) -> None:
    """A late group neither gets a burst of turns to catch up nor waits behind the whole backlog."""
    async with env_factory(make_app([])) as env:
        engine = env.engine

        async def finish_the_running_one() -> str:
            [running] = await wait_runs(engine, "work.fair", status="running")
            await engine.signal(running.id, "go", {})
            await engine.result(running.id, timeout=10)
            return str(running.payload["name"])

        await _hold_the_slot(env, "work.fair")
        for n in range(1, 5):
            await engine.start("work.fair", {"name": f"A{n}", "tenant": "A", "hold": True})
        admitted = [await finish_the_running_one() for _ in range(2)]  # the blocker, then A1
        [a2] = await wait_runs(engine, "work.fair", status="running")
        assert a2.payload["name"] == "A2"  # admitted before B arrives
        for n in range(1, 4):
            await engine.start("work.fair", {"name": f"B{n}", "tenant": "B", "hold": True})
        admitted += [await finish_the_running_one() for _ in range(6)]
        # A has had two turns (A1, A2) when B arrives: B starts level with A, not two turns ahead of it
        assert admitted == ["blocker", "A1", "A2", "A3", "B1", "A4", "B2", "B3"]
