"""``step_threads=``: how many plain ``def`` steps run at once, in the engine's own threads."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

import lockgate as lg


class Job(BaseModel):
    n: int


def _app(seen: dict[str, int], names: set[str], lock: threading.Lock) -> lg.App:
    app = lg.App()

    def work() -> int:
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
            names.add(threading.current_thread().name)
        time.sleep(0.05)
        with lock:
            seen["now"] -= 1
        return 1

    @app.workflow(name="threads.job", idempotency_key=lambda p: f"job:{p.n}")
    async def job(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("work", work))

    return app


async def test_step_threads_bounds_the_sync_steps_running_at_once(tmp_path: Path) -> None:
    seen, names, lock = {"now": 0, "most": 0}, set[str](), threading.Lock()
    app = _app(seen, names, lock)
    async with lg.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.05, step_threads=2) as engine:
        handles = [await engine.start("threads.job", {"n": n}) for n in range(8)]
        assert await asyncio.gather(*(h.result(timeout=20) for h in handles)) == [1] * 8
    assert seen["most"] <= 2
    assert names and all(name.startswith("lockgate-step") for name in names)


def test_step_threads_default_to_max_concurrent_runs(tmp_path: Path) -> None:
    engine = lg.Engine(lg.App(), f"sqlite:///{tmp_path}/t.db", max_concurrent_runs=37)
    assert engine.dispatcher.step_threads == 37


@pytest.mark.parametrize("bad", [0, -1, 10**9])
def test_step_threads_out_of_range_is_refused(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ValueError, match="step_threads"):
        lg.Engine(lg.App(), f"sqlite:///{tmp_path}/t.db", step_threads=bad)
