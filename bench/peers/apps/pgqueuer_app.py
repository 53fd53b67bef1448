"""pgqueuer on PostgreSQL: ``pgq run bench.peers.apps.pgqueuer_app:main``; case j3 sets the
entrypoint's ``concurrency_limit`` (enforced in the database across workers)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from pgqueuer import Job, PgQueuer, PsycopgDriver, Queries

from . import probe

LIMIT = int(os.environ.get("PEERS_GLOBAL") or 0)
_queries: list[Queries] = []


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    """The factory ``pgq run`` calls."""
    async with await psycopg.AsyncConnection.connect(os.environ["PEERS_PG"], autocommit=True) as conn:
        pgq = PgQueuer(PsycopgDriver(conn))

        @pgq.entrypoint("job", concurrency_limit=LIMIT)
        async def job(j: Job) -> None:
            kind, n = (j.payload or b"").decode().split(":")
            await probe.awork(kind, int(n))

        yield pgq


async def enqueue(kind: str, jobs: list[int]) -> None:
    """``Queries.enqueue`` with lists: one statement for a burst."""
    if not _queries:
        conn = await psycopg.AsyncConnection.connect(os.environ["PEERS_PG"], autocommit=True)
        _queries.append(Queries(PsycopgDriver(conn)))
    await _queries[0].enqueue(["job"] * len(jobs), [f"{kind}:{n}".encode() for n in jobs], [0] * len(jobs))
