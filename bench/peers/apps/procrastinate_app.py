"""procrastinate on PostgreSQL: ``procrastinate --app=bench.peers.apps.procrastinate_app.app worker``."""

from __future__ import annotations

import os

import procrastinate

from . import probe

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["PEERS_PG"]))
_open: list[bool] = []


@app.task(name="job")
async def job(kind: str, n: int) -> None:
    await probe.awork(kind, n)


async def enqueue(kind: str, jobs: list[int]) -> None:
    """``defer_async`` for one job, ``batch_defer_async`` for a burst."""
    if not _open:
        await app.open_async()
        _open.append(True)
    if len(jobs) == 1:
        await job.defer_async(kind=kind, n=jobs[0])
        return
    await job.batch_defer_async(*({"kind": kind, "n": n} for n in jobs))
