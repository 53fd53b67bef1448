"""Store operations behind run listings: one page of runs under filters, and runs per hour.

A page is newest first (``created_at``, then ``id``, descending) and starts below a position,
so it is stable while runs are added. Each query of ``listing.sql`` is driven by one index; the
op picks the one the filters allow (see ``_driver``) so that a filtered page reads about as many
rows as it returns, whatever the size of the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Row, Tx

__all__ = ["FOREVER", "RunSlice", "page_of_runs", "runs_per_hour"]

FOREVER = 1e300
"""A creation time beyond every run's: the upper bound of a page that starts at the newest run."""

_LAST_ID = "\U0010ffff"  # sorts after every id: a position at a time keeps every run created then
_ID_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
# Below this many characters after ``run_``, an id prefix spans years of runs (ids begin with their
# creation time): such a page is better found walking the newest runs than the primary key.
_SELECTIVE_PREFIX = 8


@dataclass(frozen=True)
class RunSlice:
    """The rows a page may hold: every filter (``None``: any) and the creation-time bounds.

    A page holds the runs below the position ``(upper_at, upper_id)`` (newest first) and created
    at or after ``lower_at``; ``upper_id = ""`` keeps out every run created at ``upper_at``.
    """

    workflow: str | None = None
    status: str | None = None
    parent_id: str | None = None
    source: str | None = None
    id_prefix: str | None = None
    dead_letter: bool = False
    lower_at: float = -FOREVER
    upper_at: float = FOREVER
    upper_id: str = _LAST_ID


def _id_range(prefix: str) -> tuple[str, str] | None:
    """``[lo, hi)`` holding every id that starts with ``prefix`` in any collation, or ``None`` where that
    range is not narrow enough to be worth driving by.

    Only the letters and digits of a prefix bound the range (punctuation such as ``_`` sorts
    differently from one collation to the next); the exact test stays in the query.
    """
    head = prefix.rstrip("_-")
    if not head or not head[-1].isalnum() or len(prefix) < len("run_") + _SELECTIVE_PREFIX:
        return None
    last = head[-1]
    at = _ID_DIGITS.find(last)
    if at < 0 or at + 1 == len(_ID_DIGITS):
        return None
    return head, head[:-1] + _ID_DIGITS[at + 1]


def _driver(where: RunSlice) -> tuple[str, dict[str, str]]:
    """The query to run for ``where`` and the extra parameters its driving condition needs."""
    if where.workflow is not None and where.status is not None:
        return "runs_page_by_workflow", {}
    if where.parent_id is not None:
        return "runs_page_by_parent", {}
    if where.source is not None:
        return "runs_page_by_source", {}
    if where.status is not None and where.status != "running":  # the status index leaves running runs out
        return "runs_page_by_status", {}
    if where.id_prefix is not None:
        bounds = _id_range(where.id_prefix)
        if bounds is not None:
            return "runs_page_by_id", {"id_lo": bounds[0], "id_hi": bounds[1]}
    return "runs_page_by_time", {}


async def page_of_runs(tx: Tx, where: RunSlice, limit: int) -> list[Row]:
    """Up to ``limit`` runs in ``where``, newest first.

    A page of one workflow in any status is read status by status, each by the
    ``(workflow, status, created_at)`` index, and merged.
    """
    if where.workflow is not None and where.status is None and where.parent_id is None and where.source is None:
        # Read status by status, a run can end between two reads and show up in both (each statement
        # sees the runs as they are when it starts): the later read, its newer status, wins.
        found: dict[str, Row] = {}
        for status in ("running", "suspended", "succeeded", "failed", "cancelled"):
            for row in await _page(tx, RunSlice(**{**where.__dict__, "status": status}), limit):
                found[row["id"]] = row
        rows = sorted(found.values(), key=lambda r: (r["created_at"], r["id"]), reverse=True)
        return rows[:limit]
    return await _page(tx, where, limit)


async def _page(tx: Tx, where: RunSlice, limit: int) -> list[Row]:
    name, extra = _driver(where)
    params = {
        "workflow": where.workflow,
        "status": where.status,
        "parent_id": where.parent_id,
        "source": where.source,
        "id_prefix": where.id_prefix,
        "dead_letter": 1 if where.dead_letter else 0,
        "lower_at": where.lower_at,
        "upper_at": where.upper_at,
        "upper_id": where.upper_id,
        "limit": limit,
        **extra,
    }
    return await tx.execute(name, params)


async def runs_per_hour(tx: Tx, since: float, workflow: str | None = None) -> list[Row]:
    """Runs created at or after ``since`` per ``workflow``, ``hour`` (epoch seconds // 3600) and ``status``: ``n``."""
    return await tx.execute("runs_per_hour", {"since": since, "workflow": workflow})
