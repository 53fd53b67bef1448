"""Step flow control with a burst: ``FlowControl(rate=, period=, burst=)`` as a token bucket per key.

Steps of an idle key start ``burst + 1`` at once, then one per ``period / rate``; no half-open
span of one period holds more than ``rate + burst`` step starts. The semantics run on the fake
clock (the step starts are the journal's instants, exact), on both stores; processes sharing a
key run on the real clock.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate_probes import sql
from .apps.stepflow import max_in_window
from .test_gate_burst import check_bucket

T0 = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[1]


class Job(BaseModel):
    n: int = 0


async def call(n: int) -> int:
    return n


def flow_app(control: lg.FlowControl) -> lg.App:
    app = lg.App()

    @app.workflow(name="flowed", flow_control=control)
    async def flowed(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("call", call, p.n))

    return app


async def step_starts(engine: lg.Client, handles: list[lg.RunHandle]) -> list[float]:
    """When each run's ``call`` step started (the journal's instants), in order."""
    out = []
    for h in handles:
        for entry in await engine.steps(h.run_id or ""):
            if entry.name == "call" and entry.status == "completed":
                assert isinstance(entry.started_at, datetime)
                out.append(entry.started_at.timestamp())
    return sorted(out)


async def test_an_idle_key_starts_the_burst_at_once_then_one_per_pace(env_factory: Any) -> None:
    # pace: 10s / 2 = 5s; an idle key starts 1 + 2 steps at once
    app = flow_app(lg.FlowControl("api", rate=2, period="10s", burst=2))
    async with env_factory(app, start=T0, inline_sleep=0) as env:
        engine = env.engine
        handles = [await engine.start("flowed", {"n": i}) for i in range(6)]
        await env.settle()
        assert [t - T0 for t in await step_starts(engine, handles)] == [0, 0, 0]
        for _ in range(3):
            await env.advance("5s")
        starts = await step_starts(engine, handles)
        assert [round(t - T0, 6) for t in starts] == [0, 0, 0, 5, 10, 15]
        check_bucket(starts, 2, 10.0, 2)

        # the runs whose step went through on burst say so: a flow-burst event, two of them
        bursts = []
        for h in handles:
            bursts += [e for e in await engine.events(h.run_id or "") if e.type == "flow-burst"]
        assert len(bursts) == 2
        assert all(e.data["key"] == "api" and "call" in e.data["step"] for e in bursts), bursts
        (key,) = await engine.flow_keys()
        assert (key.key, key.rate, key.period, key.burst) == ("api", 2, 10.0, 2)


async def test_ctx_flow_control_shows_the_burst(env_factory: Any) -> None:
    app = lg.App()
    seen: list[Any] = []

    @app.workflow(name="flowed", flow_control=lg.FlowControl("api", rate=3, period="1s", burst=1))
    async def flowed(ctx: lg.Context, p: Job) -> int:
        async def look() -> int:
            seen.append(ctx.flow_control)
            return 1

        return int(await ctx.step("look", look))

    async with env_factory(app, start=T0) as env:
        handle = await env.engine.start("flowed", {})
        assert await env.engine.result(handle.run_id or "", timeout=20) == 1
    assert seen == [lg.FlowControl("api", rate=3, period=1.0, burst=1)]


async def test_a_key_declared_again_without_a_burst_loses_it(env_factory: Any) -> None:
    bursty = flow_app(lg.FlowControl("api", rate=1, period="10s", burst=3))
    async with env_factory(bursty, start=T0, inline_sleep=0) as env:
        handles = [await env.engine.start("flowed", {"n": i}) for i in range(4)]
        await env.settle()
        assert len(await step_starts(env.engine, handles)) == 4
    plain = flow_app(lg.FlowControl("api", rate=1, period="10s"))
    async with TestEnv(plain, store=env.store_url, start=T0 + 100, inline_sleep=0) as again:
        handles = [await again.engine.start("flowed", {"n": i}) for i in range(3)]
        await again.settle()
        assert len(await step_starts(again.engine, handles)) == 1  # the sliding window: one per 10s
        rows = await sql(again.store_url, "SELECT burst FROM lockgate_flow_keys")
        assert rows == [{"burst": None}]


@pytest.mark.parametrize(
    ("control", "field"),
    [
        (lg.FlowControl("k", rate=2, burst=-1), "flow_control.burst"),
        (lg.FlowControl("k", rate=2, burst=1.5), "flow_control.burst"),  # type: ignore[arg-type]
        (lg.FlowControl("k", rate=2, burst=True), "flow_control.burst"),
        (lg.FlowControl("k", parallelism=2, burst=1), "flow_control.burst"),
    ],
)
async def test_a_bad_burst_is_refused_at_boot_and_at_start(
    control: lg.FlowControl, field: str, tmp_path: Path, make_engine: Any, store_url: str
) -> None:
    app = flow_app(control)
    with pytest.raises(lg.DefinitionError) as err:
        async with lg.Engine(app, f"sqlite:///{tmp_path}/never.db"):
            pass
    assert field in str(err.value)
    assert not (tmp_path / "never.db").exists()

    plain = lg.App()

    @plain.workflow(name="plain")
    async def body(ctx: lg.Context, p: Job) -> int:
        return p.n

    async with make_engine(plain) as engine:
        with pytest.raises(lg.InvalidArgument, match=field):
            await engine.start("plain", {}, flow_control=control)
        assert await engine.list_runs(limit=10) == []
        assert await sql(store_url, "SELECT key FROM lockgate_flow_keys") == []


# -- across processes ------------------------------------------------------------------------

STEPPER = """
import asyncio, sys, time
import lockgate as lg
from tests.test_step_flow_burst import cross_app

