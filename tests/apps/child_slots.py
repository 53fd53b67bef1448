"""Limited parents waiting on limited children, for the cluster test of ``tests/test_child_slots_cluster.py``."""

from __future__ import annotations

from pydantic import BaseModel

import lockgate as lg


class Depth(BaseModel):
    n: int
    tag: str = "r"


app = lg.App()


@app.workflow(name="cs.nest", concurrency=lg.Concurrency(limit=1))
async def nest(ctx: lg.Context, p: Depth) -> str:
    if p.n == 0:
        return p.tag
    child = await ctx.start_child("cs.nest", {"n": p.n - 1, "tag": p.tag})
    return f"{p.n}({await ctx.wait_child(child)})"


async def _crossed(ctx: lg.Context, p: Depth, other: str) -> str:
    if p.n == 0:
        return p.tag
    child = await ctx.start_child(other, {"n": p.n - 1, "tag": p.tag})
    return f"{other}:{await ctx.wait_child(child)}"


@app.workflow(name="cs.left", concurrency=lg.Concurrency(limit=1))
async def left(ctx: lg.Context, p: Depth) -> str:
    return await _crossed(ctx, p, "cs.right")


@app.workflow(name="cs.right", concurrency=lg.Concurrency(limit=1))
async def right(ctx: lg.Context, p: Depth) -> str:
    return await _crossed(ctx, p, "cs.left")
