"""Store operations for the time-partitioned run history (PostgreSQL; docs/history.md).

``lockgate_journal``, ``lockgate_step_attempts``, ``lockgate_run_events`` and ``lockgate_stream_chunks``
are partitioned alike by range of run id, so a run's rows sit in the partition of the interval it was
created in. The retention sweep makes the partitions ahead (``make_ahead``) and retires those past
retention (``retire``): the interval's expired runs are deleted by range with their records
(``forget_range``, a slice per commit), the rows of the runs retention keeps move to the default
partition, then the partitions are dropped. The ledger is partitioned by time with the same intervals and
suffixes, its partitions made with the run history's and dropped whole once past retention
(``ledger_partitions``, ``drop_ledger``). On SQLite nothing is partitioned: the partitions are none and
nothing else is called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..history import interval_start, partition_suffix
from ..ids import id_floor, id_millis
from .base import Tx

__all__ = [
    "LOCK_WAIT",
    "Partition",
    "bound_of",
    "bounds",
    "dated",
    "drop_ledger",
    "forget_range",
    "ledger_before",
    "ledger_partitions",
    "make_ahead",
    "partitions",
    "per_run_before",
    "retire",
]

LOCK_WAIT = "2s"
"""The longest a partition's creation or drop waits for the tables' locks (held for a moment once had)."""

_TABLE = "lockgate_journal_"
_BOUND = re.compile(r"FROM \((?:'([^']*)'|MINVALUE)\) TO \('([^']*)'\)")


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of the run history: ``suffix`` after the table's name, the run ids ``[lo, hi)`` it holds
    (``lo`` None: from the first); the default partition (``hi`` None) holds the rest. A partition of the
    ledger is ``timed``: its bounds are times (epoch seconds, as the catalog writes them)."""

    suffix: str
    lo: str | None
    hi: str | None
    timed: bool = False

    @property
    def ends_at(self) -> float | None:
        """When the last run (or decision) it may hold was created (epoch seconds); None for the default one."""
        if self.hi is None:
            return None
        return float(self.hi) if self.timed else id_millis(self.hi) / 1000

    @property
    def begins_at(self) -> float | None:
        """When the first run (or decision) it may hold was created; None for the first and default ones."""
        if self.lo is None:
            return None
        return float(self.lo) if self.timed else id_millis(self.lo) / 1000


async def partitions(tx: Tx) -> list[Partition]:
    """The history's partitions, the default one included; none on a store that does not partition."""
    return await _listed(tx, "history_partitions", _TABLE, timed=False)


async def ledger_partitions(tx: Tx) -> list[Partition]:
    """The ledger's partitions (by time), the default one included; none on a store that does not partition."""
    return await _listed(tx, "ledger_partitions", "lockgate_ledger_", timed=True)


async def _listed(tx: Tx, query: str, table: str, *, timed: bool) -> list[Partition]:
    found = []
    for row in await tx.execute(query):
        found.append(Partition(str(row["name"]).removeprefix(table), *bounds(str(row["bound"])), timed))
    return found


def bounds(bound: str) -> tuple[str | None, str | None]:
    """A partition's ``(lo, hi)`` as the catalog states them (``FOR VALUES FROM (...) TO (...)``); ``lo`` None
    for the first partition (from MINVALUE), both None for the default one."""
    match = _BOUND.search(bound)
    return (None, None) if match is None else (match[1], match[2])


async def make_ahead(tx: Tx, now: float, interval: float, until: float) -> list[str]:
    """Make the partitions of ``interval`` that cover the runs created from the end of the last one (or the
    next interval's start, if that end is past) to ``until``; the suffixes made. A partition never begins
    before a run id the default partition holds (its rows could not move)."""
    known = await partitions(tx)
    if not known:
        return []
    ends = [p.ends_at for p in known if p.ends_at is not None]
    start = max(ends, default=0.0)
    floor = now
    kept = await tx.scalar("history_kept_last")
    if kept is not None:
        floor = max(floor, id_millis(str(kept)) / 1000)
    decided = await tx.scalar("ledger_kept_last")
    if decided is not None:
        floor = max(floor, float(decided))
    if start <= floor:
        start = interval_start(floor, interval) + interval
    made = []
    while start < until:
        end = interval_start(start, interval) + interval
        suffix = partition_suffix(start)
        params = {"lo_ms": _millis(start), "hi_ms": _millis(end), "suffix": suffix, "lock_wait": LOCK_WAIT}
        if await tx.scalar("history_add", params):
            made.append(suffix)
        start = end
    return made


async def forget_range(tx: Tx, lo: str | None, hi: str, cutoff: float) -> int:
    """Delete the runs with ids in ``[lo, hi)`` (``lo`` None: from the first) that ended before ``cutoff``
    (but a child whose parent is live), by the primary key's range, with their messages, flow places and
    approval tokens (by each table's index on run_id; their stream chunks go with the partition); how many
    runs. What retires a
    partition first, a slice of its range per commit, so that none holds the writer long."""
    lo = lo if lo is not None else id_floor("run", 0)
    forgotten = int(await tx.scalar("history_forget_runs", {"lo": lo, "hi": hi, "cutoff": cutoff}) or 0)
    await tx.execute("history_forget_records", {"lo": lo, "hi": hi})
    return forgotten


async def retire(tx: Tx, part: Partition, cutoff: float) -> int:
    """Drop ``part`` (every run it may hold was created before ``cutoff``, and those retention no longer keeps
    were forgotten: ``forget_range``): the rows of the runs left in its range (live, ended at or after
    ``cutoff``, a child whose parent is live, or ended since) move to the default partition, then the
    partitions are dropped; how many runs were kept."""
    params = {"suffix": part.suffix, "lo": part.lo, "hi": part.hi, "cutoff": cutoff, "lock_wait": LOCK_WAIT}
    return int(await tx.scalar("history_retire", params) or 0)


def dated(parts: list[Partition]) -> list[Partition]:
    """The partitions of one interval each, oldest first (not the first partition an upgrade left, nor the
    default one)."""
    return sorted((p for p in parts if p.lo is not None and p.hi is not None), key=lambda p: p.lo or "")


async def per_run_before(tx: Tx, cutoff: float) -> float:
    """Until when runs are forgotten one by one (``created_at`` before it): those created before the oldest
    partition of one interval, whose rows sit in the first partition or the default one; a run created later
    is forgotten with its partition (``retire``), or once the partition below it is retired."""
    first = dated(await partitions(tx))
    if not first or first[0].lo is None:
        return cutoff
    return min(cutoff, id_millis(first[0].lo) / 1000)


async def drop_ledger(tx: Tx, part: Partition) -> bool:
    """Drop the ledger's partition ``part``, whole (every decision it may hold is past retention: the caller
    judged ``part.ends_at``); whether there was one."""
    return bool(await tx.scalar("ledger_drop", {"suffix": part.suffix, "lock_wait": LOCK_WAIT}))


async def ledger_before(tx: Tx, cutoff: float) -> float:
    """Until when ledger rows are deleted one by one (``at`` before it): those older than the ledger's oldest
    partition of one interval, in its first partition or its default one; the later ones go with their
    partition (``drop_ledger``)."""
    starts = [p.begins_at for p in await ledger_partitions(tx) if p.hi is not None]
    return min([cutoff] + [at for at in starts if at is not None])


def _millis(at: float) -> int:
    return round(at * 1000)


def bound_of(at: float) -> str:
    """The run id bound of a partition beginning at ``at`` (what the database computes, ids.py's way)."""
    return id_floor("run", _millis(at))
