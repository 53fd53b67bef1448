"""Children offered to their workflow's gate, and durable queues built on them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.errors import ChildNotStarted, DefinitionError, InvalidArgument
from lockgate.testing import replay_check

from .apps.waits import eventually


class Job(BaseModel):
    key: str
    n: int = 0


class Go(BaseModel):
    ok: bool = True


class Jobs(BaseModel):
    items: list[Job]


class Many(BaseModel):
    keys: list[str]
    gate: bool | None = True
    reverse: bool = False  # wait for the children in the opposite order


def make_app() -> lg.App:
    app = lg.App()
    lane = app.queue("lane", concurrency=1)

    async def held(ctx: lg.Context, p: Job) -> str:
        await ctx.wait_for_signal("go", Go)
        return f"{p.key}:{p.n}"

    app.workflow(name="limited", concurrency=lg.Concurrency(limit=1))(held)
    app.workflow(name="dropping", rate_limit=lg.RateLimit(limit=1, period="1h"))(held)
    app.workflow(name="folding", debounce=lg.Debounce(key=lambda p: p.key, period="1h"))(held)
    app.workflow(name="ungated", concurrency=lg.Concurrency(limit=1), gate_as_child=False)(held)
    @app.workflow(name="batched", batch=lg.Batch(item=Job, max_size=2, timeout="1h"))
    async def batched(ctx: lg.Context, p: Jobs) -> str:
        return "+".join(j.key for j in p.items)

    app.workflow(name="lane.a", queue=lane)(held)
    app.workflow(name="lane.b", queue=lane)(held)

    @app.workflow(name="parent")
    async def parent(ctx: lg.Context, p: Many) -> list[str]:
        handles = [
            await ctx.start_child(key.split("/")[0], {"key": key, "n": i}, gate=p.gate) for i, key in enumerate(p.keys)
        ]
        out = [f"{h.status}" for h in handles]
        for h in reversed(handles) if p.reverse else handles:
            try:
                out.append(await ctx.wait_child(h))
            except ChildNotStarted as exc:
                out.append(f"not started: {exc.outcome}")
        return out

    @app.workflow(name="producer")
    async def producer(ctx: lg.Context, p: Many) -> list[str]:
        handles = [await ctx.enqueue(lane, key.split("/")[0], {"key": key}) for key in p.keys]
        return [str(await ctx.wait_child(h)) for h in handles]

    @app.workflow(name="wrong-lane")
    async def wrong_lane(ctx: lg.Context, p: Many) -> str:
        await ctx.enqueue("other", "lane.a", {"key": "x"})
        return "unreachable"

    return app


async def _children(engine: lg.Engine, parent_id: str, count: int) -> list[lg.RunInfo]:
    async def found() -> list[lg.RunInfo] | None:
        runs = await engine.list_runs(limit=100)
        mine = [r for r in runs if r.source == f"child:{parent_id}" or r.parent_id == parent_id]
        return mine if len(mine) >= count else None

    return await eventually(found, what=f"{count} child run(s) of {parent_id}")


async def _waiting(engine: lg.Engine, run_id: str) -> bool:
    run = await engine.get_run(run_id)
    return run.status == "running" and run.waiting_on == "signal"


async def test_a_gated_child_takes_a_concurrency_slot(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        handle = await engine.start("parent", {"keys": ["limited/1", "limited/2"]})
        assert handle.run_id is not None
        (first,) = await _children(engine, handle.run_id, 1)
        await eventually(lambda: _waiting(engine, first.id), what="first child waits")
        flows = await engine.flow(workflow="limited")
        assert sum(f.queued for f in flows) == 1  # the second waits at the gate, not as a run
        await engine.signal(first.id, "go", {})
        runs = await _children(engine, handle.run_id, 2)
        second = next(r for r in runs if r.id != first.id)
        await eventually(lambda: _waiting(engine, second.id), what="second child admitted")
        await engine.signal(second.id, "go", {})
        out = await engine.result(handle.run_id, timeout=30)
        assert out == ["started", "queued", "limited/1:0", "limited/2:1"]
        assert (await engine.get_run(second.id)).parent_id == handle.run_id


async def test_a_dropped_or_collapsed_child_gets_a_typed_answer(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        dropped = await engine.start("parent", {"keys": ["dropping/a", "dropping/b"]})
        (child,) = await _children(engine, str(dropped.run_id), 1)
        await eventually(lambda: _waiting(engine, child.id), what="first child waits")
        await engine.signal(child.id, "go", {})
        out = await engine.result(str(dropped.run_id), timeout=30)
        assert out == ["started", "dropped", "dropping/a:0", "not started: dropped"]

        folded = await engine.start("parent", {"keys": ["folding/k", "folding/k"], "reverse": True})
        # the first waits out its debounce period (an hour): the second is folded into it at once
        run = await eventually(lambda: _parent_waits(engine, str(folded.run_id)), what="parent waits")
        assert run.waiting_on == "child"
        await engine.cancel(str(folded.run_id), "done looking")


async def test_a_gated_child_of_a_batch_is_one_item(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        handle = await engine.start("parent", {"keys": ["batched/a", "batched/b"]})
        out = await engine.result(str(handle.run_id), timeout=30)
    # the first item waits in the open batch; the second fills it, and its start is the batch's run
    assert out == ["queued", "started", "not started: batched", "batched/a+batched/b"]


async def _parent_waits(engine: lg.Engine, run_id: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    steps = await engine.steps(run_id)
    waits = [s for s in steps if s.key.startswith("wait:")]
    collapsed = len(waits) == 1 and waits[0].status == "failed" and waits[0].output["outcome"] == "collapsed"
    if collapsed and run.waiting_on == "child" and run.owner is None:  # parked on the first child
        return run
    return None


async def test_a_child_passes_its_gate_by_default(make_engine: Any) -> None:
    """Two children of a ``Concurrency(limit=1)`` workflow: the second waits for the first's slot."""
    async with make_engine(make_app()) as engine:
        handle = await engine.start("parent", {"keys": ["limited/1", "limited/2"], "gate": None})
        (first,) = await _children(engine, str(handle.run_id), 1)
        await eventually(lambda: _waiting(engine, first.id), what="first child waits")
        assert sum(f.queued for f in await engine.flow(workflow="limited")) == 1
        await engine.signal(first.id, "go", {})
        second = next(r for r in await _children(engine, str(handle.run_id), 2) if r.id != first.id)
        await eventually(lambda: _waiting(engine, second.id), what="second child admitted")
        await engine.signal(second.id, "go", {})
        out = await engine.result(str(handle.run_id), timeout=30)
        assert out == ["started", "queued", "limited/1:0", "limited/2:1"]


