"""Store operations on what runs recorded: journal entries, attempts, run events.

Writes that act for a run a worker holds carry a ``Fence`` (owner and epoch): if the
lease moved on, the write changes nothing and raises ``Fenced``. ``touch`` moves a held
run's ``progress_at``, the write its journal entries carry now and then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..serde import dump_json
from .base import Row, Tx
from .coalesce import lone, with_many
from .shared import Fence, Fenced

__all__ = [
    "CANCEL_KEY",
    "PROGRESS_RESOLUTION",
    "Entry",
    "add_attempt",
    "cancel_request",
    "list_attempts",
    "list_events",
    "load_journal",
    "record_entries",
    "record_entry",
    "record_held",
    "touch",
]


PROGRESS_RESOLUTION = 1.0  # seconds: how stale a held run's progress_at may be left by its journal writes


async def touch(tx: Tx, fence: Fence, now: float) -> None:
    if not await tx.expect("fence_touch", {**fence.params(), "now": now}):
        raise Fenced()


async def load_journal(tx: Tx, run_id: str) -> list[Row]:
    return await tx.execute("load_journal", {"run_id": run_id})


CANCEL_KEY = "$cancel"
"""The journal key of a compensating cancel's request (``runs.request_cancel``), read first (seq -1)."""


def cancel_request(journal: list[Row]) -> tuple[list[Row], str | None]:
    """A loaded journal without its cancel request, and the request's reason (``None``: none was made)."""
    if journal and journal[0]["step_key"] == CANCEL_KEY:
        return journal[1:], journal[0]["error_message"] or "cancelled"
    return journal, None


@lone
async def record_entry(
    tx: Tx,
    fence: Fence,
    entry: dict[str, Any],
    now: float,
    *,
    progress: bool = False,
    message: dict[str, Any] | None = None,
    attempt: dict[str, Any] | None = None,
) -> None:
    """Journal one reached operation for a held run (with the message it consumed, the attempt that ended it).

    The entry is written only while ``fence`` holds (checked by the same statement). The
    run's ``progress_at`` moves only with ``progress``: its holder asks at most once every
    ``PROGRESS_RESOLUTION``, so a step's commit mostly writes its journal entry alone.
    """
    if progress:
        await touch(tx, fence, now)
    written = await tx.expect(
        "upsert_journal",
        {
            "output": None,
            "error_tag": None,
            "error_message": None,
            "attempts": 0,
            "due_at": None,
            "started_at": now,
            "finished_at": now,
            "flow_wait": None,
            **entry,
            **fence.params(),
        },
    )
    if not written:
        raise Fenced()
    if attempt is not None:
        await add_attempt(tx, attempt)
    if message is not None:
        await tx.execute(
            "settle_message",
            {
                "step_key": entry["step_key"],
                "result": None,
                "error_tag": None,
                "error_message": None,
                "now": now,
                **message,
            },
        )


class Entry(NamedTuple):
    """A completed operation's journal entry held back to ride with the run's next write (``record_entries``)."""

    entry: dict[str, Any]
    at: float
    attempt: dict[str, Any] | None = None


@lone
async def record_entries(tx: Tx, fence: Fence, entries: Sequence[Entry], *, progress: float | None = None) -> None:
    """Journal held-back entries of a held run, in order; with ``progress``, move its ``progress_at`` too."""
    if progress is not None:
        await touch(tx, fence, progress)
    for held in entries:
        await record_entry(tx, fence, held.entry, held.at, attempt=held.attempt)


async def _record_entries_many(tx: Tx, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[None]:
    """``record_entries`` for the runs of one group commit: their entries in one statement."""
    bound = [_entries_call(*args, **given) for args, given in calls]
    for fence, _, progress in bound:
        if progress is not None:
            await touch(tx, fence, progress)
    await record_held(tx, [(fence, entries) for fence, entries, _ in bound])
    return [None] * len(calls)


def _entries_call(
    fence: Fence, entries: Sequence[Entry], *, progress: float | None = None
) -> tuple[Fence, Sequence[Entry], float | None]:
    return fence, entries, progress


async def record_held(tx: Tx, held: Sequence[tuple[Fence, Sequence[Entry]]]) -> None:
    """Journal the held-back entries of many held runs with one statement (``Fenced`` if a run's lease moved on).

    The many-at-once forms of the ops that carry entries write them here. A refusal
    rolls back the whole attempt, and the calls run again one by one: the run whose
    lease moved on is refused alone. Where one statement per row costs less
    (``Tx.rows_in_one`` false), each run's entries are written as ``record_entries`` would.
    """
    if not tx.rows_in_one:
        for fence, entries in held:
            await record_entries(tx, fence, entries)
        return
    rows: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    for fence, entries in held:
        for e in entries:
            row: dict[str, Any] = {
                "output": None,
                "error_tag": None,
                "error_message": None,
                "attempts": 0,
                "due_at": None,
                "started_at": e.at,
                "finished_at": e.at,
                "flow_wait": None,
                **e.entry,
                "run_id": fence.run_id,
                "owner": fence.owner,
                "epoch": fence.epoch,
            }
            # as text: read back exactly, where a JSON number keeps 15 digits in some readers
            for column in ("due_at", "started_at", "finished_at", "flow_wait"):
                if row[column] is not None:
                    row[column] = repr(float(row[column]))
            rows.append(row)
            if e.attempt is not None:
                attempts.append(e.attempt)
    if rows and not await tx.expect_rows("upsert_journal_many", {"entries": dump_json(rows)}, len(rows)):
        raise Fenced()
    for attempt in attempts:
        await add_attempt(tx, attempt)


with_many(record_entries, _record_entries_many)


async def add_attempt(tx: Tx, attempt: dict[str, Any]) -> None:
    await tx.execute(
        "insert_attempt", {"input": None, "error_tag": None, "error_message": None, "finished_at": None, **attempt}
    )


async def list_events(tx: Tx, run_id: str) -> list[Row]:
    return await tx.execute("list_events", {"run_id": run_id})


async def list_attempts(tx: Tx, run_id: str) -> list[Row]:
    return await tx.execute("list_attempts", {"run_id": run_id})
