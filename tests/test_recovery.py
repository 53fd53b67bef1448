"""Recovery verbs on the Python API: what each does, the events it writes, and what it refuses."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import messages

from .apps.waits import eventually


class Job(BaseModel):
    tag: str


class Go(BaseModel):
    ok: bool = True


class Boom(Exception):
    """A step's failure the test controls."""


@dataclass
class World:
    """What the steps did, and which of them are broken right now."""

    calls: Counter[str] = field(default_factory=Counter)
    broken: set[str] = field(default_factory=set)
    payloads: list[str] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: list[str] = field(default_factory=list)


def make_app(world: World) -> lg.App:
    app = lg.App()

    def act(name: str) -> str:
        world.calls[name] += 1
        if name in world.broken:
            raise Boom(f"{name} is broken")
        return name[0]

    async def hold(name: str) -> str:
        world.calls[name] += 1
        world.entered.set()
        try:
            await world.release.wait()
        except asyncio.CancelledError:
            world.cancelled.append(name)
            raise
        return name[0]

    @app.workflow(name="three")
    async def three(ctx: lg.Context, p: Job) -> str:
        world.payloads.append(p.tag)
        a = await ctx.step("one", act, "one")
        b = await ctx.step("two", act, "two")
        c = await ctx.step("three", act, "three")
        return f"{p.tag}:{a}{b}{c}"

    @app.workflow(name="three.parks", suspend_on_failure=True)
    async def three_parks(ctx: lg.Context, p: Job) -> str:
        a = await ctx.step("one", act, "one")
        b = await ctx.step("two", act, "two")
        c = await ctx.step("three", act, "three")
        return f"{p.tag}:{a}{b}{c}"

    @app.workflow(name="holds")
    async def holds(ctx: lg.Context, p: Job) -> str:
        a = await ctx.step("one", act, "one")
        b = await ctx.step("held", hold, "held")
        c = await ctx.step("three", act, "three")
        return f"{a}{b}{c}"

    @app.workflow(name="waits.then")
    async def waits_then(ctx: lg.Context, p: Job) -> str:
        await ctx.step("one", act, "one")
        got = await ctx.wait_for_signal("go", Job)
        await ctx.step("two", act, "two")
        return got.tag if got else "none"

    @app.workflow(name="sleeps")
    async def sleeps(ctx: lg.Context, p: Job) -> str:
        await ctx.step("one", act, "one")
        await ctx.sleep("nap", "7d")
        return "rested"

    @app.workflow(name="waits")
    async def waits(ctx: lg.Context, p: Job) -> str:
        await ctx.step("one", act, "one")
        await ctx.wait_for_signal("go", Go)
        await ctx.step("three", act, "three")
        return "waited"

    return app


def types(events: list[lg.EventInfo]) -> list[str]:
    return [e.type for e in events if e.type.startswith("run-")]


