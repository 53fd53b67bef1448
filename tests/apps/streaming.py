"""A workflow that streams an answer token by token from a step, for the crash test of run streams.

Each attempt of the step appends ``<tag>:attempt`` to the side-effect file: the first (on the
worker the test kills) streams slowly; the second fails after three tokens; the third streams
them all.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

import lockgate as lg

from .crashy import count, record

__all__ = ["app"]

app = lg.App("stream-tests")


class Ask(BaseModel):
    tag: str
    n: int = 20


@app.workflow(name="stream.answer")
async def answer(ctx: lg.Context, p: Ask) -> int:
    await ctx.stream("<start>")

    async def generate() -> int:
        record(f"{p.tag}:attempt")
        attempt = count(f"{p.tag}:attempt")
        for i in range(p.n):
            await ctx.stream(f"t{i}")
            if attempt == 1:
                await asyncio.sleep(0.1)  # the test kills this worker meanwhile
            if attempt == 2 and i == 2:
                raise RuntimeError("the model went away")
        return p.n

    n = await ctx.step("generate", generate, retry=lg.Retry(max_attempts=3, base_delay=0.01, jitter=False))
    await ctx.stream("<end>")
    return int(n)
