"""Events for crash tests, run by worker subprocesses (``python -m tests.apps.runner --app ...``)."""

from __future__ import annotations

import os
import signal

from pydantic import BaseModel

import lockgate as lg

from .crashy import count, die_while, record

__all__ = ["app", "happened"]

app = lg.App("crash-event-tests")


class Tag(BaseModel):
    tag: str


class Happened(BaseModel):
    n: int


happened = app.event("crash.happened", key=Tag, payload=Happened)


@app.workflow(name="crashev.publisher")
async def publisher(ctx: lg.Context, p: Tag) -> str:
    record(f"{p.tag}:body")
    event_id = await ctx.publish(happened, {"tag": p.tag}, {"n": 1})
    await ctx.step("after", die_while, p.tag, "after", 1)  # the first entry dies here, after publishing
    return event_id


@app.workflow(name="crashev.react")
async def react(ctx: lg.Context, p: Tag) -> str:
    return p.tag


app.trigger(on=happened, workflow="crashev.react", payload=lambda ev: {"tag": ev.key.tag})


class Awaited(BaseModel):
    tag: str
    n: int


def kill_self(tag: str, what: str) -> str:
    """SIGKILL this worker on the first execution of ``what``: no clean-up of any kind runs."""
    record(f"{tag}:{what}")
    if count(f"{tag}:{what}") <= 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return what


@app.workflow(name="crashev.waiter")
async def waiter(ctx: lg.Context, p: Awaited) -> str:
    """Wait for an event, then get killed: the replay must return the event the first entry consumed."""
    ev = await ctx.wait_for_event(happened, match={"n": p.n})
    assert ev is not None
    await ctx.step("after", kill_self, p.tag, "after")
    return ev.id
