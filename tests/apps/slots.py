"""A concurrency-limited workflow whose bodies note when they run, for tests across worker processes.

Every body appends ``start|end <job> <time> <pid>`` to the side file named by
``LOCKGATE_TEST_EFFECTS`` (appends of one short line are atomic across processes), so the
most bodies in flight at any instant is measured on what really ran, wherever it ran, not on
what the engine counts.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from pydantic import BaseModel

import lockgate as lg

LIMIT = 3

app = lg.App()


class Job(BaseModel):
    n: int
    ms: int = 0
    fail: bool = False


def note(kind: str, job: int) -> None:
    with Path(os.environ["LOCKGATE_TEST_EFFECTS"]).open("a") as f:
        f.write(f"{kind} {job} {time.time():.6f} {os.getpid()}\n")


@app.workflow(name="slots.job", concurrency=lg.Concurrency(limit=LIMIT))
async def job(ctx: lg.Context, p: Job) -> int:
    note("start", p.n)
    await asyncio.sleep(p.ms / 1000)
    note("end", p.n)
    if p.fail:
        raise RuntimeError(f"job {p.n} fails")
    return p.n


def bodies(path: Path) -> list[tuple[int, float, float, int]]:
    """``(job, start, end, pid)`` of every body that reached its end, from the side file."""
    opened: dict[tuple[int, int], float] = {}
    out: list[tuple[int, float, float, int]] = []
    for line in path.read_text().splitlines():
        kind, job, at, pid = line.split()
        key = (int(job), int(pid))
        if kind == "start":
            opened[key] = float(at)
        else:
            out.append((int(job), opened.pop(key), float(at), int(pid)))
    return out
