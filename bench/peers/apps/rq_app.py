"""RQ on Redis: ``rq worker``; one job at a time per worker process, each in a forked work horse."""

from __future__ import annotations

import os

from redis import Redis
from rq import Queue

from . import probe

queue = Queue("peers", connection=Redis.from_url(os.environ["PEERS_BROKER"]))


def job(kind: str, n: int) -> None:
    probe.work(kind, n)


def enqueue(kind: str, jobs: list[int]) -> None:
    """``enqueue`` for one job, ``enqueue_many`` (one pipeline) for a burst."""
    if len(jobs) == 1:
        queue.enqueue(job, kind, jobs[0])
        return
    queue.enqueue_many([Queue.prepare_data(job, (kind, n)) for n in jobs])
