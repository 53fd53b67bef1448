"""Moving open firings along as their runs end: ``settle`` (each sweep tick), and ``start_buffered``, which
starts the next buffered firing of a schedule whose run ended (``settle`` and ``schedule_chain`` both)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import Any

from ..schedule import DEFAULT_MAX_RUNTIME, ScheduleDef
from ..store import schedules as sched_ops
from ..store.base import Row, Tx
from .firing import CLAIM_LEASE, ENDED, Fired, ScheduleRuntime, cancel_run, running, start_claimed, start_claimed_many
from .firing_inline import Inline, bare_workflows, start_inline
from .schedule_book import ScheduleBook

__all__ = ["PARALLEL", "free_to_start", "settle", "start_buffered"]

log = logging.getLogger("lockgate.schedules")

PARALLEL = 256
"""Firings moved at once by ``settle`` (their writes share group commits)."""


async def settle(rt: ScheduleRuntime, book: ScheduleBook | None = None) -> int:
    """Move open firings along: finish those whose run ended, fail those past ``max_runtime``, take
    over claims their claimant abandoned, and start the next buffered firing of a schedule whose
    run ended (``start_buffered``; most were started as their run ended, by ``schedule_chain``).
    How many firings moved."""
    now = rt.clock.now()
    rows = await rt.store.read(sched_ops.open_firings)  # of the buffered firings, each schedule's oldest
    if not rows:
        return 0
    book = book or ScheduleBook(rt.schedules)
    defs = await book.named(rt.store, {row["schedule"] for row in rows})
    busy: set[str] = set()
    buffered: dict[str, list[Row]] = {}
    gate = asyncio.Semaphore(PARALLEL)
    moves: list[dict[str, Any]] = []  # the plain moves, written together once every row is classified
    taken_over: list[tuple[ScheduleDef, Row]] = []
    overdue: list[Row] = []
    # Classified in one pass (a backlog holds thousands of rows: no task each); only a takeover and a
    # cancel are writes of their own.
    for row in rows:
        sched = defs.get(row["schedule"])
        fid, status = int(row["id"]), row["status"]
        if status == "buffered":
            buffered.setdefault(row["schedule"], []).append(row)
            continue
        if status == "claimed":
            busy.add(row["schedule"])
            if row["lease_until"] is None or float(row["lease_until"]) >= now:
                continue
            if sched is None:  # abandoned, and its schedule is gone: nobody starts it any more
                why = "schedule deleted"
                moves.append(
                    {"firing_id": fid, "expect": "claimed", "status": "skipped", "why": why, "finished_at": now}
                )
            else:
                taken_over.append((sched, row))
            continue
        run_status = row["run_status"]
        if run_status in ENDED:
            finished = row["run_finished_at"]
            moves.append(
                {
                    "firing_id": fid,
                    "expect": "started",
                    "status": ENDED[run_status],
                    "why": row["run_error"] if run_status == "failed" else None,
                    "run_id": row["found_run"],
                    "finished_at": float(finished) if finished is not None else now,
                }
            )
            continue
        limit = sched.max_runtime if sched is not None else DEFAULT_MAX_RUNTIME
        if row["started_at"] is not None and now - float(row["started_at"]) > limit:
            overdue.append(row)
            continue
        busy.add(row["schedule"])
        if row["run_id"] is None and row["found_run"] is not None:  # a parked start was admitted
            moves.append({"firing_id": fid, "expect": "started", "status": "started", "run_id": row["found_run"]})

    async def take_over(sched: ScheduleDef, row: Row) -> int:
        async with gate:
            taken = await rt.store.write(sched_ops.take_firing, int(row["id"]), rt.owner, now, CLAIM_LEASE)
            if taken is None:
                return 0
            log.warning("schedule %s: took over the unstarted claim of slot %s", sched.name, row["scheduled_at"])
            await start_claimed(rt, sched, taken)
        return 1

    async def fail_overdue(row: Row) -> int:
        run_id = row["found_run"] or row["run_id"]
        async with gate:
            if run_id is not None:
                try:
                    await cancel_run(rt, run_id, f"schedule {row['schedule']!r}: max_runtime exceeded")
                except Exception as exc:
                    log.debug("schedule %s: cancelling run %s: %s", row["schedule"], run_id, exc)
            await rt.store.write(
                sched_ops.move_firing, int(row["id"]), "started", "failed", why="max_runtime exceeded", finished_at=now
            )
        return 1

    written = [take_over(sched, row) for sched, row in taken_over] + [fail_overdue(row) for row in overdue]
    admitted = sum(1 for m in moves if m["status"] == "started")  # a parked start's run found: not a move on
    moved = len(moves) - admitted + sum(await asyncio.gather(*written))
    if moves:  # each row is classified once: no firing is in two moves
        await rt.store.write(sched_ops.move_firings, moves)
    # The buffered heads wait for the rows' classification: a schedule still busy starts none.
    for rows_of in buffered.values():
        rows_of.sort(key=lambda r: (float(r["scheduled_at"]), int(r["id"])))

    ready = [(name, waiting[0]) for name, waiting in buffered.items() if name not in busy]
    orphaned = [head for name, head in ready if name not in defs]
    gone = [
        {"firing_id": int(h["id"]), "expect": "buffered", "status": "skipped", "why": "orphaned", "finished_at": now}
        for h in orphaned
    ]
    if gone:
        await rt.store.write(sched_ops.move_firings, gone)
    started = await start_buffered(rt, [name for name, _ in ready if name in defs], book)
    return moved + len(gone) + len(started)


async def start_buffered(rt: ScheduleRuntime, names: Collection[str], book: ScheduleBook) -> list[Fired]:
    """Start the oldest buffered firing of each of ``names`` with nothing running: claimed first, in one
    write that locks the schedules' rows (leaving out any another transaction holds), reads their
    definitions from them (``book``: one declared by other code is left to its own engines) and finds them
    free under that lock. A firing of a workflow with no gate control starts in that write too
    (``firing_inline``); the rest are started after it as any claim. Whoever else reaches the same schedule
    at once (the sweep, a run's end in another process) finds its head claimed, or its row held: a slot's
    start is never raced (two starts of one slot would each wait on the other's insert of its run)."""
    if not names:
        return []
    now = rt.clock.now()
    bare = await bare_workflows(rt)

    async def take(tx: Tx) -> tuple[list[tuple[ScheduleDef, Row]], Inline]:
        defs: dict[str, ScheduleDef] = {}
        for row in await sched_ops.lock_schedules(tx, sorted(names)):
            sched = book.of_row(row)
            if sched is not None:
                defs[row["name"]] = sched
        live = await sched_ops.live_firings_of(tx, list(defs)) if defs else []
        taken = await sched_ops.take_buffered(tx, free_to_start(live), rt.owner, now, CLAIM_LEASE)
        items = [(defs[r["schedule"]], r) for r in taken]
        inline, moves = await start_inline(tx, rt, items, bare, now)
        await sched_ops.move_firings(tx, moves)
        return items, inline

    items, inline = await rt.store.write(take)
    inline.told(rt)
    rest = [(sched, row, "claimed") for sched, row in items if int(row["id"]) not in inline.fired]
    return [*inline.fired.values(), *await start_claimed_many(rt, rest)]


def free_to_start(live: Iterable[Row]) -> list[str]:
    """Of ``live_firings_of``'s rows, the schedules with a buffered firing and nothing running."""
    rows = list(live)
    busy = {r["schedule"] for r in rows if r["status"] != "buffered" and running(r)}
    return sorted({r["schedule"] for r in rows if r["status"] == "buffered"} - busy)
