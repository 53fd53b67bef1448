"""An app whose first step takes a while and counts its side effects in files (``SIDE_EFFECTS`` folder)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Job(BaseModel):
    n: int


def _count(name: str) -> None:
    folder = Path(os.environ["SIDE_EFFECTS"])
    with open(folder / f"{name}.count", "a") as f:
        f.write("x")
        f.flush()
        os.fsync(f.fileno())


def slow(n: int) -> int:
    _count("slow-began")
    time.sleep(float(os.environ.get("SLOW_STEP_SECONDS", "2")))
    _count("slow")
    return n * 2


def second(n: int) -> int:
    _count("second")
    return n + 1


@app.workflow(name="slow.job", idempotency_key=lambda p: f"slow:{p.n}")
async def job(ctx: lg.Context, p: Job) -> int:
    doubled = await ctx.step("slow", slow, p.n)
    return int(await ctx.step("second", second, doubled))


async def slow_async(n: int) -> int:
    _count("async-began")
    await asyncio.sleep(float(os.environ.get("SLOW_STEP_SECONDS", "2")))
    _count("async")
    return n * 3


@app.workflow(name="slow.async_job", idempotency_key=lambda p: f"slow-async:{p.n}")
async def async_job(ctx: lg.Context, p: Job) -> int:
    tripled = await ctx.step("slow", slow_async, p.n)
    return int(await ctx.step("second", second, tripled))
