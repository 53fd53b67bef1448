"""A freed concurrency slot executed where it was freed (gate/handoff.py) never lets a limit be exceeded.

The worker ending a run claims the start its slot passes to and executes it as the commit
returns. Measured on the bodies themselves (each notes its start and end): across worker
processes on each store, and as a property over random limits, durations, failures and
numbers of engines sharing one store, no instant has more bodies in flight than the limit,
every start runs exactly once, and the limit is reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg

from .apps.slots import LIMIT, bodies
from .apps.slots import app as slots_app
from .apps.stepflow import max_overlap
from .apps.waits import eventually

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
async def test_three_processes_pass_slots_on_without_exceeding_the_limit(store_url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    env = {
        **os.environ,
        "LOCKGATE_TEST_EFFECTS": str(effects),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
    }
    logs: list[Path] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(3):
            logs.append(tmp_path / f"worker-{i}.log")
            with logs[-1].open("wb") as log:
                cmd = [sys.executable, "-m", "tests.apps.runner", "--store", store_url, "--app", "tests.apps.slots:app"]
                procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        output = lambda: "".join(p.read_text() for p in logs)  # noqa: E731
        await eventually(lambda: output().count("ready ") == 3, timeout=60, what="three workers ready")
        jobs = [{"n": n, "ms": 10 + n * 7 % 15, "fail": n % 9 == 4} for n in range(48)]
        async with lg.Client(slots_app, store_url) as client:
            handles = await asyncio.gather(*(client.start("slots.job", job) for job in jobs))
            assert sum(h.status == "started" for h in handles) == LIMIT

            run_ids = [await h.admitted(timeout=120) for h in handles]

            async def ended() -> bool:
                runs = [await client.get_run(rid) for rid in run_ids]
                return all(r.status in ("succeeded", "failed") for r in runs)

            await eventually(ended, timeout=120, what="every run ended")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    ran = bodies(effects)
    assert sorted(Counter(job for job, *_ in ran).items()) == [(n, 1) for n in range(len(jobs))]
    assert max_overlap([(start, end) for _, start, end, _ in ran]) == LIMIT


# -- a property over random mixes, engines sharing one store ----------------------------------------


class Item(BaseModel):
    n: int
    ms: int
    fail: bool


@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    limit=st.integers(min_value=1, max_value=3),
    engines=st.integers(min_value=1, max_value=3),
    items=st.lists(st.tuples(st.integers(min_value=0, max_value=15), st.booleans()), min_size=4, max_size=16),
)
def test_slots_executed_where_they_free_never_exceed_the_limit(
    limit: int, engines: int, items: list[tuple[int, bool]]
) -> None:
    asyncio.run(_mix(limit, engines, items))


async def _mix(limit: int, engines: int, items: list[tuple[int, bool]]) -> None:
    running = [0, 0]  # now, peak: counted by the bodies, whichever engine runs them
    ran: Counter[int] = Counter()

    app = lg.App()

    @app.workflow(name="mix", concurrency=lg.Concurrency(limit=limit))
    async def mix(ctx: lg.Context, p: Item) -> int:
        ran[p.n] += 1
        running[0] += 1
        running[1] = max(running[1], running[0])
        try:
            await asyncio.sleep(p.ms / 1000)
        finally:
            running[0] -= 1
        if p.fail:
            raise RuntimeError("fails")
        return p.n

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/mix.db"
        async with contextlib.AsyncExitStack() as stack:
            opened = [await stack.enter_async_context(lg.Engine(app, url, poll_interval=0.05)) for _ in range(engines)]
            handles = await asyncio.gather(
                *(opened[i % engines].start("mix", {"n": i, "ms": ms, "fail": f}) for i, (ms, f) in enumerate(items))
            )
            deadline = time.monotonic() + 60
            while sum(ran.values()) < len(items) or running[0]:
                assert time.monotonic() < deadline, f"{sum(ran.values())} of {len(items)} bodies ran"
                await asyncio.sleep(0.01)
            assert len(handles) == len(items)
    assert running[1] <= limit
    assert sorted(ran.items()) == [(n, 1) for n in range(len(items))]
