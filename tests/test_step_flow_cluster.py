"""Step flow control across worker processes: slots of a killed process, ``ctx.rate_limit`` on
three replicas, and a property over random mixes of limits and step durations.

Workers run ``python -m tests.apps.runner --app tests.apps.stepflow:app``; every step notes
its start and end in a side file, so overlaps and repeats are measured on what really ran.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg

from .apps.stepflow import app as flow_app
from .apps.stepflow import max_in_window, max_overlap, spans
from .apps.waits import eventually
from .flow_audit import audit_flow_starts, granted_starts

ROOT = Path(__file__).resolve().parents[1]


class Workers:
    def __init__(self, store_url: str, tmp: Path) -> None:
        self.store_url = store_url
        self.effects = tmp / "effects.log"
        self.flags = tmp / "flags"
        self.flags.mkdir()
        self.logs = tmp / "workers"
        self.logs.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "LOCKGATE_TEST_EFFECTS": str(self.effects),
            "LOCKGATE_TEST_FLAGS": str(self.flags),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
        }

    def spawn(self, lease: str = "1h", inline_sleep: str = "0s") -> subprocess.Popen[bytes]:
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        cmd = [sys.executable, "-m", "tests.apps.runner", "--store", self.store_url, "--app", "tests.apps.stepflow:app"]
        cmd += ["--lease", lease, "--inline-sleep", inline_sleep]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.logs.iterdir()))

    async def until(self, probe: Any, what: str, timeout: float = 90.0) -> Any:
        try:
            return await eventually(probe, timeout=timeout, interval=0.05, what=what)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nworker output:\n{self.output()}") from None

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Any:
    w = Workers(store_url, tmp_path)
    yield w
    w.stop()


@pytest.mark.slow
async def test_killed_process_slots_are_reclaimed_and_no_step_runs_twice(workers: Workers) -> None:
    first = workers.spawn(lease="2s")
    async with lg.Client(flow_app, workers.store_url) as client:
        handles = [await client.start("sf.crash", {"n": i}) for i in range(4)]
        # parallelism 2: two `hold` steps run in the first process, the other two runs wait
        await workers.until(lambda: sum(1 for s in spans(workers.effects) if s.step == "hold") == 2, "two holding")
        first.send_signal(signal.SIGKILL)
        killed_at = time.time()
        first.wait()
        (workers.flags / "release").touch()
        workers.spawn(lease="2s")
        for h in handles:
            assert await client.result(h.run_id or "", timeout=90) == 3
    ran = spans(workers.effects)
    counts = Counter((s.run, s.step) for s in ran)
    completed_before = {(s.run, s.step) for s in ran if s.end is not None and s.end < killed_at}
    assert all(counts[k] == 1 for k in completed_before)  # what completed never ran again
    assert all(counts[(h.run_id, "a")] == 1 and counts[(h.run_id, "c")] == 1 for h in handles)
    # the killed holds ran again once (at least once), and the two slots were never exceeded:
    # a killed step's interval ends with its process
    holds = [(s.start, s.end if s.end is not None else killed_at) for s in ran if s.step == "hold"]
    assert len(holds) == 6 and max_overlap(holds) == 2


@pytest.mark.slow
async def test_rate_limit_holds_across_three_replicas(workers: Workers, store_kind: str) -> None:
    if store_kind != "postgres":
        pytest.skip("replicas in several processes share a PostgreSQL store")
    for _ in range(3):
        workers.spawn()  # no wait in place: a waiting run parks and any replica may take it on
    await workers.until(lambda: workers.output().count("ready ") == 3, "three replicas ready")
    audit_flow_starts(workers.store_url)
    async with lg.Client(flow_app, workers.store_url) as client:
        handles = await asyncio.gather(*(client.start("sf.rate", {"n": i}) for i in range(12)))
        for h in handles:
            await client.result(h.run_id or "", timeout=90)
    ran = spans(workers.effects)
    assert len(ran) == 12
    # Which replica runs which start is theirs to decide: a replica that ends a run may take the next
    # one itself (and on a quiet machine one replica can run all twelve); the limit holds for all three.
    # 4 per second, whichever process, by the store's grants (see flow_audit): one per body
    (granted,) = granted_starts(workers.store_url).values()
    assert len(granted) == 12
    assert max_in_window(granted, 1.0) <= 4
    assert max(granted) - min(granted) >= 2 * 1.0


@pytest.mark.slow
async def test_parallelism_held_across_processes(workers: Workers) -> None:
    for _ in range(2):
        workers.spawn()
    await workers.until(lambda: workers.output().count("ready ") == 2, "two replicas ready")
    async with lg.Client(flow_app, workers.store_url) as client:
        handles = await asyncio.gather(*(client.start("sf.par", {"n": i, "hold": 0.01}) for i in range(40)))
        for h in handles:
            assert await client.result(h.run_id or "", timeout=120) == 2
    ran = spans(workers.effects)
    assert len(ran) == 80
    assert max_overlap([(s.start, s.end or s.start) for s in ran]) <= 3


# -- a property over random mixes --------------------------------------------------------------------


class Item(BaseModel):
    n: int
    ms: int


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    parallelism=st.integers(min_value=1, max_value=4),
    rate=st.one_of(st.none(), st.integers(min_value=2, max_value=8)),
    durations=st.lists(st.integers(min_value=0, max_value=25), min_size=4, max_size=14),
)
def test_limits_hold_for_any_mix(parallelism: int, rate: int | None, durations: list[int]) -> None:
    asyncio.run(_mix(parallelism, rate, durations))


async def _mix(parallelism: int, rate: int | None, durations: list[int]) -> None:
    period = 0.4
    log: list[tuple[str, float]] = []
    running = [0, 0]  # now, peak

    async def step(ms: int) -> int:
        loop = asyncio.get_running_loop()
        log.append(("start", loop.time()))
        running[0] += 1
        running[1] = max(running[1], running[0])
        await asyncio.sleep(ms / 1000)
        running[0] -= 1
        return ms

    app = lg.App()
    control = lg.FlowControl("mix", rate=rate, period=period, parallelism=parallelism)

    @app.workflow(name="mix", flow_control=control)
    async def mix(ctx: lg.Context, p: Item) -> int:
        return int(await ctx.step("s", step, p.ms))

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/mix.db"
        async with lg.Engine(app, url, poll_interval=0.05, inline_sleep=0.1) as engine:
            audit_flow_starts(url)
            handles = await asyncio.gather(*(engine.start("mix", {"n": i, "ms": d}) for i, d in enumerate(durations)))
            outs = [await engine.result(h.run_id or "", timeout=60) for h in handles]
        granted = granted_starts(url).get("mix", [])
    assert outs == durations
    assert running[1] <= parallelism
    if rate is not None:  # by the store's grants (see flow_audit): one per body
        assert len(granted) == len(log)
        assert max_in_window(granted, period) <= rate
