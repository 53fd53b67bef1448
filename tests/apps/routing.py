"""An app for the routing tests: its code version, compatibility and this process's tag come from the
environment, so that ``lockgate serve tests.apps.routing:app`` processes can be old code, new code, or
workers with other labels. Each body returns who executed it (the code version and the process's tag).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["Job", "app", "make_app"]


class Job(BaseModel):
    sleep: float = 0.0
    wait: bool = False  # asleep until the signal "go"


class Go(BaseModel):
    pass


def make_app(version: str | None, compatible_with: list[str] | None = None, tag: str = "") -> lg.App:
    """``deploy.job`` (versioned: it sleeps or waits for a signal, then says which code finished it) and three
    routed workflows."""
    app = lg.App()
    versioning: dict[str, Any] = {}
    if version:
        versioning = {"version": version, "compatible_with": compatible_with or []}

    @app.workflow(name="deploy.job", **versioning)
    async def job(ctx: lg.Context, p: Job) -> dict[str, Any]:
        first = await ctx.step("first", lambda: {"version": version, "tag": tag})
        if p.sleep:
            await ctx.sleep("nap", p.sleep)
        if p.wait:
            await ctx.wait_for_signal("go", Go)
        return {"started_by": first, "finished_by": {"version": version, "tag": tag}}

    @app.workflow(name="route.gpu", runs_on=lg.Labels(gpu="a100"))
    async def gpu(ctx: lg.Context, p: Job) -> str:
        return await ctx.step("where", lambda: tag)

    @app.workflow(name="route.eu", runs_on=lg.Labels(zone="eu"))
    async def eu(ctx: lg.Context, p: Job) -> str:
        return await ctx.step("where", lambda: tag)

    @app.workflow(name="route.any")
    async def anywhere(ctx: lg.Context, p: Job) -> dict[str, Any]:
        child = await ctx.start_child("route.gpu", {})  # a child routes by its own workflow
        return {"here": await ctx.step("where", lambda: tag), "child": await ctx.wait_child(child)}

    return app


_compat = os.environ.get("ROUTING_COMPAT", "")
app = make_app(
    os.environ.get("ROUTING_VERSION") or None,
    [v for v in _compat.split(",") if v],
    os.environ.get("ROUTING_TAG", ""),
)
