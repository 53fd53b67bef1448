"""Weighted step flow keys: ``FlowControl(cost=)`` counts units (tokens, say) in the key's window.

A call reserves its cost when admitted; ``ctx.settle`` (or ``settle=``) replaces the reservation
with the units it really used. A call is admitted only when the units counted in the trailing
period plus its own reservation fit the rate. Semantics on the fake clock (the journal's instants
are exact), on both stores.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import create_app

from .apps.stepflow import max_overlap
from .apps.waits import eventually
from .flow_audit import audit_flow_starts, check_units, units_events
from .test_observability import samples

T0 = 1_800_000_000.0


class Call(BaseModel):
    reserve: int
    used: int


async def llm(reserve: int, used: int) -> int:
    return used


def weighted_app(**control: Any) -> lg.App:
    app = lg.App()
    fc = lg.FlowControl("llm", rate=100, period="1m", cost=lambda reserve, used: reserve, **control)

    @app.workflow(name="ask", flow_control=fc)
    async def ask(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", llm, p.reserve, p.used))

    return app


async def started(engine: lg.Client, handle: lg.RunHandle) -> float | None:
    for entry in await engine.steps(handle.run_id or ""):
        if entry.name == "llm" and entry.status == "completed":
            assert isinstance(entry.started_at, datetime)
            return entry.started_at.timestamp() - T0
    return None


async def test_a_settled_refund_lets_the_next_call_in_and_an_overrun_holds_the_window(env_factory: Any) -> None:
    app = weighted_app(settle=lambda used: used)
    async with env_factory(app, start=T0, inline_sleep=0) as env:
        engine = env.engine
        a = await engine.start("ask", {"reserve": 60, "used": 20})  # reserves 60, settles at 20
        await env.settle()
        await env.advance("10s")
        b = await engine.start("ask", {"reserve": 50, "used": 70})  # 20 + 50 fit; settles 20 over
        await env.settle()
        c = await engine.start("ask", {"reserve": 40, "used": 40})  # 20 + 70 + 40 > 100: waits
        await env.settle()
        assert [await started(engine, h) for h in (a, b, c)] == [0, 10, None]
        (key,) = await engine.flow_keys("llm")
        assert (key.weighted, key.units_reserved, key.units_settled, key.units_available) == (True, 0, 90, 10)
        assert key.waiting == 1
        await env.advance("50s")  # a's 20 leave the window: 70 + 40 > 100 still
        assert await started(engine, c) is None
        await env.advance("10s")  # b's 70 leave too, at 70s
        assert await started(engine, c) == 70
        assert await engine.result(c.run_id or "", timeout=10) == 40


class Mixed(BaseModel):
    cost: int
    used: int
    how: str  # ctx: ctx.settle inside the step; result: settle= of its result; none: never settled
    ms: int
    override: bool


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    rate=st.integers(min_value=8, max_value=40),
    parallelism=st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
    calls=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=40),
            st.integers(min_value=0, max_value=60),
            st.sampled_from(["ctx", "result", "none"]),
            st.integers(min_value=0, max_value=15),
            st.booleans(),
        ),
        min_size=3,
        max_size=8,
    ),
    engines=st.integers(min_value=1, max_value=2),
    gathered=st.booleans(),
)
def test_the_units_counted_at_each_admission_never_exceed_the_rate(
    store_url: str,
    rate: int,
    parallelism: int | None,
    calls: list[tuple[int, int, str, int, bool]],
    engines: int,
    gathered: bool,
) -> None:
    """Random costs, settlements (inside the step, from its result, or none; under or over the
    reservation), step lengths, one or two engines, steps in sequence or gathered: replayed from the
    store's own writes (``flow_audit``), every admission saw the units counted in its trailing period
    plus its own reservation within the rate, and once all settled no window holds more than the rate
    plus the under-estimates of the calls it admitted before they settled; every step ran once."""
    payloads = [Mixed(cost=min(c, rate), used=u, how=h, ms=ms, override=o) for c, u, h, ms, o in calls]
    asyncio.run(_mixed(store_url, rate, parallelism, payloads, engines, gathered))


async def _mixed(
    store_url: str, rate: int, parallelism: int | None, payloads: list[Mixed], engines: int, gathered: bool
) -> None:
    period = 0.4
    key = f"units-{uuid.uuid4().hex[:8]}"  # examples share the test's store: each its own key
    ran: list[str] = []
    intervals: list[tuple[float, float]] = []
    app = lg.App()
    control = lg.FlowControl(
        key, rate=rate, period=period, parallelism=parallelism, cost=lambda tag, p: p.cost if not p.override else 1
    )

    @app.workflow(name=f"units-{key}", flow_control=control)
    async def units(ctx: lg.Context, p: Mixed) -> int:
        async def call(tag: str, p: Mixed) -> int:
            loop = asyncio.get_running_loop()
            began = loop.time()
            ran.append(tag)
            await asyncio.sleep(p.ms / 1000)
            if p.how == "ctx":
                ctx.settle(p.used)
            intervals.append((began, loop.time()))
            return p.used

        def one(name: str) -> Any:
            settle = (lambda used: used) if p.how == "result" else None
            cost = p.cost if p.override else None
            return ctx.step(name, call, f"{ctx.run_id}:{name}", p, cost=cost, settle=settle)

        if gathered:
            return sum(await asyncio.gather(one("a"), one("b")))
        return int(await one("a")) + int(await one("b"))

    opts: dict[str, Any] = {"poll_interval": 0.05, "inline_sleep": 0.1, "lease": "30s"}
    async with lg.Engine(app, store_url, **opts) as one, lg.Engine(app, store_url, **opts) as two:
        audit_flow_starts(store_url)
        pick = [one, two][:engines]
        handles = await asyncio.gather(
            *(pick[i % engines].start(f"units-{key}", p.model_dump()) for i, p in enumerate(payloads))
        )
        outs = [await one.result(h.run_id or "", timeout=120) for h in handles]
    assert outs == [2 * p.used for p in payloads]
    assert Counter(ran) == Counter(f"{h.run_id}:{s}" for h in handles for s in ("a", "b"))  # each step ran once
    if parallelism is not None:
        assert max_overlap(intervals) <= parallelism
    events = units_events(store_url)[key]
    assert sum(1 for e in events if e.settled is None) == len(ran)  # no step ran without its admission
    assert sorted(e.units for e in events if e.settled is None) == sorted(p.cost for p in payloads for _ in "ab")
    settled = Counter(e.settled for e in events if e.settled is not None)
    assert settled == Counter(p.used for p in payloads for _ in "ab" if p.how != "none")
    check_units(events, rate, period)


# -- what an operator reads: flow-keys, /metrics, the dashboard ------------------------------------------------


async def test_units_reserved_settled_and_available_are_shown_everywhere(make_engine: Any, store_url: str) -> None:
    app = lg.App()
    hold = asyncio.Event()

    async def tokens(ctx: lg.Context, p: Call) -> int:
        if p.used < 0:
            await hold.wait()  # still running: its reservation is not settled
            return 0
        ctx.settle(p.used)
        return p.used

    fc = lg.FlowControl("tokens", rate=1000, period="1h", cost=lambda ctx, p: p.reserve)

    @app.workflow(name="chat", flow_control=fc)
    async def chat(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", tokens, ctx, p))

    async with make_engine(app) as engine:
        done = await engine.start("chat", {"reserve": 300, "used": 120})
        assert await engine.result(done.run_id or "", timeout=20) == 120
        running = await engine.start("chat", {"reserve": 200, "used": -1})

        async def counted() -> bool:
            rows = await engine.flow_keys("tokens")
            return bool(rows) and rows[0].running == 1

        await eventually(counted, what="the second call holds its reservation")
        (row,) = await engine.flow_keys("tokens")
        assert (row.weighted, row.units_reserved, row.units_settled, row.units_available) == (True, 200, 120, 680)
        assert row.started == 2

        transport = httpx.ASGITransport(app=create_app(engine.client))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            got = samples((await http.get("/metrics")).text)
            page = (await http.get("/ui/flow")).text
        for state, value in (("reserved", 200), ("settled", 120), ("available", 680)):
            assert got[("lockgate_flow_key_units", (("key", "tokens"), ("state", state)))] == value
        shown = re.search(r'<tr data-key="tokens">(.*?)</tr>', page, re.S)
        assert shown is not None
        cells = dict(re.findall(r'data-col="(units_\w+)">(\d+)<', shown.group(1)))
        assert cells == {"units_reserved": "200", "units_settled": "120", "units_available": "680"}
        assert "1000 units / 3600s" in shown.group(1)

        cli = [sys.executable, "-m", "lockgate.cli", "flow-keys", "show", "tokens", "--store", store_url]
        proc = await asyncio.create_subprocess_exec(*cli, "--format", "json", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        shown_json = json.loads(out)
        assert {k: shown_json[k] for k in ("weighted", "units_reserved", "units_settled", "units_available")} == {
            "weighted": True,
            "units_reserved": 200,
            "units_settled": 120,
            "units_available": 680,
        }
        proc = await asyncio.create_subprocess_exec(*cli, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        text = " ".join(out.decode().split())
        assert "1000 units / 1h" in text or "1000 units / 60m" in text, text
        assert "units in the window: 200 reserved, 120 settled, 680 available of 1000" in text
        hold.set()
        assert await engine.result(running.run_id or "", timeout=20) == 0


# -- bad input: typed errors naming the problem, nothing written -----------------------------------------------


@pytest.mark.parametrize(
    ("control", "field"),
    [
        (lg.FlowControl("k", rate=10, cost=0), "flow_control.cost"),
        (lg.FlowControl("k", rate=10, cost=-3), "flow_control.cost"),
        (lg.FlowControl("k", rate=10, cost=1.5), "flow_control.cost"),  # type: ignore[arg-type]
        (lg.FlowControl("k", rate=10, cost=True), "flow_control.cost"),
        (lg.FlowControl("k", rate=10, cost=11), "flow_control.cost"),  # could never fit
        (lg.FlowControl("k", parallelism=2, cost=1), "flow_control.cost"),  # units need a rate
        (lg.FlowControl("k", rate=10, burst=2, cost=1), "flow_control.cost"),  # weighted and burst: refused
        (lg.FlowControl("k", rate=10, settle=lambda r: r), "flow_control.settle"),  # nothing to settle
        (lg.FlowControl("k", rate=10, cost=1, settle=5), "flow_control.settle"),  # type: ignore[arg-type]
        (lg.FlowControl("k", rate=2**53, cost=1), "flow_control.rate"),  # past what a count holds exactly
    ],
)
async def test_a_bad_weighted_declaration_is_refused_at_boot_and_at_start(
    control: lg.FlowControl, field: str, make_engine: Any
) -> None:
    app = lg.App()

    @app.workflow(name="w", flow_control=control)
    async def w(ctx: lg.Context, p: Call) -> int:
        return 0

    with pytest.raises(lg.DefinitionError, match=field.split(".")[1]):
        async with make_engine(app):
            pass
    plain = lg.App()

    @plain.workflow(name="w")
    async def w2(ctx: lg.Context, p: Call) -> int:
        return 0

    async with make_engine(plain) as engine:
        with pytest.raises(lg.InvalidArgument, match=field):
            await engine.start("w", {"reserve": 1, "used": 1}, flow_control=control)
        assert await engine.list_runs() == []


async def test_a_rate_of_billions_of_units_is_kept_and_counted(make_engine: Any) -> None:
    """Tokens per minute of a large account pass 2**31: such a key is stored, counted and shown whole."""
    app = lg.App()
    fc = lg.FlowControl("big", rate=6_000_000_000, period="1m", cost=lambda reserve, used: reserve)

    @app.workflow(name="ask", flow_control=fc)
    async def ask(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", llm, p.reserve, p.used))

    async with make_engine(app) as engine:
        handle = await engine.start("ask", {"reserve": 3_000_000_000, "used": 2_500_000_000})
        assert await engine.result(handle.run_id or "", timeout=30) == 2_500_000_000
        (key,) = await engine.flow_keys("big")
        assert key.rate == 6_000_000_000


async def test_a_callable_cost_is_not_stored_with_a_start(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="w")
    async def w(ctx: lg.Context, p: Call) -> int:
        return 0

    async with make_engine(app) as engine:
        fc = lg.FlowControl("k", rate=10, cost=lambda *a: 1)
        with pytest.raises(lg.InvalidArgument, match=r"flow_control\.cost: a callable cannot be stored"):
            await engine.start("w", {"reserve": 1, "used": 1}, flow_control=fc)
        assert await engine.list_runs() == []


async def _refused(
    make_engine: Any, body: Any, control: lg.FlowControl | None, starts: int = 0
) -> tuple[str | None, str | None]:
    """Run ``body`` under ``control``: it fails; what with (tag, message). Nothing of a step ``llm`` was
    journaled and no key holds more than ``starts`` starts or any waiter."""
    app = lg.App()
    app.workflow(name="w", flow_control=control)(body)
    async with make_engine(app) as engine:
        handle = await engine.start("w", {"reserve": 1, "used": 1})
        with pytest.raises(lg.RunFailed) as failed:
            await engine.result(handle.run_id or "", timeout=20)
        assert [s for s in await engine.steps(handle.run_id or "") if s.name == "llm"] == []  # nothing journaled
        keys = [k for k in await engine.flow_keys() if control is not None and k.key == control.key]
        assert all(k.started == starts and k.waiting == 0 and not k.units_reserved for k in keys), keys
    return failed.value.error_tag, failed.value.error_message


WEIGHTED = lg.FlowControl("llm", rate=100, period="1m", cost=10)


@pytest.mark.parametrize(
    ("control", "options", "tag", "words"),
    [
        (WEIGHTED, {"cost": 0}, "InvalidArgument", "ctx.step(..., cost=): must be positive"),
        (WEIGHTED, {"cost": 2.5}, "InvalidArgument", "ctx.step(..., cost=): must be a positive int"),
        (WEIGHTED, {"cost": 101}, "CostExceedsRate", "reserves 101 units of flow key 'llm'"),
        (WEIGHTED, {"settle": 3}, "InvalidArgument", "settle=): must be a callable"),
        (lg.FlowControl("llm", rate=100), {"cost": 5}, "InvalidArgument", "which counts calls"),
        (None, {"cost": 5}, "InvalidArgument", "no flow key"),
        (None, {"settle": lambda r: r}, "InvalidArgument", "no flow key"),
    ],
)
async def test_a_bad_cost_or_settle_on_a_step_fails_it_typed_with_nothing_written(
    make_engine: Any, control: lg.FlowControl | None, options: dict[str, Any], tag: str, words: str
) -> None:
    async def body(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", llm, p.reserve, p.used, **options))

    got_tag, message = await _refused(make_engine, body, control)
    assert got_tag == tag and words in (message or ""), message


async def test_a_callable_cost_over_the_rate_or_failing_is_refused(make_engine: Any) -> None:
    async def body(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", llm, p.reserve, p.used))

    over = lg.FlowControl("llm", rate=100, cost=lambda reserve, used: 500)
    assert (await _refused(make_engine, body, over))[0] == "CostExceedsRate"
    broken = lg.FlowControl("llm", rate=100, cost=lambda reserve, used: 1 / 0)
    tag, message = await _refused(make_engine, body, broken)
    assert tag == "InvalidArgument" and "flow_control.cost: callback raised ZeroDivisionError" in (message or "")
    nothing = lg.FlowControl("llm", rate=100, cost=lambda reserve, used: None)
    tag, message = await _refused(make_engine, body, nothing)
    assert tag == "InvalidArgument" and "flow_control.cost: must be a positive int" in (message or "")


async def test_a_settle_without_a_reservation_is_refused(make_engine: Any) -> None:
    async def settles(ctx: lg.Context) -> int:
        ctx.settle(5)
        return 1

    async def outside(ctx: lg.Context, p: Call) -> int:
        ctx.settle(5)  # in the body, not in a step
        return 0

    async def unweighted(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("other", settles, ctx))

    tag, message = await _refused(make_engine, outside, WEIGHTED)
    assert tag == "InvalidArgument" and "ctx.settle: no reservation to settle" in (message or ""), message
    for control, starts in ((lg.FlowControl("plain", rate=5), 1), (None, 0)):  # the step fails its attempt
        tag, message = await _refused(make_engine, unweighted, control, starts)
        assert tag == "InvalidArgument" and "step 'other' failed" in (message or ""), message
        assert "ctx.settle: no reservation to settle" in (message or "")

    async def negative(ctx: lg.Context) -> int:
        ctx.settle(-1)
        return 1

    async def bad(ctx: lg.Context, p: Call) -> int:
        return int(await ctx.step("llm", negative, ctx))

    tag, message = await _refused_step(make_engine, bad)
    assert tag == "InvalidArgument" and "ctx.settle: must be non-negative" in (message or "")


async def _refused_step(make_engine: Any, body: Any) -> tuple[str | None, str | None]:
    """A weighted step whose own code settles badly: the attempt fails, typed, and its reservation stands."""
    app = lg.App()
    app.workflow(name="w", flow_control=WEIGHTED)(body)
    async with make_engine(app) as engine:
        handle = await engine.start("w", {"reserve": 1, "used": 1})
        with pytest.raises(lg.RunFailed) as failed:
            await engine.result(handle.run_id or "", timeout=20)
        (key,) = await engine.flow_keys("llm")
        assert (key.units_reserved, key.units_settled) == (10, 0)
    return failed.value.error_tag, failed.value.error_message


async def test_rate_limit_counts_a_cost_in_units(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(name="send")
    async def send(ctx: lg.Context, p: Call) -> int:
        await ctx.rate_limit("mail", limit=10, period="10s", cost=p.reserve)
        return p.reserve

    async with env_factory(app, start=T0, inline_sleep=0) as env:
        handles = [await env.engine.start("send", {"reserve": n, "used": 0}) for n in (6, 4, 3)]
        await env.settle()
        done = [(await env.engine.get_run(h.run_id or "")).status for h in handles]
        assert done == ["succeeded", "succeeded", "running"]  # 6 + 4 fill the 10; 3 more wait
        await env.advance("10s")
        assert await env.engine.result(handles[2].run_id or "", timeout=10) == 3
        bad = await env.engine.start("send", {"reserve": 11, "used": 0})
        with pytest.raises(lg.RunFailed, match="could never start"):
            await env.engine.result(bad.run_id or "", timeout=10)
        zero = await env.engine.start("send", {"reserve": 0, "used": 0})
        with pytest.raises(lg.RunFailed, match=r"ctx.rate_limit\('mail'\): cost: must be positive"):
            await env.engine.result(zero.run_id or "", timeout=10)


async def test_a_key_is_weighted_for_every_workflow_that_declares_it(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="a", flow_control=lg.FlowControl("llm", rate=100, cost=5))
    async def a(ctx: lg.Context, p: Call) -> int:
        return 0

    @app.workflow(name="b", flow_control=lg.FlowControl("llm", rate=100))
    async def b(ctx: lg.Context, p: Call) -> int:
        return 0

    with pytest.raises(lg.DefinitionError, match="must declare the same limits"):
        async with make_engine(app):
            pass


async def test_a_waiting_call_over_a_rate_lowered_by_hand_is_refused(env_factory: Any) -> None:
    app = weighted_app()
    async with env_factory(app, start=T0, inline_sleep=0) as env:
        engine = env.engine
        first = await engine.start("ask", {"reserve": 80, "used": 80})
        await env.settle()
        second = await engine.start("ask", {"reserve": 60, "used": 60})  # 80 + 60 > 100: waits
        await env.settle()
        assert (await engine.flow_keys("llm"))[0].waiting == 1
        await engine.set_flow_limits("llm", rate=50, period="1m")
        await env.advance("60s")
        with pytest.raises(lg.RunFailed) as failed:
            await engine.result(second.run_id or "", timeout=10)
        assert failed.value.error_tag == "CostExceedsRate"
        assert "reserves 60 units of flow key 'llm', whose rate is 50" in (failed.value.error_message or "")
        (key,) = await engine.flow_keys("llm")
        assert (key.waiting, key.rate, key.weighted) == (0, 50, True)
        assert await engine.result(first.run_id or "", timeout=10) == 80
