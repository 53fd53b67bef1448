"""Workflows whose bodies note when they begin and end, for the cross-process wake-up tests.

Each body appends ``<what> <i> <begin|end> <time>`` to the file ``LOCKGATE_TEST_EFFECTS`` names.
"""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel

import lockgate as lg


class Mark(BaseModel):
    i: int


class Key(BaseModel):
    id: str


class Gated(BaseModel):
    i: int
    hold: bool = False


app = lg.App("wakeups")
ping = app.event("wk.ping", key=Key, payload=Mark)


def note(what: str, i: int, edge: str) -> None:
    with open(os.environ["LOCKGATE_TEST_EFFECTS"], "a") as out:
        out.write(f"{what} {i} {edge} {time.time()}\n")


@app.workflow(name="wk.start")
async def started(ctx: lg.Context, p: Mark) -> None:
    note("start", p.i, "begin")


@app.workflow(name="wk.signal")
async def signalled(ctx: lg.Context, p: Mark) -> None:
    await ctx.wait_for_signal("go", Mark)
    note("signal", p.i, "begin")


@app.workflow(name="wk.publish")
async def published(ctx: lg.Context, p: Mark) -> None:
    note("publish", p.i, "begin")


app.trigger(on=ping, workflow="wk.publish", payload=lambda ev: {"i": ev.data.i})


@app.workflow(name="wk.gated", concurrency=lg.Concurrency(limit=2, key=lambda p: "k"))
async def gated(ctx: lg.Context, p: Gated) -> None:
    note("gated", p.i, "begin")
    if p.hold:
        await ctx.wait_for_signal("never", Mark)  # parked holding its slot until cancelled
    await asyncio.sleep(0.02)
    note("gated", p.i, "end")
