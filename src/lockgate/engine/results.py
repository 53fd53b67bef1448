"""Waiting for runs to end: a local finish wakes its waiters at once; the rest are read in bulk.

Every ``result()`` call used to poll its own run. With thousands of callers awaiting
thousands of runs that cost one read, one timer and one task per caller per poll, and
the polls crowded out the very work they waited for. Here each awaited run has a poll
schedule (a back-off per run), and one task reads every run whose poll is due with a
single query per tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ..clock import stop_tasks, wait_event
from ..errors import EngineClosed, UnknownRun
from ..store import Store, runs
from ..store.base import Row

__all__ = ["ResultWaiters"]

log = logging.getLogger("lockgate.engine")

_KEPT = 4096  # final rows of recent successes kept: a burst's waiters mostly arrive after their runs ended


class ResultWaiters:
    """Futures resolved when their run ends (or may have: a local stop wakes them too)."""

    def __init__(self, store: Store, max_delay: Callable[[], float]) -> None:
        self._store = store
        self._max_delay = max_delay
        self._waiters: dict[str, list[asyncio.Future[Row | None]]] = {}
        self._polls: dict[str, tuple[float, float]] = {}  # run id -> (next poll at, its back-off)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tick_at = float("inf")  # when the poll task next reads
        self._looks: dict[str, list[asyncio.Future[Row]]] = {}  # run id -> callers of look() not yet answered
        self._looking: asyncio.Task[None] | None = None
        self._succeeded: OrderedDict[str, Row] = OrderedDict()  # final rows of runs that succeeded here, newest last
        self._elsewhere: set[str] = set()  # awaited runs another process executes (``poll(..., elsewhere=True)``)
        self._closed = False

    def listen(self, run_id: str) -> asyncio.Future[Row | None]:
        """A future for ``run_id``'s end; take it before reading the run so no finish is missed.

        It resolves to the ended run's row when this process ended it, else to ``None``: read it.
        """
        if self._closed:
            raise _closed(run_id)
        future: asyncio.Future[Row | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, []).append(future)
        return future

    def succeeded(self, run_id: str) -> Row | None:
        """The final row of ``run_id`` if it succeeded here lately (a waiter arriving after the end needs no read)."""
        return self._succeeded.get(run_id)

    async def look(self, run_id: str) -> Row:
        """``run_id``'s row, read with those of every other look asked meanwhile (``UnknownRun`` if none).

        A burst of waiters (a thousand ``result()`` calls after a thousand starts) costs a few
        reads, not one each: the looks asked while a read is in flight go in the next one.
        """
        if self._closed:
            raise _closed(run_id)
        future: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
        self._looks.setdefault(run_id, []).append(future)
        if self._looking is None or self._looking.done():
            self._looking = asyncio.get_running_loop().create_task(self._look_all(), name="lockgate-looks")
        return await future

    async def _look_all(self) -> None:
        while self._looks:
            looks, self._looks = self._looks, {}
            try:
                rows = await self._store.read(runs.get_runs, list(looks))
            except asyncio.CancelledError:  # closed mid-read: these looks are no longer in self._looks
                _fail(looks, None)
                raise
            except Exception as exc:
                _fail(looks, exc)
                continue
            for run_id, futures in looks.items():
                row = rows.get(run_id)
                for future in futures:
                    if future.done():
                        continue
                    if row is None:
                        future.set_exception(UnknownRun(run_id))
                    else:
                        future.set_result(row)

    def poll(self, run_id: str, delay: float, *, elsewhere: bool = False) -> None:
        """Read ``run_id`` back in ``delay`` seconds, then with a doubling back-off.

        ``elsewhere``: another process executes it; while any such run is awaited, the store may look
        for other processes' commits more often (``Store.awaiting_others``).
        """
        if run_id not in self._waiters:
            return
        if elsewhere and run_id not in self._elsewhere:
            self._elsewhere.add(run_id)
            if len(self._elsewhere) == 1:
                self._store.awaiting_others(True)
        loop = asyncio.get_running_loop()
        at = loop.time() + delay
        current = self._polls.get(run_id)
        if current is None or at < current[0]:
            self._polls[run_id] = (at, delay)
            if at < self._tick_at:  # else the task wakes in time as it is
                self._changed.set()
        if self._task is None or self._task.done():
            self._tick_at = at
            self._task = loop.create_task(self._poll_loop(), name="lockgate-results")

    def poke(self) -> None:
        """Another process committed: every run polled for is read at once (its back-off goes on after)."""
        if not self._polls:
            return
        now = asyncio.get_running_loop().time()
        self._polls = {rid: (min(at, now), delay) for rid, (at, delay) in self._polls.items()}
        self._changed.set()

    def forget(self, run_id: str, future: asyncio.Future[Row | None]) -> None:
        """``future``'s caller stopped waiting."""
        futures = self._waiters.get(run_id)
        if futures is None:
            return
        if future in futures:
            futures.remove(future)
        if not futures:
            del self._waiters[run_id]
            self._polls.pop(run_id, None)
            if run_id in self._elsewhere:
                self._elsewhere.discard(run_id)
                if not self._elsewhere:
                    self._store.awaiting_others(False)

    def wake(self, run_id: str, ended: Row | None = None) -> None:
        """``run_id`` ended (or stopped) here: its waiters read it now, or take ``ended``, its final row."""
        if ended is not None and ended["status"] == "succeeded":  # final for good: no replay reopens a success
            self._succeeded[run_id] = ended
            if len(self._succeeded) > _KEPT:
                self._succeeded.popitem(last=False)
        for future in self._waiters.get(run_id, ()):
            if not future.done():
                future.set_result(ended)

    def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        """Stop polling; every caller still waiting gets ``EngineClosed`` (the runs themselves go on)."""
        self._closed = True
        tasks = [t for t in (self._task, self._looking) if t is not None]
        self._task = self._looking = None
        await stop_tasks(tasks)
        waiting: list[tuple[str, Sequence[asyncio.Future[Any]]]] = [*self._waiters.items(), *self._looks.items()]
        self._waiters, self._looks, self._polls = {}, {}, {}
        if self._elsewhere:
            self._elsewhere = set()
            self._store.awaiting_others(False)
        for run_id, futures in waiting:
            for future in futures:
                if not future.done():
                    future.set_exception(_closed(run_id))

    async def _poll_loop(self) -> None:
        try:
            await self._polling()
        finally:
            self._tick_at = float("inf")

    async def _polling(self) -> None:
        loop = asyncio.get_running_loop()
        while self._polls:
            self._changed.clear()
            now = loop.time()
            due = [rid for rid, (at, _) in self._polls.items() if at <= now]
            if due:
                try:
                    # The ended runs' final rows: their waiters return them without a read of their own.
                    for row in await self._store.read(runs.ended_rows, due):
                        self.wake(row["id"], row)
                except Exception as exc:  # the waiters read the run themselves and raise
                    log.debug("bulk result poll failed: %s", exc)
                    for rid in due:
                        self.wake(rid)
                ceiling = self._max_delay()
                now = loop.time()
                for rid in due:
                    if rid in self._polls:
                        delay = min(self._polls[rid][1] * 2, ceiling)
                        self._polls[rid] = (now + delay, delay)
            if not self._polls:
                break
            self._tick_at = min(at for at, _ in self._polls.values())
            wait = self._tick_at - loop.time()
            if wait > 0:
                await wait_event(self._changed, wait)


def _fail(looks: dict[str, list[asyncio.Future[Row]]], error: Exception | None) -> None:
    """Fail every look not answered yet with ``error`` (``None``: ``EngineClosed`` naming its run)."""
    for run_id, futures in looks.items():
        for future in futures:
            if not future.done():
                future.set_exception(error if error is not None else _closed(run_id))


def _closed(run_id: str) -> EngineClosed:
    return EngineClosed(f"closed: no waiting for run {run_id} here; it goes on: await it from an open engine or client")
