"""A start no gate control holds, written whole by one statement where the dialect can (PostgreSQL).

Its run, its ``run-started`` event and its ``admitted`` ledger row go in one repeatable statement
(``start_bare_run``), which the PostgreSQL writer runs alone in autocommit when nothing else is
queued: one round trip, where inserting the run and then, knowing it new, the rest takes two. SQLite
cannot write three tables in one statement; its starts take ``runs.create_run``'s way.
"""

from __future__ import annotations

from typing import Any

from .base import Row, Tx
from .runs import created_row
from .shared import run_by_identity, run_params, started_data

__all__ = ["start_run_whole"]


async def start_run_whole(tx: Tx, run: dict[str, Any], now: float) -> tuple[Row, bool]:
    """``runs.create_run`` with the new run's event and ledger row in the same statement: ``(row, created)``.

    Not created, nothing is written and the caller records the spent identity. Should an earlier run of
    the statement have committed unseen (its answer lost), the identity is found spent by this very
    start: it counts as created, its event and ledger row written then.
    """
    params = run_params(run, now)
    started = started_data(params["workflow"], params["ticket"], params["parent_id"])
    if await tx.expect("start_bare_run", {**params, "started_data": started}):
        return created_row(params), True
    existing = await run_by_identity(tx, params["identity"])
    return existing, existing["id"] == params["id"]
