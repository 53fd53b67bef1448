"""One workflow, ``shaped``, in several editions: the deploy-time replay check compares them.

``old`` writes the journals (its runs park on the ``go`` signal after ``a`` and ``b``); each
other module-level app is the same workflow after an edit, as ``lockgate check MODULE:APP``
loads it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["Go", "Job", "bumped", "fanned", "inserted", "old", "removed", "reordered", "shaped_app", "unchanged"]


class Job(BaseModel):
    tag: str


class Go(BaseModel):
    ok: bool = True


def act(name: str) -> str:
    return name


def shaped_app(shape: list[str], **options: Any) -> lg.App:
    """``shaped``: one step per name of ``shape`` in order (``go`` waits for that signal)."""
    app = lg.App()

    @app.workflow(name="shaped", **options)
    async def shaped(ctx: lg.Context, p: Job) -> str:
        for name in shape:
            if name == "go":
                await ctx.wait_for_signal("go", Go)
            else:
                await ctx.step(name, act, name)
        return "+".join(shape)

    @app.workflow(name="fan")
    async def fan(ctx: lg.Context, p: Job) -> str:
        left, right = await asyncio.gather(ctx.step("left", act, "l"), ctx.step("right", act, "r"))
        await ctx.sleep("nap", "1h")
        return str(await ctx.step("after", act, left + right))

    return app


SHAPE = ["a", "b", "go", "c"]
old = shaped_app(SHAPE, version="1")
unchanged = shaped_app(SHAPE, version="1")
inserted = shaped_app(["a", "x", "b", "go", "c"], version="1")
removed = shaped_app(["a", "go", "c"], version="1")
reordered = shaped_app(["b", "a", "go", "c"], version="1")
bumped = shaped_app(SHAPE, version="2")
fanned = shaped_app(SHAPE, version="2", compatible_with=["1"])
