"""The app the gate and bulk CLI tests serve and start (importable as ``tests.apps.cli_gate:app``)."""

from __future__ import annotations

import os

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Gate(BaseModel):
    marker: str


class Go(BaseModel):
    ok: bool = True


def by_key(p: Job) -> str:
    return p.key


def check(marker: str) -> str:
    if not os.path.exists(marker):
        raise RuntimeError(f"no marker at {marker}")
    return "ok"


@app.workflow(name="cg.debounced", debounce=lg.Debounce(period="1h", key=by_key))
async def debounced(ctx: lg.Context, p: Job) -> int:
    return p.n


@app.workflow(name="cg.limited", concurrency=lg.Concurrency(limit=1, key=by_key))
async def limited(ctx: lg.Context, p: Job) -> int:
    await ctx.wait_for_signal("go", Go)
    return p.n


@app.workflow(name="cg.plain")
async def plain(ctx: lg.Context, p: Job) -> int:
    return p.n * 2


@app.workflow(name="cg.held")
async def held(ctx: lg.Context, p: Job) -> int:
    await ctx.wait_for_signal("go", Go)
    return p.n


@app.workflow(name="cg.gated")
async def gated(ctx: lg.Context, p: Gate) -> str:
    return str(await ctx.step("check", check, p.marker, retry=lg.Retry(max_attempts=1)))


other = lg.App()  # an app that does not register the workflows above (a retry through it must fail per run)


@other.workflow(name="cg.other")
async def other_wf(ctx: lg.Context, p: Job) -> int:
    return p.n