async def _status(engine: lg.Engine, run_id: str, *statuses: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status in statuses else None


async def _parked(engine: lg.Engine, run_id: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "running" and run.waiting_on == "signal" and run.owner is None else None


async def _failed_run(engine: lg.Engine, world: World, broken: str, workflow: str = "three") -> str:
    world.broken = {broken}
    run_id = (await engine.start(workflow, {"tag": "t"})).run_id
    assert run_id is not None
    with pytest.raises(lg.RunFailed):
        await engine.result(run_id, timeout=15)
    return run_id


# -- cancel ------------------------------------------------------------------------------------


async def test_cancel_a_parked_run(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("waits", {"tag": "t"})
        await eventually(lambda: _parked(engine, h.run_id), what="run parked")
        await engine.cancel(h.run_id, reason="not needed")
        with pytest.raises(lg.RunCancelled) as info:
            await engine.result(h.run_id, timeout=5)
        assert info.value.reason == "not needed"
        run = await engine.get_run(h.run_id)
        assert (run.status, run.error_tag, run.error_message) == ("cancelled", "Cancelled", "not needed")
        events = await engine.events(h.run_id)
        assert types(events) == ["run-started", "run-cancelled"]
        assert events[-1].data == {"reason": "not needed"}
        with pytest.raises(lg.RunNotEligible, match="cancelled"):
            await engine.signal(h.run_id, "go", {})


async def test_cancel_stops_the_local_execution(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("holds", {"tag": "t"})
        await asyncio.wait_for(world.entered.wait(), 15)
        await engine.cancel(h.run_id, reason="abort")
        await eventually(lambda: h.run_id not in engine.executing, what="execution stopped")
        assert world.cancelled == ["held"]
        assert world.calls["three"] == 0
        assert (await engine.get_run(h.run_id)).status == "cancelled"


async def test_cancel_a_suspended_run(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("waits", {"tag": "t"})
        await eventually(lambda: _parked(engine, h.run_id), what="run parked")
        await engine.suspend(h.run_id, reason="look first")
        await engine.cancel(h.run_id)
        assert (await engine.get_run(h.run_id)).status == "cancelled"
        assert types(await engine.events(h.run_id)) == ["run-started", "run-suspended", "run-cancelled"]


@pytest.mark.parametrize("outcome", ["succeeded", "failed", "cancelled"])
async def test_cancel_refuses_a_finished_run(make_engine: Any, outcome: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        if outcome == "failed":
            run_id = await _failed_run(engine, world, "two")
        else:
            h = await engine.start("three" if outcome == "succeeded" else "waits", {"tag": "t"})
            assert h.run_id is not None
            run_id = h.run_id
            if outcome == "succeeded":
                await engine.result(run_id, timeout=15)
            else:  # a cancelled run cannot be cancelled twice
                await engine.cancel(run_id)
        before = types(await engine.events(run_id))
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.cancel(run_id, reason="too late")
        assert (info.value.verb, info.value.status) == ("cancel", outcome)
        assert (await engine.get_run(run_id)).status == outcome
        assert types(await engine.events(run_id)) == before


# -- suspend / resume --------------------------------------------------------------------------


async def test_suspend_stops_the_execution_and_resume_continues(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("holds", {"tag": "t"})
        await asyncio.wait_for(world.entered.wait(), 15)
        await engine.suspend(h.run_id, reason="maintenance")
        await eventually(lambda: h.run_id not in engine.executing, what="execution stopped")
        assert world.cancelled == ["held"]
        run = await engine.get_run(h.run_id)
        assert (run.status, run.owner) == ("suspended", None)
        assert [(s.key, s.status) for s in await engine.steps(h.run_id)] == [("one#0", "completed")]
        with pytest.raises(lg.ResultTimeout):  # a suspended run is still live
            await engine.result(h.run_id, timeout=0.2)
        with pytest.raises(lg.RunNotEligible, match="suspended"):
            await engine.suspend(h.run_id)

        world.release.set()
        await engine.resume(h.run_id)
        assert await engine.result(h.run_id, timeout=15) == "oht"
        assert world.calls == Counter({"one": 1, "held": 2, "three": 1})
        assert types(await engine.events(h.run_id)) == [
            "run-started",
            "run-suspended",
            "run-resumed",
            "run-succeeded",
        ]
        assert (await engine.events(h.run_id))[1].data["reason"] == "maintenance"


async def test_a_signal_sent_while_suspended_is_consumed_after_resume(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("waits", {"tag": "t"})
        await eventually(lambda: _parked(engine, h.run_id), what="run parked")
        await engine.suspend(h.run_id)
        await engine.signal(h.run_id, "go", {})
        with pytest.raises(lg.ResultTimeout):
            await engine.result(h.run_id, timeout=0.3)
        assert (await engine.get_run(h.run_id)).status == "suspended"
        await engine.resume(h.run_id)
        assert await engine.result(h.run_id, timeout=15) == "waited"
        assert world.calls == Counter({"one": 1, "three": 1})


async def test_resume_keeps_a_timers_due_time(env_factory: Any) -> None:
    world = World()
    async with env_factory(make_app(world)) as env:
        h = await env.engine.start("sleeps", {"tag": "t"})
        await env.settle()
        await env.advance("3d")
        await env.engine.suspend(h.run_id)
        await env.advance("5d")  # the timer comes due while the run is suspended: nothing happens
        assert (await env.engine.get_run(h.run_id)).status == "suspended"
        await env.engine.resume(h.run_id)  # it fires now, seven days after the sleep began
        assert await env.engine.result(h.run_id, timeout=10) == "rested"
        assert world.calls == Counter({"one": 1})


@pytest.mark.parametrize("state", ["running", "succeeded", "failed"])
async def test_resume_refuses_a_run_that_is_not_suspended(make_engine: Any, state: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        if state == "failed":
            run_id = await _failed_run(engine, world, "two")
        else:
            h = await engine.start("waits" if state == "running" else "three", {"tag": "t"})
            assert h.run_id is not None
            run_id = h.run_id
            if state == "running":
                await eventually(lambda: _parked(engine, run_id), what="run parked")
            else:
                await engine.result(run_id, timeout=15)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.resume(run_id)
        assert (info.value.verb, info.value.status) == ("resume", state)
        if state == "failed":
            assert "redrive" in str(info.value)
        assert "run-resumed" not in types(await engine.events(run_id))


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
async def test_suspend_refuses_a_finished_run(make_engine: Any, state: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        if state == "failed":
            run_id = await _failed_run(engine, world, "one")
        else:
            h = await engine.start("three" if state == "succeeded" else "waits", {"tag": "t"})
            assert h.run_id is not None
            run_id = h.run_id
            if state == "succeeded":
                await engine.result(run_id, timeout=15)
            else:
                await engine.cancel(run_id)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.suspend(run_id)
        assert (info.value.verb, info.value.status) == ("suspend", state)


# -- suspend_on_failure ------------------------------------------------------------------------


async def test_suspend_on_failure_parks_the_run_and_resume_completes_it(make_engine: Any) -> None:
    world = World(broken={"two"})
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("three.parks", {"tag": "t"})
        run = await eventually(lambda: _status(engine, h.run_id, "suspended"), what="run suspended")
        assert run.error_tag == "Boom"
        assert "two is broken" in (run.error_message or "")
        journal = [(s.key, s.status) for s in await engine.steps(h.run_id)]
        assert journal == [("one#0", "completed"), ("two#0", "failed")]
        [event] = [e for e in await engine.events(h.run_id) if e.type == "run-suspended"]
        assert event.data["error_tag"] == "Boom"
        assert event.data["reason"] == "failure"

        world.broken.clear()
        await engine.resume(h.run_id)
        assert await engine.result(h.run_id, timeout=15) == "t:ott"
        assert world.calls == Counter({"one": 1, "two": 2, "three": 1})
        run = await engine.get_run(h.run_id)
        assert (run.error_tag, run.error_message) == (None, None)
        assert types(await engine.events(h.run_id)) == [
            "run-started",
            "run-suspended",
            "run-resumed",
            "run-succeeded",
        ]


# -- redrive -----------------------------------------------------------------------------------


async def test_redrive_replays_completed_steps_and_reruns_the_failed_one(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "two")
        assert world.calls == Counter({"one": 1, "two": 1})
        run = await engine.get_run(run_id)
        assert (run.status, run.error_tag) == ("failed", "Boom")  # the step's own error
        world.broken.clear()
        await engine.redrive(run_id)
        assert await engine.result(run_id, timeout=15) == "t:ott"
        assert world.calls == Counter({"one": 1, "two": 2, "three": 1})
        assert types(await engine.events(run_id)) == ["run-started", "run-failed", "run-redriven", "run-succeeded"]
        run = await engine.get_run(run_id)
        assert (run.status, run.error_tag, run.id) == ("succeeded", None, run_id)


async def test_a_redriven_run_that_fails_again_can_be_redriven_again(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "two")
        await engine.redrive(run_id)
        with pytest.raises(lg.RunFailed):
            await engine.result(run_id, timeout=15)
        world.broken.clear()
        await engine.redrive(run_id)
        assert await engine.result(run_id, timeout=15) == "t:ott"
        assert world.calls == Counter({"one": 1, "two": 3, "three": 1})
        assert types(await engine.events(run_id)).count("run-redriven") == 2


@pytest.mark.parametrize("state", ["running", "succeeded", "suspended", "cancelled"])
async def test_redrive_refuses_a_run_that_did_not_fail(make_engine: Any, state: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("three" if state == "succeeded" else "waits", {"tag": "t"})
        assert h.run_id is not None
        if state == "succeeded":
            await engine.result(h.run_id, timeout=15)
        else:
            await eventually(lambda: _parked(engine, h.run_id), what="run parked")
            if state == "suspended":
                await engine.suspend(h.run_id)
            elif state == "cancelled":
                await engine.cancel(h.run_id)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.redrive(h.run_id)
        assert (info.value.verb, info.value.status) == ("redrive", state)
        if state == "suspended":
            assert "resume" in str(info.value)


# -- resume_from_step --------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["two", "two#0"])
async def test_resume_from_step_reruns_that_step_and_all_after_it(make_engine: Any, step: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "three")
        assert world.calls == Counter({"one": 1, "two": 1, "three": 1})
        world.broken.clear()
        await engine.resume_from_step(run_id, step)
        assert await engine.result(run_id, timeout=15) == "t:ott"
        assert world.calls == Counter({"one": 1, "two": 2, "three": 2})
        [event] = [e for e in await engine.events(run_id) if e.type == "run-redriven"]
        assert event.data == {"from_step": "two#0"}
        assert types(await engine.events(run_id)) == ["run-started", "run-failed", "run-redriven", "run-succeeded"]


async def test_resume_from_step_offers_again_the_signals_consumed_after_it(make_engine: Any) -> None:
    world = World(broken={"two"})
    async with make_engine(make_app(world)) as engine:
        run_id = (await engine.start("waits.then", {"tag": "t"})).run_id
        assert run_id is not None
        await eventually(lambda: _parked(engine, run_id), what="run parked")
        await engine.signal(run_id, "go", {"tag": "first"})
        with pytest.raises(lg.RunFailed):
            await engine.result(run_id, timeout=15)
        world.broken.clear()
        await engine.resume_from_step(run_id, "one")
        assert await engine.result(run_id, timeout=15) == "first"
        assert world.calls == Counter({"one": 2, "two": 2})
        [message] = await engine.store.read(messages.list_messages, run_id)
        assert (message["status"], message["step_key"]) == ("consumed", "signal:go#0")


async def test_resume_from_step_refuses_an_unknown_step_listing_the_known_ones(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "three")
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.resume_from_step(run_id, "seven")
        message = str(info.value)
        assert "'seven'" in message
        for known in ("one", "two", "three"):
            assert known in message
        assert (await engine.get_run(run_id)).status == "failed"
        assert len(await engine.steps(run_id)) == 3


@pytest.mark.parametrize("state", ["running", "succeeded", "suspended"])
async def test_resume_from_step_refuses_a_run_that_did_not_fail(make_engine: Any, state: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("three" if state == "succeeded" else "waits", {"tag": "t"})
        assert h.run_id is not None
        if state == "succeeded":
            await engine.result(h.run_id, timeout=15)
        else:
            await eventually(lambda: _parked(engine, h.run_id), what="run parked")
            if state == "suspended":
                await engine.suspend(h.run_id)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.resume_from_step(h.run_id, "one")
        assert info.value.status == state


# -- discard -----------------------------------------------------------------------------------


async def test_discard_keeps_the_run_failed_and_closes_it_to_redrive(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "two")
        assert await engine.discard(run_id) is True
        run = await engine.get_run(run_id)
        assert (run.status, run.discarded, run.error_tag) == ("failed", True, "Boom")
        assert types(await engine.events(run_id)) == ["run-started", "run-failed", "run-discarded"]
        assert await engine.discard(run_id) is False  # again: a no-op that says so, nothing written
        assert types(await engine.events(run_id)) == ["run-started", "run-failed", "run-discarded"]
        assert (await engine.get_run(run_id)).updated_at == run.updated_at
        for verb, call in (
            ("redrive", engine.redrive(run_id)),
            ("resume-from-step", engine.resume_from_step(run_id, "one")),
        ):
            with pytest.raises(lg.RunNotEligible, match="discarded") as info:
                await call
            assert info.value.verb == verb
        assert (await engine.get_run(run_id)).status == "failed"
        handle = await engine.retry(run_id)  # a fresh run is still possible
        world.broken.clear()
        assert await handle.result(timeout=15) == "t:ott"


@pytest.mark.parametrize("state", ["running", "succeeded", "cancelled"])
async def test_discard_refuses_a_run_that_did_not_fail(make_engine: Any, state: str) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        h = await engine.start("three" if state == "succeeded" else "waits", {"tag": "t"})
        assert h.run_id is not None
        if state == "succeeded":
            await engine.result(h.run_id, timeout=15)
        else:
            await eventually(lambda: _parked(engine, h.run_id), what="run parked")
            if state == "cancelled":
                await engine.cancel(h.run_id)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.discard(h.run_id)
        assert (info.value.verb, info.value.status) == ("discard", state)
        assert not (await engine.get_run(h.run_id)).discarded


# -- retry -------------------------------------------------------------------------------------


async def test_retry_starts_a_fresh_run(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "two")
        world.broken.clear()
        handle = await engine.retry(run_id)
        assert handle.status == "started"
        assert handle.run_id is not None and handle.run_id != run_id
        assert await handle.result(timeout=15) == "t:ott"
        assert world.calls == Counter({"one": 2, "two": 2, "three": 1})  # nothing replayed: a fresh run
        fresh = await engine.get_run(handle.run_id)
        assert (fresh.retry_of, fresh.payload) == (run_id, {"tag": "t"})
        assert (await engine.get_run(run_id)).status == "failed"
        [event] = [e for e in await engine.events(run_id) if e.type == "run-retried"]
        assert (event.data["new_run_id"], event.data["ticket"]) == (handle.run_id, handle.ticket)
        assert types(await engine.events(handle.run_id)) == ["run-started", "run-succeeded"]


async def test_retry_a_cancelled_run_with_a_payload_override(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        parked = await engine.start("waits", {"tag": "old"})
        assert parked.run_id is not None
        await eventually(lambda: _parked(engine, parked.run_id), what="run parked")
        await engine.cancel(parked.run_id)
        handle = await engine.retry(parked.run_id, payload_override={"tag": "new"})
        assert handle.run_id is not None
        await eventually(lambda: _parked(engine, handle.run_id), what="retried run parked")
        assert (await engine.get_run(handle.run_id)).payload == {"tag": "new"}
        await engine.signal(handle.run_id, "go", {})
        assert await handle.result(timeout=15) == "waited"


async def test_retry_refuses_a_bad_override_and_a_live_or_succeeded_run(make_engine: Any) -> None:
    world = World()
    async with make_engine(make_app(world)) as engine:
        run_id = await _failed_run(engine, world, "one")
        with pytest.raises(lg.PayloadError) as bad:
            await engine.retry(run_id, payload_override={"tag": 5})
        assert "tag" in str(bad.value)
        with pytest.raises(lg.PayloadError, match="missing tag"):
            await engine.retry(run_id, payload_override={"other": "x"})
        assert "run-retried" not in types(await engine.events(run_id))

        world.broken.clear()
        live = await engine.start("waits", {"tag": "t"})
        assert live.run_id is not None
        await eventually(lambda: _parked(engine, live.run_id), what="run parked")
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.retry(live.run_id)
        assert (info.value.verb, info.value.status) == ("retry", "running")
        await engine.suspend(live.run_id)
        with pytest.raises(lg.RunNotEligible):
            await engine.retry(live.run_id)

        done = await engine.start("three", {"tag": "t"})
        assert done.run_id is not None
        await engine.result(done.run_id, timeout=15)
        with pytest.raises(lg.RunNotEligible) as info:
            await engine.retry(done.run_id)
        assert info.value.status == "succeeded"


# -- unknown runs ------------------------------------------------------------------------------


async def test_every_verb_refuses_an_unknown_run(make_engine: Any) -> None:
    async with make_engine(make_app(World())) as engine:
        calls = {
            "cancel": engine.cancel("run_nope", reason="x"),
            "suspend": engine.suspend("run_nope"),
            "resume": engine.resume("run_nope"),
            "retry": engine.retry("run_nope"),
            "redrive": engine.redrive("run_nope"),
            "resume_from_step": engine.resume_from_step("run_nope", "one"),
            "discard": engine.discard("run_nope"),
            "signal": engine.signal("run_nope", "go", {}),
        }
        for verb, call in calls.items():
            with pytest.raises(lg.UnknownRun) as info:
                await call
            assert info.value.run_id == "run_nope", verb
            assert "run_nope" in str(info.value)
