"""Steps: where they run, how their values are stored and replayed, parallel steps, recovery."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg


class Job(BaseModel):
    n: int = 3


class Go(BaseModel):
    go: bool = True


class Quote(BaseModel):
    sku: str
    cents: int


@dataclass
class Shipment:
    carrier: str
    parcels: list[int]


class Flaky(Exception):
    pass


async def wait_until(check: Any, *, timeout: float = 10.0) -> None:
    """Poll ``check()`` (sync or async) until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = check()
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


async def parked(engine: lg.Engine, run_id: str, waiting_on: str) -> bool:
    run = await engine.get_run(run_id)
    return run.waiting_on == waiting_on and run.owner is None and run_id not in engine.executing


# -- where steps run -------------------------------------------------------------------


async def test_sync_step_runs_in_a_worker_thread_and_async_step_on_the_loop(env_factory: Any) -> None:
    app = lg.App()
    seen: dict[str, Any] = {}

    def blocking() -> int:
        seen["sync"] = threading.get_ident()
        return 1

    async def awaited() -> int:
        seen["async"] = threading.get_ident()
        await asyncio.sleep(0)
        return 2

    @app.workflow(name="where")
    async def where(ctx: lg.Context, p: Job) -> int:
        seen["loop"] = threading.get_ident()
        return int(await ctx.step("sync", blocking) + await ctx.step("async", awaited))

    async with env_factory(app) as env:
        assert await env.engine.run("where", {}, timeout=10) == 3
    assert seen["sync"] != seen["loop"]
    assert seen["async"] == seen["loop"] == threading.get_ident()


# -- values, journal, replay -------------------------------------------------------------


async def test_values_are_stored_and_replayed_decoded_without_calling_again(env_factory: Any) -> None:
    app = lg.App()
    calls: Counter[str] = Counter()
    seen: list[tuple[Any, ...]] = []

    def quote() -> Quote:
        calls["quote"] += 1
        return Quote(sku="tea", cents=450)

    def ship() -> Shipment:
        calls["ship"] += 1
        return Shipment(carrier="post", parcels=[1, 2])

    async def total(q: Quote, extra: int = 0) -> int:
        calls["total"] += 1
        return q.cents + extra

    def quotes() -> list[Quote]:
        calls["quotes"] += 1
        return [Quote(sku="a", cents=1), Quote(sku="b", cents=2)]

    def label() -> str:
        calls["label"] += 1
        return "fragile"

    def nothing() -> None:
        calls["nothing"] += 1

    @app.workflow(name="values")
    async def values(ctx: lg.Context, p: Job) -> str:
        q = await ctx.step("quote", quote)
        s = await ctx.step("ship", ship)
        t = await ctx.step("total", total, q, extra=50)
        qs = await ctx.step("quotes", quotes)
        lb = await ctx.step("label", label)
        nn = await ctx.step("nothing", nothing)
        seen.append((q, s, t, qs, lb, nn))
        await ctx.wait_for_signal("go", Go)
        return f"{q.sku}:{s.carrier}:{t}:{len(qs)}:{lb}"

    async with env_factory(app) as env:
        handle = await env.engine.start("values", {})
        await env.settle()
        assert await parked(env.engine, handle.run_id, "signal")
        await env.engine.signal(handle.run_id, "go", {})
        assert await env.engine.result(handle.run_id, timeout=10) == "tea:post:500:2:fragile"
        steps = {s.key: s for s in await env.engine.steps(handle.run_id)}

    assert calls == {"quote": 1, "ship": 1, "total": 1, "quotes": 1, "label": 1, "nothing": 1}
    assert len(seen) == 2  # the body was entered twice: once live, once replaying
    live, replayed = seen
    assert live == replayed
    q, s, t, qs, lb, nn = replayed
    assert isinstance(q, Quote) and q == Quote(sku="tea", cents=450)
    assert isinstance(s, Shipment) and s == Shipment(carrier="post", parcels=[1, 2])
    assert type(t) is int and t == 500
    assert all(isinstance(x, Quote) for x in qs)
    assert (lb, nn) == ("fragile", None)
    assert steps["quote#0"].output == {"sku": "tea", "cents": 450}
    assert steps["ship#0"].output == {"carrier": "post", "parcels": [1, 2]}
    assert steps["total#0"].output == 500
    assert [steps[k].kind for k in ("quote#0", "signal:go#0")] == ["step", "signal"]
    assert all(steps[k].status == "completed" and steps[k].attempts == 1 for k in ("quote#0", "label#0"))


async def test_step_name_reused_in_a_loop_is_journaled_per_occurrence(env_factory: Any) -> None:
    app = lg.App()
    calls: list[int] = []

    def fetch(page: int) -> list[int]:
        calls.append(page)
        return [page * 10, page * 10 + 1]

    @app.workflow(name="pages")
    async def pages(ctx: lg.Context, p: Job) -> int:
        rows: list[int] = []
        for page in range(p.n):
            rows += await ctx.step("fetch", fetch, page)
        await ctx.wait_for_signal("go", Go)
        return sum(rows)

    async with env_factory(app) as env:
        handle = await env.engine.start("pages", {"n": 3})
        await env.settle()
        await env.engine.signal(handle.run_id, "go", {})
        assert await env.engine.result(handle.run_id, timeout=10) == 0 + 1 + 10 + 11 + 20 + 21
        steps = [s for s in await env.engine.steps(handle.run_id) if s.kind == "step"]
    assert [(s.key, s.name, s.output) for s in steps] == [
        ("fetch#0", "fetch", [0, 1]),
        ("fetch#1", "fetch", [10, 11]),
        ("fetch#2", "fetch", [20, 21]),
    ]
    assert calls == [0, 1, 2]


