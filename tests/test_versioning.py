"""Versioning: stamped version and patches, compatibility on re-entry, and the nondeterminism tripwire.

"New code" is a second ``App`` registering the same workflow name, run by a second
engine on the same store after the first one stopped.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually


class Job(BaseModel):
    tag: str


class Go(BaseModel):
    ok: bool = True


def patched_app(calls: Counter[str], **options: Any) -> lg.App:
    app = lg.App()

    def one(tag: str) -> str:
        calls["one"] += 1
        return tag

    @app.workflow(name="versioned", **options)
    async def versioned(ctx: lg.Context, p: Job) -> str:
        await ctx.step("one", one, p.tag)
        await ctx.wait_for_signal("go", Go)
        calls["after-signal"] += 1
        return "new" if ctx.patch("new-total") else "old"

    return app


def shaped_app(calls: Counter[str], shape: list[str]) -> lg.App:
    """A workflow whose steps, in order, are ``shape`` (``go`` is the signal wait)."""
    app = lg.App()

    def act(name: str) -> str:
        calls[name] += 1
        return name

    @app.workflow(name="shaped")
    async def shaped(ctx: lg.Context, p: Job) -> str:
        for name in shape:
            if name == "go":
                await ctx.wait_for_signal("go", Go)
            else:
                await ctx.step(name, act, name)
        return "+".join(shape)

    return app


def family_app(started: asyncio.Event, **options: Any) -> lg.App:
    app = lg.App()

    async def hang() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    @app.workflow(name="family.child")
    async def family_child(ctx: lg.Context, p: Job) -> str:
        return str(await ctx.step("hang", hang))

    @app.workflow(name="family.parent", **options)
    async def family_parent(ctx: lg.Context, p: Job) -> str:
        await ctx.start_child("family.child", {"tag": p.tag}, parent_close="cancel")
        await ctx.wait_for_signal("go", Go)
        return "parent"

    return app


async def _parked(engine: lg.Engine, run_id: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "running" and run.waiting_on == "signal" and run.owner is None else None


async def _start_parked(engine: lg.Engine, workflow: str) -> str:
    run_id = (await engine.start(workflow, {"tag": "t"})).run_id
    assert run_id is not None
    await eventually(lambda: _parked(engine, run_id), what="run parked on its signal")
    return run_id


async def test_version_and_patches_are_stamped_on_the_run(make_engine: Any) -> None:
    calls: Counter[str] = Counter()
    app = patched_app(calls, version="2024-06", patches=["new-total", "fast-path"])
    async with make_engine(app) as engine:
        run_id = await _start_parked(engine, "versioned")
        run = await engine.get_run(run_id)
        assert (run.version, run.patches) == ("2024-06", ["new-total", "fast-path"])
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "new"

    async with make_engine(patched_app(calls)) as engine:
        h = await engine.start("versioned", {"tag": "t"})
        run = await engine.get_run(h.run_id)
        assert (run.version, run.patches) == (None, [])


async def test_patch_answers_from_the_runs_stamp_not_the_code(make_engine: Any) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(patched_app(calls)) as old_engine:
        old_run = await _start_parked(old_engine, "versioned")

    async with make_engine(patched_app(calls, patches=["new-total"])) as engine:
        new_run = await _start_parked(engine, "versioned")
        for run_id in (old_run, new_run):
            await engine.signal(run_id, "go", {})
        assert await engine.result(old_run, timeout=15) == "old"  # started before the patch existed
        assert await engine.result(new_run, timeout=15) == "new"
        assert (await engine.get_run(old_run)).patches == []
        assert (await engine.get_run(new_run)).patches == ["new-total"]
        assert calls == Counter({"one": 2, "after-signal": 2})  # the old run's step replayed


async def _waiting_version(engine: lg.Engine, run_id: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == "running" and run.waiting_on == "version" and run.owner is None else None


@pytest.mark.parametrize("wake", ["signal", "resume"])
async def test_an_incompatible_version_waits_for_code_that_runs_it(make_engine: Any, wake: str) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(patched_app(calls, version="v1")) as engine:
        run_id = await _start_parked(engine, "versioned")
        if wake == "resume":
            await engine.suspend(run_id)

    async with make_engine(
        patched_app(calls, version="v2", compatible_with=["v0"]), unroutable_after="200ms"
    ) as engine:
        if wake == "signal":
            await engine.signal(run_id, "go", {})
        else:
            await engine.resume(run_id)
        waiting = await eventually(lambda: _waiting_version(engine, run_id), what="the run waits for a version")
        assert waiting.waiting_version == {"version": "v1", "offered": ["v0", "v2"]}
        assert calls["after-signal"] == 0  # the body was not entered under the new code
        assert calls["one"] == 1
        fresh = await _start_parked(engine, "versioned")  # runs of this version are fine
        await engine.signal(fresh, "go", {})
        assert await engine.result(fresh, timeout=15) == "old"
        assert (await engine.get_run(run_id)).status == "running"

    async with make_engine(patched_app(calls, version="v1")) as engine:  # old code back: it takes the run
        if wake == "resume":  # resumed, it waits for its signal again
            await eventually(lambda: _parked(engine, run_id), what="run parked on its signal")
            await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "old"
        assert calls["after-signal"] == 2


async def test_an_incompatible_parent_waits_while_its_child_runs(make_engine: Any) -> None:
    started = asyncio.Event()
    async with make_engine(family_app(started, version="v1")) as engine:
        parent = await _start_parked(engine, "family.parent")
        await asyncio.wait_for(started.wait(), 15)

    started.clear()
    async with make_engine(family_app(started, version="v2"), lease="1h", unroutable_after="200ms") as engine:
        [child] = await engine.list_runs(parent_id=parent)
        await asyncio.wait_for(started.wait(), 15)  # the child (no version) executes here again
        await engine.signal(parent, "go", {})
        await eventually(lambda: _waiting_version(engine, parent), what="the parent waits for version v1")
        dry = await engine.migrate_version(parent, to_version="v2")
        assert [(i.run_id, i.outcome) for i in dry.items] == [(parent, "would-act")]
        assert (await engine.get_run(parent)).version == "v1"  # a dry run writes nothing
        done = await engine.migrate_version(parent, to_version="v2", commit=True)
        assert [i.outcome for i in done.items] == ["succeeded"]
        assert await engine.result(parent, timeout=15) == "parent"  # declared safe: v2 takes it
        closed = await engine.get_run(child.id)
        assert (closed.status, closed.error_tag) == ("cancelled", "Cancelled")


@pytest.mark.parametrize("wake", ["signal", "resume"])
async def test_a_compatible_version_continues(make_engine: Any, wake: str) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(patched_app(calls, version="v1")) as engine:
        run_id = await _start_parked(engine, "versioned")
        if wake == "resume":
            await engine.suspend(run_id)

    async with make_engine(patched_app(calls, version="v2", compatible_with=["v1"])) as engine:
        await engine.signal(run_id, "go", {})
        if wake == "resume":
            await engine.resume(run_id)
        assert await engine.result(run_id, timeout=15) == "old"
        run = await engine.get_run(run_id)
        assert (run.version, run.status) == ("v1", "succeeded")  # the stamp does not move
        assert calls == Counter({"one": 1, "after-signal": 1})


def _suspected(events: list[lg.EventInfo]) -> list[Any]:
    return [e.data for e in events if e.type == "nondeterminism-suspected"]


async def test_unchanged_code_raises_no_tripwire(make_engine: Any) -> None:
    calls: Counter[str] = Counter()
    shape = ["a", "b", "go", "c"]
    async with make_engine(shaped_app(calls, shape)) as engine:
        run_id = await _start_parked(engine, "shaped")
    async with make_engine(shaped_app(calls, shape)) as engine:
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "a+b+go+c"
        assert _suspected(await engine.events(run_id)) == []
        assert calls == Counter({"a": 1, "b": 1, "c": 1})


@pytest.mark.parametrize(
    ("new_shape", "extra"),
    [(["a", "a", "b", "go", "c"], ["a#1"]), (["a", "x", "b", "go", "c"], ["x#0"])],
    ids=["extra-occurrence", "inserted-step"],
)
async def test_an_extra_step_on_reentry_is_reported(make_engine: Any, new_shape: list[str], extra: list[str]) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(shaped_app(calls, ["a", "b", "go", "c"])) as engine:
        run_id = await _start_parked(engine, "shaped")
    async with make_engine(shaped_app(calls, new_shape)) as engine:
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "+".join(new_shape)  # a suspicion, never a failure
        assert _suspected(await engine.events(run_id)) == [{"unreached": [], "extra": extra}]
        assert sum(calls.values()) == 4  # a, b and c once each; only the extra step ran on re-entry


async def test_an_extra_step_is_reported_once_when_the_reentered_body_parks_again(make_engine: Any) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(shaped_app(calls, ["a", "b", "go", "c", "go", "d"])) as engine:
        run_id = await _start_parked(engine, "shaped")
    async with make_engine(shaped_app(calls, ["a", "a", "b", "go", "c", "go", "d"])) as engine:
        await engine.signal(run_id, "go", {})
        await eventually(lambda: _suspected_in(engine, run_id), what="tripwire at the second park")
        await eventually(lambda: _parked(engine, run_id), what="parked on the second signal")
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "a+a+b+go+c+go+d"
        assert _suspected(await engine.events(run_id)) == [{"unreached": [], "extra": ["a#1"]}]


async def _suspected_in(engine: lg.Engine, run_id: str) -> list[Any]:
    return _suspected(await engine.events(run_id))


async def test_a_skipped_recorded_step_on_reentry_is_reported(make_engine: Any) -> None:
    calls: Counter[str] = Counter()
    async with make_engine(shaped_app(calls, ["a", "b", "go", "c"])) as engine:
        run_id = await _start_parked(engine, "shaped")
    async with make_engine(shaped_app(calls, ["a", "go", "c"])) as engine:
        await engine.signal(run_id, "go", {})
        assert await engine.result(run_id, timeout=15) == "a+go+c"
        # what came after the skipped step is the body going on, not an insertion
        assert _suspected(await engine.events(run_id)) == [{"unreached": ["b#0"], "extra": []}]
        assert (await engine.get_run(run_id)).status == "succeeded"
        assert calls == Counter({"a": 1, "b": 1, "c": 1})


async def _body(ctx: lg.Context, p: Job) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("options", "fields", "problem"),
    [
        ({"compatible_with": ["v1"]}, ["compatible_with", "version"], "needs a version"),
        ({"version": 2}, ["version"], "string"),
        ({"patches": ["ok", ""]}, ["patches"], "non-empty strings"),
        ({"version": "2", "compatible_with": ["1", "2"]}, ["compatible_with", "version"], "current version"),
        ({"runs_on": {"gpu": ""}}, ["runs_on"], "non-empty string value"),
        ({"runs_on": {"": "a100"}}, ["runs_on"], "non-empty string"),
        ({"runs_on": "gpu=a100"}, ["runs_on"], "lg.Labels"),
    ],
)
async def test_bad_versioning_options_are_refused_at_boot(
    make_engine: Any, options: dict[str, Any], fields: list[str], problem: str
) -> None:
    app = lg.App()
    app.workflow(name="versioned.bad", **options)(_body)
    with pytest.raises(lg.DefinitionError) as info:
        async with make_engine(app):
            pass
    assert (info.value.workflow, info.value.fields) == ("versioned.bad", fields)
    assert problem in str(info.value)
