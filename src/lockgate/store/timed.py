"""Store operations for the partitions by time of domain events, deliveries and schedule firings (PostgreSQL;
docs/history.md).

``lockgate_events`` (by ``occurred_at``), ``lockgate_deliveries`` (by ``created_at``: an event's deliveries are
written with it, at its time) and ``lockgate_schedule_firings`` (by ``scheduled_at``) are partitioned as the
ledger is, with the run history's intervals and suffixes: their partitions are made with the run history's
(``history.make_ahead``). The retention sweep retires each past its table's retention (``retire``): the rows that
outlive it (a pending delivery and its event, an unfinished firing) move to the default partition, the partition
is dropped. The rows older than every partition of one interval (the first partition, the default one) are still
deleted a batch at a time, up to ``before``. On SQLite nothing is partitioned: the partitions are none.
"""

from __future__ import annotations

from .base import Tx
from .history import LOCK_WAIT, Partition, bounds

__all__ = ["DELIVERIES", "EVENTS", "FIRINGS", "TABLES", "before", "partitions", "retire"]

EVENTS = "lockgate_events"
DELIVERIES = "lockgate_deliveries"
FIRINGS = "lockgate_schedule_firings"
TABLES = (DELIVERIES, EVENTS, FIRINGS)
"""In the order they retire: an event's pending deliveries move before the event is judged."""


async def partitions(tx: Tx, table: str) -> list[Partition]:
    """``table``'s partitions (by time), the default one included; none on a store that does not partition."""
    found = []
    for row in await tx.execute("timed_partitions", {"table": table}):
        found.append(Partition(str(row["name"]).removeprefix(table + "_"), *bounds(str(row["bound"])), timed=True))
    return found


async def retire(tx: Tx, table: str, part: Partition, cutoff: float) -> int | None:
    """Drop ``table``'s partition ``part`` (every row of its interval is older than ``cutoff``, the table's
    retention: the caller judged ``part.ends_at``), the rows that outlive it moved to the default partition
    first; how many moved (None: there was no such partition)."""
    params = {"table": table, "suffix": part.suffix, "cutoff": cutoff, "lock_wait": LOCK_WAIT}
    moved = await tx.scalar("timed_retire", params)
    return None if moved is None else int(moved)


async def before(tx: Tx, table: str, cutoff: float) -> float:
    """Until when ``table``'s rows are deleted one by one (their time before it): those older than its oldest
    partition of one interval, in its first partition or its default one; the later ones go with their
    partition (``retire``)."""
    starts = [p.begins_at for p in await partitions(tx, table) if p.hi is not None]
    return min([cutoff] + [at for at in starts if at is not None])
