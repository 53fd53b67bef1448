"""Step flow control in one process: limits held, where a configuration applies, waiting for free,
live limits, back-pressure, ``ctx.rate_limit`` and what an operator reads.

Steps append their start and end to a side file (``tests/apps/stepflow.py``); overlaps and
windows are measured on those lines, not on the engine's own rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.inspect import Inspector
from lockgate.store import open_store

from .apps.stepflow import max_in_window, max_overlap, note, spans
from .apps.waits import eventually
from .conftest import LONG
from .flow_audit import audit_flow_starts, granted_starts


class Job(BaseModel):
    n: int = 0
    tenant: str = "t"


@pytest.fixture
def effects(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "effects.log"
    flags = tmp_path / "flags"
    flags.mkdir()
    old = {k: os.environ.get(k) for k in ("LOCKGATE_TEST_EFFECTS", "LOCKGATE_TEST_FLAGS")}
    os.environ["LOCKGATE_TEST_EFFECTS"] = str(path)
    os.environ["LOCKGATE_TEST_FLAGS"] = str(flags)
    yield path
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


async def timed(ctx: lg.Context, name: str, seconds: float) -> int:
    """A step that notes its start and end (the side file) and sleeps ``seconds``."""
    note("start", ctx.run_id, name)
    try:
        await asyncio.sleep(seconds)
    finally:
        note("end", ctx.run_id, name)
    return 1


def overlap(path: Path, step: str | None = None) -> int:
    return max_overlap([(s.start, s.end or s.start) for s in spans(path) if step is None or s.step == step])


async def results(engine: lg.Engine, handles: list[lg.RunHandle], timeout: float = 60) -> list[Any]:
    return [await engine.result(h.run_id or "", timeout=timeout) for h in handles]


# -- definitions and bad inputs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("control", "field"),
    [
        (lg.FlowControl("k", rate=0), "flow_control.rate"),
        (lg.FlowControl("k", rate=-1), "flow_control.rate"),
        (lg.FlowControl("k", parallelism=0), "flow_control.parallelism"),
        (lg.FlowControl("k", rate=3, period=0), "flow_control.period"),
        (lg.FlowControl("k", rate=3, period="-1s"), "flow_control.period"),
        (lg.FlowControl("", parallelism=1), "flow_control.key"),
        (lg.FlowControl("k"), "flow_control.rate, parallelism"),
    ],
)
async def test_bad_declaration_is_refused_at_boot(control: lg.FlowControl, field: str, tmp_path: Path) -> None:
    app = lg.App()

    @app.workflow(name="bad", flow_control=control)
    async def bad(ctx: lg.Context, p: Job) -> int:
        return 0

    with pytest.raises(lg.DefinitionError) as err:
        async with lg.Engine(app, f"sqlite:///{tmp_path}/x.db"):
            pass
    assert field in str(err.value)


async def test_bad_start_flow_control_is_refused_and_nothing_written(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="plain")
    async def plain(ctx: lg.Context, p: Job) -> int:
        return p.n

    async with make_engine(app) as engine:
        for bad, field in [
            (lg.FlowControl("k", rate=0), "flow_control.rate"),
            (lg.FlowControl("  ", parallelism=2), "flow_control.key"),
            (lg.FlowControl(lambda p: "", parallelism=2), "flow_control.key"),
            ("k", "flow_control"),
        ]:
            with pytest.raises(lg.InvalidArgument, match=field):
                await engine.start("plain", {"n": 1}, flow_control=bad)
        assert await engine.list_runs() == []
        assert await engine.flow_keys() == []
        with pytest.raises(lg.InvalidArgument, match="parallelism"):
            await engine.set_flow_limits("k", parallelism=0)
        with pytest.raises(lg.InvalidArgument, match="rate, parallelism"):
            await engine.set_flow_limits("k")
        assert await engine.flow_keys() == []


# -- limits held ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_parallelism_never_exceeded_under_200_runs(make_engine: Any, effects: Path) -> None:
    app = lg.App()

    @app.workflow(name="par", flow_control=lg.FlowControl("provider", parallelism=4))
    async def par(ctx: lg.Context, p: Job) -> int:
        a = await ctx.step("one", timed, ctx, "one", 0.002)
        b = await ctx.step("two", timed, ctx, "two", 0.002)
        return a + b

    # leases long enough that a loaded machine's late renewal hands no run over: a step of a run taken
    # over while its first holder still runs it is the one overlap a lease cannot prevent
    opts = {"max_concurrent_runs": 50, "lease": "30s"}
    async with make_engine(app, **opts) as engine, make_engine(app, **opts) as other:
        handles = await asyncio.gather(*(engine.start("par", {"n": i}) for i in range(200)))
        assert await results(other, handles, timeout=120) == [2] * 200
        keys = await engine.flow_keys()
    assert overlap(effects) == 4  # reached, never passed
    assert len(spans(effects)) == 400
    assert [(k.key, k.running, k.waiting, k.parallelism) for k in keys] == [("provider", 0, 0, 4)]


async def test_rate_window_never_exceeded(make_engine: Any, effects: Path, store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="rated", flow_control=lg.FlowControl("api", rate=4, period="600ms"))
    async def rated(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("call", timed, ctx, "call", 0.0))

    async with make_engine(app, inline_sleep=0.1) as engine:
        audit_flow_starts(store_url)
        handles = await asyncio.gather(*(engine.start("rated", {"n": i}) for i in range(12)))
        assert await results(engine, handles) == [1] * 12
    assert len(spans(effects)) == 12
    # The store's grants (see flow_audit): one per body, never a fifth in a window.
    (granted,) = granted_starts(store_url).values()
    assert len(granted) == 12
    assert max_in_window(granted, 0.6) <= 4
    assert max(granted) - min(granted) >= 2 * 0.6  # 12 starts at 4 per window span two windows at least


# -- where a configuration applies ----------------------------------------------------------------


async def test_step_override_replaces_the_runs_key_and_none_exempts(make_engine: Any, effects: Path) -> None:
    app = lg.App()
    seen: dict[str, Any] = {}

    def facts(ctx: lg.Context, name: str) -> int:
        seen[f"{ctx.run_id}:{name}"] = ctx.flow_control
        return 1

    @app.workflow(name="mixed")
    async def mixed(ctx: lg.Context, p: Job) -> int:
        await ctx.step("prepare", facts, ctx, "prepare")
        await ctx.step("charge", facts, ctx, "charge", flow_control=lg.FlowControl("payments", parallelism=1))
        await ctx.step("notify", facts, ctx, "notify", flow_control=None)
        return 1

    async with make_engine(app) as engine:
        h = await engine.start("mixed", {"n": 1}, flow_control=lg.FlowControl(lambda p: f"tenant:{p.tenant}", rate=50))
        assert await engine.result(h.run_id, timeout=30) == 1
        keys = {k.key: k for k in await engine.flow_keys()}
    rid = h.run_id
    assert seen[f"{rid}:prepare"] == lg.FlowControl("tenant:t", rate=50, period=1.0)
    assert seen[f"{rid}:charge"] == lg.FlowControl("payments", parallelism=1, period=1.0)
    assert seen[f"{rid}:notify"] is None  # exempt: no key at all
    assert set(keys) == {"tenant:t", "payments"}
    # the charge step counted against payments only: the run's key saw one start, not two
    assert keys["tenant:t"].started == 1
    assert keys["payments"].started == 0  # no rate: starts are not counted


async def test_workflow_default_and_children_take_their_own(make_engine: Any) -> None:
    app = lg.App()
    seen: dict[str, Any] = {}

    def record(ctx: lg.Context, who: str) -> int:
        seen[who] = ctx.flow_control
        return 1

    @app.workflow(name="child", flow_control=lg.FlowControl("child-key", parallelism=2))
    async def child(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("c", record, ctx, "child"))

    @app.workflow(name="loner")
    async def loner(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("l", record, ctx, "loner"))

    @app.workflow(name="parent", flow_control=lg.FlowControl("parent-key", parallelism=2))
    async def parent(ctx: lg.Context, p: Job) -> int:
        await ctx.step("p", record, ctx, "parent")
        a = await ctx.wait_child(await ctx.start_child("child", {"n": 1}))
        b = await ctx.wait_child(await ctx.start_child("loner", {"n": 1}))
        return int(a) + int(b)

    async with make_engine(app) as engine:
        out = await engine.run("parent", {"n": 0}, flow_control=lg.FlowControl("given", parallelism=5))
    assert out == 2
    assert seen["parent"] == lg.FlowControl("given", parallelism=5, period=1.0)  # start beats the default
    assert seen["child"] == lg.FlowControl("child-key", parallelism=2, period=1.0)
    assert seen["loner"] is None


async def test_gathered_steps_wait_and_start_independently(make_engine: Any, effects: Path) -> None:
    app = lg.App()

    @app.workflow(name="fan", flow_control=lg.FlowControl("fan", parallelism=2))
    async def fan(ctx: lg.Context, p: Job) -> int:
        parts = await asyncio.gather(*(ctx.step("part", timed, ctx, f"part{i}", 0.05) for i in range(6)))
        return sum(parts)

    async with make_engine(app) as engine:
        assert await engine.run("fan", {"n": 0}) == 6
    assert overlap(effects) == 2
    assert len(spans(effects)) == 6


async def test_gathered_steps_on_two_keys_across_two_engines_never_wait_on_each_other(
    make_engine: Any, effects: Path
) -> None:
    """Runs on two engines each gather a step on key "x" and one on key "y", in opposite orders: the
    two keys' slots are taken in whatever order the writes meet, and every run ends, each key held
    to its limit."""
    app = lg.App()
    x, y = lg.FlowControl("x", parallelism=1), lg.FlowControl("y", parallelism=1)

    @app.workflow(name="two-keys")
    async def two_keys(ctx: lg.Context, p: Job) -> int:
        first, second = (x, y) if p.n % 2 else (y, x)
        parts = await asyncio.gather(
            ctx.step("a", timed, ctx, f"a-{first.key}", 0.02, flow_control=first),
            ctx.step("b", timed, ctx, f"b-{second.key}", 0.02, flow_control=second),
        )
        return sum(parts)

    async with make_engine(app) as one, make_engine(app) as other:
        handles = [await (one if n % 2 else other).start("two-keys", {"n": n}) for n in range(40)]
        assert await results(one, handles, timeout=120) == [2] * 40
    by_key: dict[str, list[tuple[float, float]]] = {"x": [], "y": []}
    for s in spans(effects):
        by_key[s.step.rsplit("-", 1)[1]].append((s.start, s.end or s.start))
    assert {k: max_overlap(v) for k, v in by_key.items()} == {"x": 1, "y": 1}
    runs = [s.run + s.step for s in spans(effects)]
    assert len(runs) == 80, sorted(r for r in runs if runs.count(r) > 1)


# -- waiting is durable and free ---------------------------------------------------------------------


# Ten times the worker's places wait on a key of parallelism 2 (fifty times under LOCKGATE_TORTURE=long).
WAITING_RUNS = 500 if LONG else 100


@pytest.mark.slow
async def test_waiting_runs_hold_no_worker(make_engine: Any, effects: Path) -> None:
    app = lg.App()
    gate = asyncio.Event()

    async def blocked() -> int:
        await gate.wait()
        return 1

    @app.workflow(name="slow", flow_control=lg.FlowControl("narrow", parallelism=2))
    async def slow(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("s", blocked))

    @app.workflow(name="other")
    async def other(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("o", lambda: p.n))

    async with make_engine(app, max_concurrent_runs=10) as engine:
        handles = await asyncio.gather(*(engine.start("slow", {"n": i}) for i in range(WAITING_RUNS)))

        async def parked() -> bool:
            keys = await engine.flow_keys("narrow")
            return bool(keys) and (keys[0].running, keys[0].waiting) == (2, WAITING_RUNS - 2)

        await eventually(parked, timeout=120, what=f"2 running, {WAITING_RUNS - 2} waiting")
        # the engine executes other work while the others wait: a run claimed among many others due parks when
        # its step must wait (the first in line, as many as the key's parallelism, wait in place for a slot
        # to be handed over); once nothing else is due, steps further back may wait in place in nine tenths
        # of its places at most, and a run due later takes one of theirs
        assert await engine.run("other", {"n": 7}) == 7
        waiting = await engine.list_runs(workflow="slow", limit=WAITING_RUNS * 2)
        assert sum(1 for r in waiting if r.waiting_on == "flow") >= WAITING_RUNS - 12
        assert (await engine.flow_keys("narrow"))[0].running == 2
        gate.set()
        assert await results(engine, handles, timeout=120) == [1] * WAITING_RUNS


async def test_runs_of_one_key_do_not_park_each_other(make_engine: Any) -> None:
    app = lg.App()
    gate = asyncio.Event()

    async def blocked() -> int:
        await gate.wait()
        return 1

    @app.workflow(name="same", flow_control=lg.FlowControl("same", parallelism=2))
    async def same(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("s", blocked))

    async with make_engine(app, max_concurrent_runs=10) as engine:
        handles = await asyncio.gather(*(engine.start("same", {"n": i}) for i in range(40)))

        async def lined_up() -> bool:
            keys = await engine.flow_keys("same")
            return bool(keys) and (keys[0].running, keys[0].waiting) == (2, 38)

        await eventually(lined_up, timeout=60, what="2 running, 38 waiting")

        # the fresh runs due are of the same key: a refused step parking for one of them would only let it
        # wait behind it, so the worker's places stay with steps waiting in place (no park, no claim again):
        # of the 38 waiting, the 8 the worker's other places hold are not parked (a run due may still take
        # a deep waiter's place now and then, and that one parks: never more than the 30 that were due)
        async def in_place() -> bool:
            runs = await engine.list_runs(workflow="same", limit=100)
            return sum(1 for r in runs if r.waiting_on == "flow") <= 30

        await eventually(in_place, timeout=60, what="eight of the waiting runs held in place")
        gate.set()
        assert await results(engine, handles, timeout=120) == [1] * 40


async def test_slot_released_however_the_attempt_ends(make_engine: Any) -> None:
    app = lg.App()

    def boom() -> int:
        raise ValueError("no")

    async def slow() -> int:
        await asyncio.sleep(30)
        return 1

    @app.workflow(name="failing", flow_control=lg.FlowControl("one", parallelism=1))
    async def failing(ctx: lg.Context, p: Job) -> int:
        try:
            await ctx.step("boom", boom, retry=lg.Retry(max_attempts=2, base_delay=0.01, jitter=False))
        except lg.StepFailed:
            pass
        return int(await ctx.step("after", lambda: 1))

    @app.workflow(name="stuck", flow_control=lg.FlowControl("one", parallelism=1))
    async def stuck(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("slow", slow))

    async with make_engine(app) as engine:
        assert await engine.run("failing", {"n": 0}) == 1  # error, retry, next step: each freed its slot
        h = await engine.start("stuck", {"n": 0})
        await eventually(lambda: _running(engine, "one", 1), what="the stuck step holds the slot")
        await engine.cancel(h.run_id or "", "stop")
        assert await engine.run("failing", {"n": 1}, timeout=30) == 1  # the cancelled run's slot is free


async def _running(engine: lg.Engine, key: str, n: int) -> bool:
    rows = await engine.flow_keys(key)
    return bool(rows) and rows[0].running == n


# -- live configuration, back-pressure ----------------------------------------------------------------


async def test_raised_limit_starts_waiting_steps_at_once(make_engine: Any, effects: Path) -> None:
    app = lg.App()
    gate = asyncio.Event()

    async def blocked(ctx: lg.Context) -> int:
        note("start", ctx.run_id, "b")
        await gate.wait()
        return 1

    @app.workflow(name="live", flow_control=lg.FlowControl("live", parallelism=1))
    async def live(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("b", blocked, ctx))

    async with make_engine(app) as engine:
        handles = await asyncio.gather(*(engine.start("live", {"n": i}) for i in range(5)))
        await eventually(lambda: _waiting(engine, "live", 4), what="4 waiting behind 1")
        row = await engine.set_flow_limits("live", parallelism=5)
        assert (row.parallelism, row.source) == (5, "operator")
        await eventually(lambda: len(spans(effects)) == 5, timeout=5, what="all five started once raised")
        gate.set()
        assert await results(engine, handles) == [1] * 5
        # an operator's limits stand: the declaration does not bring parallelism 1 back
        assert await engine.run("live", {"n": 9}) == 1
        assert (await engine.flow_keys("live"))[0].parallelism == 5


async def _waiting(engine: lg.Engine, key: str, n: int) -> bool:
    rows = await engine.flow_keys(key)
    return bool(rows) and rows[0].waiting == n


async def test_retry_after_pauses_the_key_for_every_run(make_engine: Any, effects: Path) -> None:
    app = lg.App()
    calls: list[str] = []

    def provider(ctx: lg.Context) -> int:
        calls.append(ctx.run_id)
        if len(calls) == 1:
            raise lg.RetryAfter(1.0, "slow down")
        return 1

    @app.workflow(name="bp", flow_control=lg.FlowControl("llm", parallelism=5))
    async def bp(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("call", provider, ctx, retry=lg.Retry(max_attempts=3, jitter=False)))

    async with make_engine(app) as engine:
        first = await engine.start("bp", {"n": 0})
        await eventually(lambda: _paused(engine, "llm"), what="the key paused")
        pauses = await engine.pauses()
        assert any(p["scope"] == "key:llm" for p in pauses)
        loop = asyncio.get_running_loop()
        began = loop.time()
        others = await asyncio.gather(*(engine.start("bp", {"n": i}) for i in range(1, 4)))
        await eventually(lambda: _waiting(engine, "llm", 3), what="others wait while paused")
        assert calls == [first.run_id]  # nobody called the provider while it asked for room
        assert await results(engine, [first, *others]) == [1] * 4
        assert loop.time() - began >= 0.5  # they waited for the pause to end


async def _paused(engine: lg.Engine, key: str) -> bool:
    rows = await engine.flow_keys(key)
    return bool(rows) and rows[0].paused


# -- ctx.rate_limit, observability -------------------------------------------------------------------


async def test_rate_limit_in_body_is_journaled(make_engine: Any, effects: Path, store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="rl")
    async def rl(ctx: lg.Context, p: Job) -> int:
        await ctx.rate_limit("send", limit=2, period="500ms", key=p.tenant)
        note("start", ctx.run_id, "send")
        await ctx.sleep("pause", "10ms")  # a park: the body is replayed past its rate_limit
        return 1

    async with make_engine(app, inline_sleep=0.05) as engine:
        audit_flow_starts(store_url)
        handles = await asyncio.gather(*(engine.start("rl", {"n": i}) for i in range(6)))
        assert await results(engine, handles) == [1] * 6
        steps = await engine.steps(handles[0].run_id or "")
    assert len(spans(effects)) == 6
    (granted,) = granted_starts(store_url).values()  # the store's grants (see flow_audit)
    assert len(granted) == 6
    assert max_in_window(granted, 0.5) <= 2
    assert [s.kind for s in steps if s.name == "$rate:send"] == ["rate"]


async def test_rate_limit_bad_arguments_fail_the_run_naming_the_field(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="rl-bad")
    async def rl_bad(ctx: lg.Context, p: Job) -> int:
        await ctx.rate_limit("x", limit=0, period="1s")
        return 1

    async with make_engine(app) as engine:
        with pytest.raises(lg.RunFailed, match=r"InvalidArgument.*limit: must be positive"):
            await engine.run("rl-bad", {"n": 0})


async def test_journal_records_flow_wait_and_cli_reads_keys(make_engine: Any, store_url: str) -> None:
    app = lg.App()
    gate = asyncio.Event()

    async def first() -> int:
        await gate.wait()
        return 1

    @app.workflow(name="obs", flow_control=lg.FlowControl("obs", parallelism=1, rate=100, period="1m"))
    async def obs(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("s", first))

    @app.workflow(name="other")
    async def other(ctx: lg.Context, p: Job) -> int:
        await gate.wait()
        return p.n

    async with make_engine(app, max_concurrent_runs=3) as engine:
        a = await engine.start("obs", {"n": 1})
        await eventually(lambda: _running(engine, "obs", 1), what="first holds the slot")
        b = await engine.start("obs", {"n": 2})
        await eventually(lambda: _waiting(engine, "obs", 1), what="second waits")
        row = (await engine.flow_keys("obs"))[0]
        assert (row.running, row.waiting, row.started, row.rate, row.period) == (1, 1, 1, 100, 60.0)
        assert row.oldest_waiting is not None and row.oldest_waiting >= 0

        # the first in line waits in place for the slot, and so does the one behind it while the worker has
        # nothing else to do; a run due that needs its place parks it, and it is shown so
        c = await engine.start("obs", {"n": 3})
        await eventually(lambda: _waiting(engine, "obs", 2), what="third waits")
        d = await engine.start("other", {"n": 4})

        async def parked() -> bool:
            shown = await engine.get_run(c.run_id or "")
            flows = await engine.flow(workflow="obs")
            return shown.waiting_on == "flow" and [r.flow_waiting for r in flows] == [1]

        await eventually(parked, what="shown parked on flow by show and flow()")
        assert (await engine.get_run(b.run_id or "")).waiting_on is None  # waiting in place, not parked
        await eventually(lambda: d.run_id in engine.executing, what="the other run in the parked one's place")
        await asyncio.sleep(0.2)
        gate.set()
        assert await results(engine, [a, b, c, d]) == [1, 1, 1, 4]
        steps_a = await engine.steps(a.run_id or "")
        steps_b = await engine.steps(b.run_id or "")
    assert steps_a[0].flow_wait == 0
    assert steps_b[0].flow_wait is not None and steps_b[0].flow_wait >= 0.15

    proc = await asyncio.create_subprocess_exec(
        *_cli(store_url, "flow-keys", "list", "--format", "json"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    listed = json.loads(out)["keys"]
    assert [(k["key"], k["parallelism"], k["rate"], k["source"]) for k in listed] == [("obs", 1, 100, "declared")]
    proc = await asyncio.create_subprocess_exec(
        *_cli(store_url, "flow-keys", "set", "obs", "--parallelism", "4"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out
    store = open_store(store_url)
    await store.open()
    try:
        rows = await Inspector(store).flow_keys("obs")
    finally:
        await store.close()
    assert (rows[0].parallelism, rows[0].rate, rows[0].period, rows[0].source) == (4, 100, 60.0, "operator")
    proc = await asyncio.create_subprocess_exec(
        *_cli(store_url, "flow-keys", "set", "obs", "--parallelism", "0"), stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode != 0 and b"parallelism" in err


def _cli(store_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "lockgate.cli", *args, "--store", store_url]


async def test_first_come_first_served_and_priority_breaks_ties(make_engine: Any, effects: Path) -> None:
    app = lg.App()
    gate = asyncio.Event()

    async def step(ctx: lg.Context, p: Job) -> int:
        note("start", ctx.run_id, f"n{p.n}")
        if p.n == 0:
            await gate.wait()
        return p.n

    @app.workflow(name="line", flow_control=lg.FlowControl("line", parallelism=1), priority=lambda p: p.n // 10)
    async def line(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("s", step, ctx, p))

    async with make_engine(app) as engine:
        first = await engine.start("line", {"n": 0})
        await eventually(lambda: _running(engine, "line", 1), what="the first holds the slot")
        handles = [first]
        for n in (1, 2, 13, 3):  # 13 has a higher priority (1) than the others (0)
            handles.append(await engine.start("line", {"n": n}))
            await eventually(lambda n=n: _waiting(engine, "line", len(handles) - 1), what=f"{n} in line")
        gate.set()
        assert await results(engine, handles) == [0, 1, 2, 13, 3]
    order = [s.step for s in sorted(spans(effects), key=lambda s: s.start)]
    assert order == ["n0", "n13", "n1", "n2", "n3"]


async def test_a_retried_step_that_parks_for_its_key_keeps_counting_its_attempts(make_engine: Any) -> None:
    """Attempts of one step count across the parks between them: ``max_attempts`` holds in total."""
    app = lg.App()
    calls: list[str] = []

    def flaky() -> int:
        calls.append("call")
        raise ValueError("provider said no")

    async def hold() -> int:
        await asyncio.sleep(0.4)
        return 1

    @app.workflow(name="flaky", flow_control=lg.FlowControl("solo", parallelism=1))
    async def flaky_body(ctx: lg.Context, p: Job) -> str:
        try:
            await ctx.step("call", flaky, retry=lg.Retry(max_attempts=3, base_delay=0.2, jitter=False))
        except lg.StepFailed as exc:
            return f"failed after {exc.attempts}"
        return "succeeded"

    @app.workflow(name="hog", flow_control=lg.FlowControl("solo", parallelism=1))
    async def hog(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("a", hold)) + int(await ctx.step("b", hold))

    async with make_engine(app) as engine:
        first = await engine.start("flaky", {"n": 0})
        hogs = [await engine.start("hog", {"n": n}) for n in range(3)]  # they queue for the slot meanwhile
        assert await engine.result(first.run_id or "", timeout=60) == "failed after 3"
        await results(engine, hogs)
        assert len(calls) == 3, calls
        attempts = await engine.attempts(first.run_id or "")
        assert sorted(a.attempt for a in attempts if a.step_key.startswith("call")) == [1, 2, 3]


async def test_a_start_parked_for_its_slot_keeps_its_own_flow_control(make_engine: Any) -> None:
    """``start(flow_control=)`` on a start the gate parks: the run admitted later (its slot handed on
    by the run ending, or freed by a cancel and drained) runs its steps under those limits."""
    app = lg.App()
    release = asyncio.Event()

    @app.workflow(name="slotted", concurrency=lg.Concurrency(limit=1, key=lambda p: p.tenant))
    async def slotted(ctx: lg.Context, p: Job) -> str | None:
        async def probe() -> str | None:
            if p.n == 0:
                await release.wait()
            found = ctx.flow_control
            return None if found is None else found.key

        return await ctx.step("probe", probe)  # type: ignore[no-any-return]

    async with make_engine(app) as engine:
        holder = await engine.start("slotted", {"n": 0, "tenant": "a"})
        parked = await engine.start(
            "slotted", {"n": 1, "tenant": "a"}, flow_control=lg.FlowControl("given", parallelism=2)
        )
        assert parked.status == "queued"
        release.set()  # the holder ends: its slot passes to the parked start
        assert await engine.result(holder.run_id or "", timeout=30) is None
        [run] = [r for r in await engine.list_runs(workflow="slotted") if r.payload["n"] == 1]
        assert await engine.result(run.id, timeout=30) == "given"

        release.clear()
        stuck = await engine.start("slotted", {"n": 0, "tenant": "b"})
        later = await engine.start("slotted", {"n": 2, "tenant": "b"}, flow_control=lg.FlowControl("drained", rate=5))
        assert later.status == "queued"
        await engine.cancel(stuck.run_id or "", "free the slot")  # the drainer admits the parked start
        found = await eventually(
            lambda: _run_of(engine, 2), timeout=30, what="the parked start admitted by the drainer"
        )
        assert await engine.result(found, timeout=30) == "drained"
        release.set()


async def _run_of(engine: lg.Engine, n: int) -> str | None:
    runs = [r for r in await engine.list_runs(workflow="slotted") if r.payload["n"] == n]
    return runs[0].id if runs else None