async def main(url: str, n: int, total: int) -> None:
    async with lg.Engine(cross_app(), url, poll_interval=0.02, inline_sleep=0.5) as engine:
        handles = await asyncio.gather(*(engine.start("flowed", {"n": i}) for i in range(n)))
        for h in handles:
            await engine.result(h.run_id, timeout=60)
        deadline = time.monotonic() + 60
        while len(await engine.list_runs(workflow="flowed", status="succeeded", limit=1000)) < total:
            assert time.monotonic() < deadline, "not all done"
            await asyncio.sleep(0.05)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""

# A pace (a third of a second) well above the time from a grant's commit to its journal entry on a loaded
# machine, so that delay reads as no start too many (see the slack below).
RATE, PERIOD, BURST = 3, 1.0, 3


def cross_app() -> lg.App:
    return flow_app(lg.FlowControl("shared", rate=RATE, period=f"{PERIOD:g}s", burst=BURST))


async def test_processes_sharing_a_key_never_start_more_than_rate_plus_burst(store_url: str) -> None:
    async with lg.Engine(cross_app(), store_url):  # the schema, before the processes race to create it
        pass
    each, procs = 12, []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", STEPPER, store_url, str(each), str(2 * each)],
                cwd=ROOT,
                env=env,
                stderr=subprocess.PIPE,
            )
        )
    started = time.monotonic()
    for p in procs:
        _, err = await asyncio.to_thread(p.communicate, timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    async with lg.Client(cross_app(), store=store_url) as client:
        runs = await client.list_runs(workflow="flowed", limit=100)
        starts: list[float] = []
        for r in runs:
            (entry,) = [s for s in await client.steps(r.id) if s.name == "call"]
            assert entry.started_at is not None
            # The journal's instant is the step's first ask; a step that waited for its turn began that much later.
            starts.append(entry.started_at.timestamp() + (entry.flow_wait or 0.0))
    assert len(starts) == 2 * each
    # A start read so is the grant's instant give or take the time from a step's first ask to its waiting row
    # and from a grant to its commit: a grant that committed slower than one a period later reads as a little
    # early here. The slack covers that (a quarter of a second: seen up to 0.15 s under load), not one more
    # start (the pace is a third of a second).
    assert max_in_window(starts, PERIOD - 0.25) <= RATE + BURST
    pace = PERIOD / RATE
    assert max(starts) - min(starts) >= (2 * each - BURST - 1) * pace - 0.1  # the long-run rate holds
    assert time.monotonic() - started < 60
