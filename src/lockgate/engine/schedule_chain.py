"""A schedule's next buffered firing starts as its run ends, in the process where the run ended.

With ``on_overlap="buffer"`` a schedule runs one run at a time: a slot that comes due while one
runs waits as a buffered firing, and the sweep's ``settle`` used to start it only at its next
tick, so a schedule whose runs end after its next slot fell a tick further behind with each
one. ``ScheduleChain`` starts it at once instead. The dispatcher reports each run it ends here
(``Core.run_ended``, right after the end's commit); for those a schedule started (their source
is ``schedule:<name>``) the chain, in one write per batch of ends, locks the schedules' rows
(leaving out any another transaction holds), reads their live firings, and claims the oldest
buffered firing of each schedule with nothing running (buffered → claimed, leased to this
process). A claim of a workflow with no gate control has its run and ledger row inserted and is
moved to ``started`` in that same write (``firing_inline``): one read and one commit for a batch
of ends; any other claim is started after it, through the gate and the ledger. This is
``firing_settle.start_buffered``, which the sweep's ``settle`` starts buffered firings with too.

A slot still starts once: a schedule's head is claimed by one transaction under its row's lock
and only while it is buffered, and its start is idempotent by the slot's key. What the chain
leaves is the sweep's, as before: a row another transaction held, a batch that failed, a
process that died between its claim and its start (``settle`` takes the claim over once its
lease lapsed). Only ``buffer`` leaves firings waiting: ``skip`` drops a slot that overlaps and
``cancel_other`` starts it at once, so a run's end has nothing to start for them and the chain
writes nothing (one read finds no buffered firing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from ..store import schedules as sched_ops
from ..store.base import Row
from .firing import Fired, ScheduleRuntime, source_of
from .firing_settle import free_to_start, start_buffered
from .schedule_book import ScheduleBook

__all__ = ["BATCH", "IN_FLIGHT", "ScheduleChain", "start_next"]

log = logging.getLogger("lockgate.schedules")

BATCH = 500
"""Schedules whose next firing one write claims, at most (more ends wait for the next batch)."""

IN_FLIGHT = 4
"""Batches started at once by one process (their writes share group commits)."""

_PREFIX = source_of("")


class ScheduleChain:
    """Collects the schedules whose runs ended here and starts their next buffered firings (``loop``)."""

    def __init__(self, rt: ScheduleRuntime, book: ScheduleBook | None = None) -> None:
        self.rt = rt
        self.book = book or ScheduleBook(rt.schedules)
        self._pending: set[str] = set()
        self._wake = asyncio.Event()

    def ended(self, row: Row) -> None:
        """A run ended here (its row as its end wrote it, with its ``source``); not blocking."""
        source = row.get("source")
        if isinstance(source, str) and source.startswith(_PREFIX):
            self._pending.add(source[len(_PREFIX) :])
            self._wake.set()

    async def loop(self) -> None:
        """Start the next firings of the schedules reported, until cancelled: a batch as soon as ends come
        in, up to ``IN_FLIGHT`` batches at once (under load each waits on several commits, and the ends
        reported meanwhile need not wait for it to finish)."""
        room = asyncio.Semaphore(IN_FLIGHT)
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    await room.acquire()  # meanwhile more ends join the next batch
                    names = sorted(self._pending)[:BATCH]
                    self._pending.difference_update(names)
                    task = asyncio.create_task(self._start(names, room), name="lockgate-schedule-chain-batch")
                    running.add(task)
                    task.add_done_callback(running.discard)
        finally:
            for task in running:
                task.cancel()

    async def _start(self, names: list[str], room: asyncio.Semaphore) -> None:
        try:
            await start_next(self.rt, self.book, names)
        except Exception as exc:  # the store failed: the sweep's next tick starts them
            log.warning("schedules: starting the next buffered firings of %d schedule(s): %s", len(names), exc)
        finally:
            room.release()


async def start_next(rt: ScheduleRuntime, book: ScheduleBook, names: Collection[str]) -> list[Fired]:
    """Start the oldest buffered firing of each of ``names`` that has one and nothing running; what
    became of each firing claimed (none for a schedule another transaction held)."""
    if not names:
        return []
    # A read first: most ends (every one of a skip or cancel_other schedule) find nothing waiting, and lock nothing.
    waiting = free_to_start(await rt.store.read(sched_ops.live_firings_of, sorted(names)))
    return await start_buffered(rt, waiting, book)