async def test_failed_step_raises_step_failed_and_replays_the_failure(env_factory: Any) -> None:
    app = lg.App()
    calls: list[str] = []
    caught: list[lg.StepFailed] = []

    def charge() -> str:
        calls.append("charge")
        raise Flaky("card declined")

    @app.workflow(name="fallback")
    async def fallback(ctx: lg.Context, p: Job) -> str:
        try:
            return str(await ctx.step("charge", charge))
        except lg.StepFailed as exc:
            caught.append(exc)
        await ctx.wait_for_signal("go", Go)
        return "invoice instead"

    async with env_factory(app) as env:
        handle = await env.engine.start("fallback", {})
        await env.settle()
        await env.engine.signal(handle.run_id, "go", {})
        assert await env.engine.result(handle.run_id, timeout=10) == "invoice instead"
        steps = {s.key: s for s in await env.engine.steps(handle.run_id)}
    assert calls == ["charge"]
    assert [(e.step, e.error_tag, e.error_message, e.attempts) for e in caught] == [
        ("charge", "Flaky", "card declined", 1)
    ] * 2
    assert (steps["charge#0"].status, steps["charge#0"].error_tag) == ("failed", "Flaky")


async def test_step_refusals_fail_the_run_naming_the_step(env_factory: Any) -> None:
    app = lg.App()

    def unstorable() -> Any:
        return object()

    @app.workflow(name="not-callable")
    async def not_callable(ctx: lg.Context, p: Job) -> None:
        await ctx.step("oops", 42)  # type: ignore[arg-type]

    @app.workflow(name="unstorable")
    async def not_storable(ctx: lg.Context, p: Job) -> None:
        await ctx.step("blob", unstorable)

    async with env_factory(app) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("not-callable", {}, timeout=10)
        assert info.value.error_tag == "TypeError"
        assert "'oops'" in (info.value.error_message or "")
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("unstorable", {}, timeout=10)
        assert "'blob'" in (info.value.error_message or "")


# -- parallel steps ----------------------------------------------------------------------


async def test_parallel_async_steps_overlap_and_journal_independently(env_factory: Any) -> None:
    app = lg.App()
    spans: dict[str, tuple[float, float]] = {}

    async def call(name: str) -> str:
        start = time.monotonic()
        await asyncio.sleep(0.05)
        spans[name] = (start, time.monotonic())
        return name.upper()

    @app.workflow(name="fan-out")
    async def fan_out(ctx: lg.Context, p: Job) -> list[str]:
        return list(await asyncio.gather(ctx.step("left", call, "left"), ctx.step("right", call, "right")))

    async with env_factory(app) as env:
        handle = await env.engine.start("fan-out", {})
        assert await env.engine.result(handle.run_id, timeout=10) == ["LEFT", "RIGHT"]
        steps = {s.key: s for s in await env.engine.steps(handle.run_id)}
        attempts = {a.step_key for a in await env.engine.attempts(handle.run_id)}
    (l_start, l_end), (r_start, r_end) = spans["left"], spans["right"]
    assert max(l_start, r_start) < min(l_end, r_end)  # the two intervals intersect
    assert (steps["left#0"].output, steps["right#0"].output) == ("LEFT", "RIGHT")
    assert attempts == {"left#0", "right#0"}


async def test_parallel_sync_steps_run_in_threads_at_once(env_factory: Any) -> None:
    app = lg.App()
    spans: dict[str, tuple[float, float]] = {}
    both_inside = threading.Barrier(2, timeout=5)  # breaks unless both steps are inside together

    def call(name: str) -> str:
        start = time.monotonic()
        both_inside.wait()
        spans[name] = (start, time.monotonic())
        return name

    @app.workflow(name="threads")
    async def threads(ctx: lg.Context, p: Job) -> list[str]:
        return list(await asyncio.gather(ctx.step("a", call, "a"), ctx.step("b", call, "b")))

    async with env_factory(app) as env:
        assert await env.engine.run("threads", {}, timeout=10) == ["a", "b"]
    assert max(spans["a"][0], spans["b"][0]) < min(spans["a"][1], spans["b"][1])


async def test_recovery_replays_a_finished_sibling_and_reruns_the_unfinished_one(make_engine: Any) -> None:
    app = lg.App()
    calls: Counter[str] = Counter()
    slow_entered = threading.Event()
    release = threading.Event()

    def quick() -> str:
        calls["quick"] += 1
        return "q"

    def slow() -> str:
        calls["slow"] += 1
        slow_entered.set()
        release.wait(10)
        return "s"

    @app.workflow(name="siblings")
    async def siblings(ctx: lg.Context, p: Job) -> str:
        a, b = await asyncio.gather(ctx.step("quick", quick), ctx.step("slow", slow))
        return f"{a}{b}"

    try:
        async with make_engine(app) as first:
            handle = await first.start("siblings", {})
            run_id = handle.run_id

            async def quick_journaled() -> bool:
                return any(s.key == "quick#0" and s.status == "completed" for s in await first.steps(run_id))

            await wait_until(quick_journaled)
            await wait_until(slow_entered.is_set)
        # the first engine stopped mid-way: its slow step never finished
        slow_entered.clear()
        async with make_engine(app) as second:
            await wait_until(slow_entered.is_set)
            release.set()
            assert await second.result(run_id, timeout=10) == "qs"
            steps = {s.key: s.status for s in await second.steps(run_id)}
            run = await second.get_run(run_id)
    finally:
        release.set()
    assert calls == {"quick": 1, "slow": 2}
    assert steps == {"quick#0": "completed", "slow#0": "completed"}
    assert run.entries == 2
