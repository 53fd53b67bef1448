"""Store operations for run versions: the due runs no live worker's code can take, grouped by what
they are stamped with, and an operator's restamp of old runs (``lockgate workflows migrate-version``)."""

from __future__ import annotations

import json

from .base import Row, Tx

__all__ = ["due_groups", "mark_waiting_version", "migrate_versions"]


async def due_groups(tx: Tx, now: float) -> list[Row]:
    """Due runs no worker holds, by ``workflow, version, patches``: ``n``, ``oldest`` (wake time), ``marked``
    (how many already say ``waiting_on="version"``)."""
    return await tx.execute("due_groups", {"now": now})


async def mark_waiting_version(
    tx: Tx, now: float, workflow: str, version: str | None, patches: str, offered: list[str]
) -> int:
    """Show the due runs of ``workflow`` stamped ``version`` (and ``patches``) as waiting for a version."""
    params = {"now": now, "workflow": workflow, "version": version, "patches": patches, "offered": json.dumps(offered)}
    return len(await tx.execute("mark_waiting_version", params))


async def migrate_versions(
    tx: Tx,
    now: float,
    from_version: str | None,
    to_version: str,
    *,
    workflow: str | None,
    run_id: str | None,
    commit: bool,
    limit: int,
) -> list[Row]:
    """Restamp the live runs (one, or a workflow's) of ``from_version`` as ``to_version``: the rows changed,
    or with ``commit=False`` the rows it would change (up to ``limit``), nothing written."""
    params = {"now": now, "from_version": from_version, "to_version": to_version, "workflow": workflow}
    if not commit:
        return await tx.execute("runs_of_version", {**params, "run_id": run_id, "limit": limit})
    return await tx.execute("migrate_versions", {**params, "run_id": run_id})
