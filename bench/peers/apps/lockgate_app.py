"""lockgate: ``lockgate serve bench.peers.apps.lockgate_app:app``. Case j3 declares
``concurrency=lg.Concurrency(limit=10)`` on the workflow; case j4 declares
``flow_control=lg.FlowControl("provider", rate=50, period="1s")``: the limit holds where the
provider is called, at the start of each step, across every worker (``PEERS_RATE_AT=gate`` declares
``throttle=lg.Throttle(50, "1s")`` instead, which paces admissions, not the steps' starts)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from . import probe


class Job(BaseModel):
    kind: str
    n: int


def options() -> dict[str, Any]:
    """The workflow's gate for this case (``PEERS_*``)."""
    found: dict[str, Any] = {}
    if os.environ.get("PEERS_GLOBAL"):
        found["concurrency"] = lg.Concurrency(limit=int(os.environ["PEERS_GLOBAL"]))
    if os.environ.get("PEERS_RATE"):
        rate = int(os.environ["PEERS_RATE"])
        if os.environ.get("PEERS_RATE_AT") == "gate":
            found["throttle"] = lg.Throttle(rate, "1s")
        else:
            found["flow_control"] = lg.FlowControl("provider", rate=rate, period="1s")
    return found


app = lg.App("peers")


@app.workflow(name="job", **options())
async def job(ctx: lg.Context, p: Job) -> None:
    await ctx.step("work", probe.awork, p.kind, p.n)


_client: list[lg.Client] = []


async def enqueue(kind: str, jobs: list[int]) -> None:
    """``Client.start`` per job, a burst as concurrent starts (one group commit takes many)."""
    if not _client:
        client = lg.Client(app, os.environ["PEERS_LOCKGATE_STORE"])
        await client.open()
        _client.append(client)
    client = _client[0]
    await asyncio.gather(*(client.start(job, Job(kind=kind, n=n)) for n in jobs))
