"""Store operations behind ``lockgate doctor``: bounded reads of what may need a person.

Each reads one question (stalled runs, crash loops, parked starts past their timeout, slots
of ended runs, schedule watermarks, retention backlog, size); ``inspect/doctor.py`` judges
the answers.
"""

from __future__ import annotations

from ..ids import id_millis
from . import history
from .base import Row, Tx
from .sql_files import migrations

__all__ = [
    "crashlooped",
    "migration_state",
    "orphaned_slots",
    "overdue_parked",
    "retention_backlog",
    "runnable",
    "schedule_states",
    "schedules_behind",
    "stalled",
    "store_size",
]


async def migration_state(tx: Tx) -> tuple[list[int], list[int]]:
    """The migration versions the store has applied, and those this code ships."""
    applied = [int(r["version"]) for r in await tx.execute("doctor_migrations")]
    return applied, [version for version, _, _ in migrations(tx.dialect)]


async def runnable(tx: Tx, now: float) -> int:
    """How many runs are due to be executed at ``now``."""
    rows = await tx.execute("doctor_runnable", {"now": now})
    return int(rows[0]["runs"] or 0)


async def stalled(tx: Tx, before: float, now: float, limit: int) -> list[Row]:
    return await tx.execute("doctor_stalled", {"before": before, "now": now, "limit": limit})


async def crashlooped(tx: Tx, limit: int) -> list[Row]:
    return await tx.execute("doctor_crashlooped", {"limit": limit})


async def overdue_parked(tx: Tx, before: float) -> list[Row]:
    return await tx.execute("doctor_overdue_parked", {"before": before})


async def orphaned_slots(tx: Tx, limit: int) -> list[Row]:
    return await tx.execute("doctor_orphaned_slots", {"limit": limit})


async def schedule_states(tx: Tx) -> list[Row]:
    return await tx.execute("doctor_schedules")


async def schedules_behind(tx: Tx, cutoff: float, limit: int) -> list[Row]:
    """Runtime schedules due before ``cutoff`` that the sweep has not looked at."""
    return await tx.execute("doctor_schedules_behind", {"cutoff": cutoff, "limit": limit})


async def retention_backlog(tx: Tx, cutoff: float) -> Row:
    """How many runs that ended before ``cutoff`` retention has not forgotten, and the oldest's end. Where the
    run history is partitioned (PostgreSQL), a run in a partition not yet past ``cutoff`` is not late: it
    goes with its partition."""
    waiting = [p for p in history.dated(await history.partitions(tx)) if (p.ends_at or 0) > cutoff]
    created_before = cutoff if not waiting else min(cutoff, id_millis(waiting[0].lo or "") / 1000)
    rows = await tx.execute("doctor_retention_backlog", {"cutoff": cutoff, "created_before": created_before})
    return rows[0]


async def store_size(tx: Tx) -> int | None:
    rows = await tx.execute("doctor_store_size")
    return None if not rows or rows[0]["bytes"] is None else int(rows[0]["bytes"])
