"""Pages of runs that continue from a cursor (the run last seen) rather than an offset."""

from __future__ import annotations

from ..errors import UnknownRun
from .base import Row, Tx

__all__ = ["runs_before"]


async def runs_before(
    tx: Tx,
    before: str,
    *,
    workflow: str | None = None,
    status: str | None = None,
    parent_id: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Row]:
    """The runs matching the filters that come after run ``before`` in newest-first order
    (``created_at``, then id, descending); ``UnknownRun`` if ``before`` is no run."""
    cursor = await tx.one("get_run", {"id": before})
    if cursor is None:
        raise UnknownRun(before)
    return await tx.execute(
        "inspect_runs_before",
        {
            "workflow": workflow,
            "status": status,
            "parent_id": parent_id,
            "before_at": cursor["created_at"],
            "before_id": before,
            "limit": limit,
            "offset": offset,
        },
    )
