"""DBOS Transact on PostgreSQL: ``python -m bench.peers.apps.dbos_app`` is one worker process
(DBOS runs inside the application); jobs are enqueued on a queue with ``DBOSClient``. Case j3
sets the queue's ``global_concurrency``, case j4 its ``limiter``."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from dbos import DBOS, DBOSClient

from . import probe

QUEUE = "peers"
_client: list[DBOSClient] = []


def queue_options() -> dict[str, Any]:
    """The queue's settings for this case (``PEERS_*``)."""
    options: dict[str, Any] = {"worker_concurrency": int(os.environ["PEERS_CONCURRENCY"])}
    if os.environ.get("PEERS_GLOBAL"):
        options["global_concurrency"] = int(os.environ["PEERS_GLOBAL"])
    if os.environ.get("PEERS_RATE"):
        options["limiter"] = {"limit": int(os.environ["PEERS_RATE"]), "period": 1.0}
    return options


@DBOS.step()
def work(kind: str, n: int) -> None:
    probe.work(kind, n)


@DBOS.workflow(name="job")
def job(kind: str, n: int) -> None:
    work(kind, n)


def enqueue(kind: str, jobs: list[int]) -> None:
    """``DBOSClient.enqueue`` per job: the way a process outside the application enqueues."""
    if not _client:
        _client.append(DBOSClient(system_database_url=os.environ["PEERS_PG"]))
    for n in jobs:
        _client[0].enqueue({"queue_name": QUEUE, "workflow_name": "job"}, kind, n)


def serve() -> None:
    """One worker process: launch DBOS, register the queue, then run until killed."""
    DBOS(config={"name": "peers", "system_database_url": os.environ["PEERS_PG"], "log_level": "WARNING"})
    DBOS.launch()
    DBOS.register_queue(QUEUE, **queue_options())  # persisted in the system database: launched first
    threading.Event().wait()


def migrate() -> None:
    """Create DBOS's system tables once, before the workers and the client start."""
    DBOS(config={"name": "peers", "system_database_url": os.environ["PEERS_PG"], "log_level": "WARNING"})
    DBOS.launch()
    DBOS.destroy()


if __name__ == "__main__":
    migrate() if sys.argv[1:] == ["migrate"] else serve()
