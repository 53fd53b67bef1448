"""Workflows for crash tests, run by worker subprocesses (``python -m tests.apps.runner``).

Every step execution appends one line ``<tag>:<what>`` to the file named by
``LOCKGATE_TEST_EFFECTS``, so a test counts how often each step really ran across
processes. Flag files in ``LOCKGATE_TEST_FLAGS`` let the test hold a step (or the body)
at a known point and kill the process there.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from pydantic import BaseModel

import lockgate as lg

__all__ = ["app", "count", "effects", "flag"]

app = lg.App("crash-tests")


class Job(BaseModel):
    tag: str


class Loop(BaseModel):
    tag: str
    die_times: int


def _effects_path() -> Path:
    return Path(os.environ["LOCKGATE_TEST_EFFECTS"])


def flag(name: str, directory: str | Path | None = None) -> Path:
    """The flag file ``name`` (in ``directory`` or ``$LOCKGATE_TEST_FLAGS``)."""
    return Path(directory or os.environ["LOCKGATE_TEST_FLAGS"]) / name


def record(line: str) -> None:
    """Append one execution line; the write reaches the OS before this returns."""
    fd = os.open(_effects_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effects(path: str | Path | None = None) -> list[str]:
    target = Path(path) if path is not None else _effects_path()
    return target.read_text().splitlines() if target.exists() else []


def count(line: str, path: str | Path | None = None) -> int:
    return effects(path).count(line)


def wait_flag(name: str, timeout: float = 120.0) -> None:
    """Block (in a worker thread) until the test raises flag ``name``."""
    deadline = time.monotonic() + timeout
    while not flag(name).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"flag {name} was never raised")
        time.sleep(0.01)


def step_one(tag: str) -> str:
    record(f"{tag}:one")
    return "1"


def step_two(tag: str) -> str:
    record(f"{tag}:two")
    wait_flag(f"{tag}.release-two")
    return "2"


def step_three(tag: str) -> str:
    record(f"{tag}:three")
    return "3"


def die_while(tag: str, what: str, die_times: int) -> str:
    """Kill this whole process on the first ``die_times`` executions of ``what``."""
    record(f"{tag}:{what}")
    if count(f"{tag}:{what}") <= die_times:
        os._exit(17)
    return what


@app.workflow(name="crash.steps")
async def steps(ctx: lg.Context, p: Job) -> str:
    record(f"{p.tag}:body")
    a = await ctx.step("one", step_one, p.tag)
    b = await ctx.step("two", step_two, p.tag)
    c = await ctx.step("three", step_three, p.tag)
    return f"{a}{b}{c}"


@app.workflow(name="crash.after_step")
async def after_step(ctx: lg.Context, p: Job) -> str:
    a = await ctx.step("one", step_one, p.tag)
    record(f"{p.tag}:after-one")  # the body itself, not a step: it runs again on every entry
    await asyncio.to_thread(wait_flag, f"{p.tag}.release-body")
    c = await ctx.step("three", step_three, p.tag)
    return f"{a}{c}"


@app.workflow(name="crash.loop")
async def crash_loop(ctx: lg.Context, p: Loop) -> str:
    record(f"{p.tag}:body")
    return str(await ctx.step("boom", die_while, p.tag, "boom", p.die_times))


@app.workflow(name="crash.park_between")
async def park_between(ctx: lg.Context, p: Loop) -> str:
    record(f"{p.tag}:body")
    await ctx.step("a", die_while, p.tag, "a", p.die_times)
    await ctx.sleep("nap", "200ms")  # longer than the runner's inline sleep: the run parks cleanly
    await ctx.step("b", die_while, p.tag, "b", p.die_times)
    return "ok"
