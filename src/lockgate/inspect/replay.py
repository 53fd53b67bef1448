"""Reading journals out for the deploy-time replay check, and checking them against an app.

``export_run`` reads one run as a ``JournalExport`` (what ``lockgate workflows export``
writes); ``checkable`` reads the runs a deploy would meet: live ones (running or
suspended) and, when asked, the newest ended ones, which a redrive could bring back.
``check`` replays each against the app's code (``engine/replay_check.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..app import App
from ..crypto import Keyring
from ..engine.replay_check import JournalExport, ReplayVerdict, check_export
from ..errors import InvalidArgument
from ..store import journal, runs, shared
from ..store.base import Tx

__all__ = ["LIVE", "ReplayReport", "check", "checkable", "export_run"]

LIVE = ("running", "suspended")
ENDED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class ReplayReport:
    """Each checked run's verdict; ``breaking``: the live runs this code would not carry on as recorded."""

    verdicts: list[ReplayVerdict] = field(default_factory=list)

    @property
    def breaking(self) -> list[ReplayVerdict]:
        return [v for v in self.verdicts if v.breaks and (v.status is None or v.status in LIVE)]

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for v in self.verdicts:
            counts[v.outcome] = counts.get(v.outcome, 0) + 1
        return {
            "checked": len(self.verdicts),
            "outcomes": counts,
            "breaking": len(self.breaking),
            "runs": [v.to_dict() for v in self.verdicts],
        }


async def export_run(tx: Tx, run_id: str) -> JournalExport:
    """``run_id``'s row and journal, values as stored (``UnknownRun`` if there is no such run)."""
    row = await shared.get_run(tx, run_id)
    return JournalExport.of(row, await journal.load_journal(tx, run_id))


async def checkable(
    tx: Tx, *, workflow: str | None = None, limit: int = 1000, include_ended: bool = False
) -> list[JournalExport]:
    """Up to ``limit`` runs of each status a deploy meets (live; with ``include_ended`` the newest ended too)."""
    if limit < 1:
        raise InvalidArgument(f"limit must be >= 1, got {limit!r}")
    found: list[JournalExport] = []
    for status in LIVE + (ENDED if include_ended else ()):
        for row in await runs.list_runs(tx, workflow=workflow, status=status, limit=limit):
            found.append(JournalExport.of(row, await journal.load_journal(tx, row["id"])))
    return found


async def check(app: App, exports: Sequence[JournalExport], *, keyring: Keyring | None = None) -> ReplayReport:
    """Replay each export against ``app`` (no step runs, nothing is written)."""
    return ReplayReport([await check_export(app, e, keyring=keyring) for e in exports])