async def test_gate_false_and_the_workflow_option_opt_out(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        first = await engine.start("parent", {"keys": ["limited/a"], "gate": None})
        (held,) = await _children(engine, str(first.run_id), 1)
        await eventually(lambda: _waiting(engine, held.id), what="a child holds the slot")
        plain = await engine.start("parent", {"keys": ["limited/x"], "gate": False})  # ungated: no slot asked
        (child,) = await _children(engine, str(plain.run_id), 1)
        await eventually(lambda: _waiting(engine, child.id), what="ungated child runs beside the limit")
        declared = await engine.start("parent", {"keys": ["ungated/y"], "gate": None})  # gate_as_child=False
        (other,) = await _children(engine, str(declared.run_id), 1)
        await eventually(lambda: _waiting(engine, other.id), what="a child of an opted-out workflow runs")
        assert sum(f.queued for f in await engine.flow()) == 0
        for run_id in (held.id, child.id, other.id):
            await engine.signal(run_id, "go", {})
        assert await engine.result(str(plain.run_id), timeout=30) == ["started", "limited/x:0"]
        assert await engine.result(str(declared.run_id), timeout=30) == ["started", "ungated/y:0"]
        assert await engine.result(str(first.run_id), timeout=30) == ["started", "limited/a:0"]


async def test_a_queue_bounds_its_members_together(make_engine: Any) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        handle = await engine.start("producer", {"keys": ["lane.a/1", "lane.b/2"]})
        (first,) = await _children(engine, str(handle.run_id), 1)
        await eventually(lambda: _waiting(engine, first.id), what="first member waits")
        assert sum(f.queued for f in await engine.flow(workflow="lane.b")) == 1  # one budget for both
        outside = await engine.enqueue(app.queues["lane"], "lane.a", {"key": "direct"})
        assert outside.status == "queued"
        await engine.signal(first.id, "go", {})
        second = next(r for r in await _children(engine, str(handle.run_id), 2) if r.id != first.id)
        await eventually(lambda: _waiting(engine, second.id), what="second member admitted")
        await engine.signal(second.id, "go", {})
        assert await engine.result(str(handle.run_id), timeout=30) == ["lane.a/1:0", "lane.b/2:0"]


async def test_enqueueing_outside_its_queue_is_refused(make_engine: Any) -> None:
    async with make_engine(make_app()) as engine:
        with pytest.raises(InvalidArgument, match="not in queue 'lane'"):
            await engine.enqueue("lane", "limited", {"key": "x"})
        assert await engine.list_runs() == []
        bad = await engine.start("wrong-lane", {"keys": []})
        with pytest.raises(lg.RunFailed, match="not in queue 'other'"):
            await engine.result(str(bad.run_id), timeout=30)
        runs = await engine.list_runs()
        assert [r.workflow for r in runs] == ["wrong-lane"]  # no child was offered


def test_bad_queue_declarations_are_refused() -> None:
    app = lg.App()
    with pytest.raises(DefinitionError, match="concurrency"):
        app.queue("q", concurrency=0)
    with pytest.raises(DefinitionError, match="rate_limit"):
        app.queue("q", rate_limit=(0, "1m"))
    with pytest.raises(DefinitionError, match="declare one"):
        app.queue("q")
    lane = app.queue("q", concurrency=2, rate_limit=(10, "1m"), priority=lambda p: 1)
    with pytest.raises(DefinitionError, match="declared twice"):
        app.queue("q", concurrency=1)

    async def body(ctx: lg.Context, p: Job) -> None:
        return None

    app.workflow(name="both", queue=lane, concurrency=lg.Concurrency(limit=3))(body)
    with pytest.raises(DefinitionError) as caught:
        app.definitions()
    assert caught.value.fields == ["queue", "concurrency"]

    stranger = lg.App()
    stranger.workflow(name="elsewhere", queue=lane)(body)
    with pytest.raises(DefinitionError, match="not declared in this app"):
        stranger.definitions()
    flagged = lg.App()
    flagged.workflow(name="flagged", gate_as_child="yes")(body)
    with pytest.raises(DefinitionError, match="gate_as_child"):
        flagged.definitions()


async def test_a_gated_childs_journal_replays(make_engine: Any, store_url: str) -> None:
    app = make_app()
    async with make_engine(app) as engine:
        handle = await engine.start("parent", {"keys": ["dropping/r", "dropping/s"]})
        (child,) = await _children(engine, str(handle.run_id), 1)
        await eventually(lambda: _waiting(engine, child.id), what="child waits")
        await eventually(lambda: _parked_on_child(engine, str(handle.run_id)), what="parent parked")
    async with lg.Client(app, store_url) as client:
        export = await client.inspector.export_run(str(handle.run_id))
    verdict = await replay_check(app, export)
    assert verdict.outcome == "compatible", verdict


async def _parked_on_child(engine: lg.Engine, run_id: str) -> bool:
    run = await engine.get_run(run_id)
    return run.waiting_on == "child" and run.owner is None


async def test_a_queue_with_a_concurrency_and_a_rate_holds_both_over_its_members(make_engine: Any) -> None:
    """One pool for the queue's slots and one for its window: declaring both is no conflict."""
    app = lg.App()
    lane = app.queue("both", concurrency=1, rate_limit=(2, "1h"))
    gate = asyncio.Event()

    async def hold(ctx: lg.Context, p: Job) -> None:
        await gate.wait()

    app.workflow(name="member.a", queue=lane)(hold)
    app.workflow(name="member.b", queue=lane)(hold)
    async with make_engine(app) as engine:
        first = await engine.enqueue(lane, "member.a", {"key": "1"})
        second = await engine.enqueue(lane, "member.b", {"key": "2"})
        third = await engine.enqueue(lane, "member.a", {"key": "3"})
        assert [h.status for h in (first, second, third)] == ["started", "queued", "queued"]  # one slot
        gate.set()
        await engine.result(str(first.run_id), timeout=30)

        async def admitted() -> int:
            return sum(f.admitted for f in await engine.flow())

        assert await eventually(lambda: _at_least(admitted, 2), what="the second admitted") >= 2
        flows = await engine.flow()
        assert sum(f.admitted for f in flows) == 2 and sum(f.queued for f in flows) == 1  # the window: 2 an hour


async def _at_least(count: Any, n: int) -> int | None:
    found = int(await count())
    return found if found >= n else None
