"""Store operations for run streams (``ctx.stream``): chunks appended under a run's fence, read back by seq.

A run's chunks are numbered per topic by the execution that writes them (it reads the run's
``state`` once before streaming again), and appended as one JSON array per call, in the group
commit, only while the run is held; the calls of many runs in one group commit are one
statement. Readers page a topic by seq through its unique index; a process's readers follow
every run's new chunks with one query by id (``tail``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from .base import Row, Tx
from .coalesce import Args, with_many
from .shared import Fence, Fenced

__all__ = ["ChunkBatch", "append", "chunks", "last_id", "read_secret", "secret", "state", "tail"]


class ChunkBatch:
    """Chunks of one held run queued for one write: the execution adds to it until the write takes it.

    Taken once: a batch the store runs again (under savepoints, after a refusal) writes the same rows.
    """

    __slots__ = ("fence", "rows", "taken")

    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        self.rows: list[dict[str, Any]] = []
        self.taken = False

    def take(self) -> list[dict[str, Any]]:
        self.taken = True
        return self.rows


def _params(batch: ChunkBatch) -> list[dict[str, Any]]:
    fence = batch.fence
    return [{**row, "run_id": fence.run_id, "owner": fence.owner, "epoch": fence.epoch} for row in batch.take()]


async def append(tx: Tx, batch: ChunkBatch) -> None:
    """Write ``batch``'s rows (``topic, seq, kind, step_key, attempt, data, size, created_at``) for its held run.

    ``Fenced`` (nothing written) when the lease moved on or the run is no longer running.
    """
    rows = _params(batch)
    if rows and not await tx.expect_rows("append_chunks", {"rows": json.dumps(rows)}, len(rows)):
        raise Fenced()


async def _append_many(tx: Tx, calls: Sequence[Args]) -> list[Any]:
    """Many runs' batches in one statement; fewer rows than given (a lease moved on): the calls one by one."""
    rows = [row for args, _ in calls for row in _params(args[0])]
    if rows and not await tx.expect_rows("append_chunks", {"rows": json.dumps(rows)}, len(rows)):
        raise Fenced()
    return [None] * len(calls)


with_many(append, _append_many, gather=True)


async def state(tx: Tx, run_id: str) -> list[Row]:
    """Per topic, kind, step and attempt: the last seq, how many rows and their bytes."""
    return await tx.execute("stream_state", {"run_id": run_id})


async def chunks(tx: Tx, run_id: str, topic: str, after: int, limit: int) -> list[Row]:
    """Up to ``limit`` rows of ``run_id``'s ``topic`` past seq ``after``, in order."""
    return await tx.execute("stream_chunks", {"run_id": run_id, "topic": topic, "after": after, "limit": limit})


async def tail(tx: Tx, after: int, limit: int) -> list[Row]:
    """Up to ``limit`` rows of any run with an id past ``after``, by id."""
    return await tx.execute("stream_tail", {"after": after, "limit": limit})


async def last_id(tx: Tx) -> int:
    return int(await tx.scalar("stream_last_id") or 0)


async def read_secret(tx: Tx, name: str) -> str | None:
    """The shared secret ``name``, if some process made it."""
    value = await tx.scalar("get_secret", {"name": name})
    return None if value is None else str(value)


async def secret(tx: Tx, name: str, now: float) -> str:
    """The shared secret ``name``, made (256 random bits) by the first process that asks."""
    await tx.execute("insert_secret", {"name": name, "value": secrets.token_urlsafe(32), "now": now})
    return str(await tx.scalar("get_secret", {"name": name}))
