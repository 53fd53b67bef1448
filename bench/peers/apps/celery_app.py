"""Celery on Redis: ``celery -A bench.peers.apps.celery_app worker``; case j4 sets the task's ``rate_limit``."""

from __future__ import annotations

import os

from celery import Celery

from . import probe

app = Celery("peers", broker=os.environ["PEERS_BROKER"])
RATE = os.environ.get("PEERS_RATE")


@app.task(name="job", rate_limit=f"{RATE}/s" if RATE else None)
def job(kind: str, n: int) -> None:
    probe.work(kind, n)


def enqueue(kind: str, jobs: list[int]) -> None:
    """``delay`` per job, as Celery's documentation does."""
    for n in jobs:
        job.delay(kind, n)
