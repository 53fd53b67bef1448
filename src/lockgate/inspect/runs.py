"""Runs as stored: pages of runs, and one run with its journal, attempts, events and children."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..crypto import Keyring, reveal_row
from ..errors import InvalidArgument
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..store import journal, runs, shared
from ..store.base import Tx

__all__ = ["RUN_STATUSES", "TERMINAL", "RunDetail", "check_page", "check_status", "run_detail", "runs_page"]

RUN_STATUSES = ("running", "suspended", "succeeded", "failed", "cancelled")
"""Every status a run can have, in the order tables show them."""

TERMINAL: tuple[str, ...] = tuple(shared.TERMINAL)
"""The statuses a run does not leave on its own."""

_NO_KEYS = Keyring()  # opens nothing: sealed values show as ``<encrypted>``


@dataclass(frozen=True)
class RunDetail:
    """One run with everything recorded about it, read in one transaction."""

    run: RunInfo
    steps: list[StepInfo] = field(default_factory=list)
    attempts: list[AttemptInfo] = field(default_factory=list)
    events: list[EventInfo] = field(default_factory=list)
    children: list[RunInfo] = field(default_factory=list)  # newest first

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "attempts": [a.to_dict() for a in self.attempts],
            "events": [e.to_dict() for e in self.events],
            "children": [c.to_dict() for c in self.children],
        }


def check_status(status: str | None) -> None:
    """Refuse a status no run can have (``InvalidArgument``)."""
    if status is not None and status not in RUN_STATUSES:
        raise InvalidArgument(f"unknown status {status!r}: running, suspended, succeeded, failed or cancelled")


def check_page(limit: int, offset: int) -> None:
    """Refuse a page that cannot exist (``InvalidArgument``)."""
    if limit < 1 or offset < 0:
        raise InvalidArgument("limit must be >= 1 and offset >= 0")


async def runs_page(
    tx: Tx,
    *,
    workflow: str | None = None,
    status: str | None = None,
    parent_id: str | None = None,
    source: str | None = None,
    before: str | None = None,
    limit: int = 50,
    offset: int = 0,
    keyring: Keyring | None = None,
) -> list[RunInfo]:
    """Runs matching the filters, newest first (``created_at``, then id, descending).

    ``before`` (a run id: the last one of the previous page) continues after that run, so a
    page is stable while new runs arrive; ``UnknownRun`` if there is no such run. Sealed values
    show in clear where ``keyring`` opens them, ``<encrypted>`` elsewhere."""
    if before is None:
        rows = await runs.list_runs(
            tx, workflow=workflow, status=status, parent_id=parent_id, source=source, limit=limit, offset=offset
        )
    else:
        rows = await runs.runs_before(
            tx,
            before,
            workflow=workflow,
            status=status,
            parent_id=parent_id,
            source=source,
            limit=limit,
            offset=offset,
        )
    return [RunInfo.from_row(reveal_row(keyring or _NO_KEYS, r)) for r in rows]


async def run_detail(tx: Tx, run_id: str, *, children_limit: int = 1000, keyring: Keyring | None = None) -> RunDetail:
    """``run_id`` with its journal, attempts, events and (up to ``children_limit``) children; ``UnknownRun``.

    Sealed values show in clear where ``keyring`` opens them, ``<encrypted>`` elsewhere."""
    keys = keyring or _NO_KEYS
    run = RunInfo.from_row(reveal_row(keys, await shared.get_run(tx, run_id)))
    return RunDetail(
        run=run,
        steps=[StepInfo.from_row(reveal_row(keys, r)) for r in await journal.load_journal(tx, run_id)],
        attempts=[AttemptInfo.from_row(reveal_row(keys, r)) for r in await journal.list_attempts(tx, run_id)],
        events=[EventInfo.from_row(reveal_row(keys, r)) for r in await journal.list_events(tx, run_id)],
        children=await runs_page(tx, parent_id=run_id, limit=children_limit, keyring=keys),
    )
