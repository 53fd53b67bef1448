"""huey on SQLite: ``huey_consumer bench.peers.apps.huey_app.huey -k thread``."""

from __future__ import annotations

import os

from huey import SqliteHuey

from . import probe

huey = SqliteHuey("peers", filename=os.environ["PEERS_SQLITE"])


@huey.task()
def job(kind: str, n: int) -> None:
    probe.work(kind, n)


def enqueue(kind: str, jobs: list[int]) -> None:
    """Calling the task enqueues it."""
    for n in jobs:
        job(kind, n)
