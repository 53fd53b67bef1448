"""Workflows under step flow control, for tests in one process and across worker processes.

Every step appends ``start|end <run> <step> <time> <pid>`` to the side file named by
``LOCKGATE_TEST_EFFECTS`` (appends of one short line are atomic across processes), so
overlaps and repeats are measured on what really ran, wherever it ran. A step named
``hold`` waits until the flag file ``release`` exists in ``LOCKGATE_TEST_FLAGS``.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Job(BaseModel):
    n: int
    hold: float = 0.0


def _effects() -> Path:
    return Path(os.environ["LOCKGATE_TEST_EFFECTS"])


def _flag(name: str) -> Path:
    return Path(os.environ["LOCKGATE_TEST_FLAGS"]) / name


def note(kind: str, run: str, step: str) -> None:
    with _effects().open("a") as f:
        f.write(f"{kind} {run} {step} {time.time():.6f} {os.getpid()}\n")


async def work(run: str, step: str, seconds: float) -> int:
    note("start", run, step)
    try:
        await asyncio.sleep(seconds)
    finally:
        note("end", run, step)
    return 1


async def hold(run: str, step: str) -> int:
    note("start", run, step)
    while not _flag("release").exists():
        await asyncio.sleep(0.02)
    note("end", run, step)
    return 1


@app.workflow(name="sf.crash", flow_control=lg.FlowControl("crash-key", parallelism=2))
async def crash_flow(ctx: lg.Context, p: Job) -> int:
    a = await ctx.step("a", work, ctx.run_id, "a", 0.0)
    b = await ctx.step("hold", hold, ctx.run_id, "hold")
    c = await ctx.step("c", work, ctx.run_id, "c", 0.0)
    return a + b + c


@app.workflow(name="sf.par", flow_control=lg.FlowControl("par-key", parallelism=3))
async def par_flow(ctx: lg.Context, p: Job) -> int:
    a = await ctx.step("a", work, ctx.run_id, "a", p.hold)
    b = await ctx.step("b", work, ctx.run_id, "b", p.hold)
    return a + b


@app.workflow(name="sf.rate")
async def rate_flow(ctx: lg.Context, p: Job) -> int:
    await ctx.rate_limit("api", limit=4, period="1s")
    note("start", ctx.run_id, "rate")
    return p.n


@dataclass(frozen=True)
class Span:
    run: str
    step: str
    start: float
    end: float | None
    pid: int


def spans(path: Path) -> list[Span]:
    """Each step execution in the side file: its start and (if it ended) its end."""
    opened: dict[tuple[str, str, str], tuple[float, int]] = {}
    out: list[Span] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        kind, run, step, at, pid = line.split()
        if kind == "start":
            if (run, step, pid) in opened:
                start, spid = opened.pop((run, step, pid))
                out.append(Span(run, step, start, None, spid))
            opened[(run, step, pid)] = (float(at), int(pid))
        else:
            start, spid = opened.pop((run, step, pid))
            out.append(Span(run, step, start, float(at), spid))
    out += [Span(run, step, start, None, pid) for (run, step, _), (start, pid) in opened.items()]
    return out


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t comes before a start at t)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda p: (p[0], p[1]))
    worst = now = 0
    for _, d in points:
        now += d
        worst = max(worst, now)
    return worst


def max_in_window(times: list[float], period: float) -> int:
    """The most instants within any half-open window of ``period`` seconds."""
    ordered = sorted(times)
    worst, lo = 0, 0
    for hi, at in enumerate(ordered):
        while ordered[lo] <= at - period:
            lo += 1
        worst = max(worst, hi - lo + 1)
    return worst
