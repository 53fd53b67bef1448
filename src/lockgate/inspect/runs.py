"""One run as stored, with its journal, attempts, events and children (pages of runs: listing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..crypto import Keyring, reveal_row
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo
from ..store import journal, shared
from ..store.base import Tx
from .listing import RUN_STATUSES, RunFilter, runs_page

__all__ = ["RUN_STATUSES", "TERMINAL", "RunDetail", "run_detail"]

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
        children=(await runs_page(tx, RunFilter(parent_id=run_id), limit=children_limit, keyring=keys)).items,
    )
