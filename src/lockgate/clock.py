"""Clocks: the real one, and the seam a test clock plugs into; and the waits on the event loop that the
engine's loops share (``wait_event``, ``stop_tasks``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["CLOCK_TOLERANCE", "Clock", "ClockReading", "SystemClock", "stop_tasks", "to_datetime", "wait_event"]

_time = time.time

CLOCK_TOLERANCE = 1.0
"""Seconds a process's own clock may differ from the database's before it is reported (docs/postgres.md)."""


@dataclass(frozen=True)
class ClockReading:
    """The database's clock read once from this process: what ``SystemClock.follow`` sets time by."""

    database: float  # the database's epoch seconds
    offset: float  # this process's wall clock minus the database's, in seconds (ahead: positive)
    round_trip: float  # seconds the reading took: the offset is known to within half of it


class Clock:
    """Time as the engine sees it: epoch seconds, and a way to wait until an instant."""

    def now(self) -> float:
        raise NotImplementedError

    async def sleep_until(self, when: float) -> None:
        raise NotImplementedError

    def changed(self) -> asyncio.Event | None:
        """An event set whenever time jumps (a test clock); ``None`` for real time."""
        return None


class SystemClock(Clock):
    """Wall-clock time; once it follows a database (``follow``), that database's time.

    On PostgreSQL every process compares leases, timers and windows written by others, so
    each keeps the database's time: its own clock corrected by the offset last measured,
    re-measured on every heartbeat (a step of the host's clock counts from the next one).
    """

    def __init__(self) -> None:
        self._shift = 0.0  # seconds added to this process's wall clock: the database's minus its own
        self.offset = 0.0
        """This process's wall clock minus the database's, as the readings so far bound it (0 until one)."""

    def follow(self, reading: ClockReading) -> None:
        """Keep the database's time from now on (read again on every heartbeat).

        A reading bounds the offset to within half its round trip, no better. The offset kept (at
        first 0: this process's own clock) stays while it lies within those bounds, else it moves to
        the nearer one: a slow reading (an outage, a stall, a starved host: seconds), the first one
        at boot too, would otherwise move this process's time by up to half its round trip, enough
        to take a live lease or fire a timer early.
        """
        half = reading.round_trip / 2
        offset = min(max(self.offset, reading.offset - half), reading.offset + half)
        self.offset = offset
        self._shift = -offset

    def now(self) -> float:
        return _time() + self._shift

    async def sleep_until(self, when: float) -> None:
        delay = when - self.now()
        if delay > 0:
            await asyncio.sleep(delay)


def to_datetime(epoch: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime (``None`` stays ``None``)."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, ValueError, OSError):  # beyond any date (a row older than the bounds): the far end
        return datetime.max.replace(tzinfo=UTC) if epoch > 0 else datetime.min.replace(tzinfo=UTC)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds; whether it was set.

    Unlike ``asyncio.wait_for`` on Python 3.11, a cancellation that races the wake-up is
    never swallowed, so a loop built on this stops when its task is cancelled.
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], *, again_after: float = 0.2) -> None:
    """Cancel ``tasks`` and wait until every one has ended, whatever it raised.

    A cancellation can be lost below the task: on Python 3.11 ``asyncio.wait_for`` drops one that
    races the wait's own end, and psycopg_pool's wait for a connection uses it (psycopg issue
    1345: ``cancelling()`` stays at 1, the task goes on). A loop that lost it would go on for
    ever: a task still running after ``again_after`` seconds is cancelled again. A cancellation
    of the caller itself is not swallowed here.
    """
    every = list(tasks)
    pending = {task for task in every if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=again_after)
    for task in every:
        if not task.cancelled():
            task.exception()  # retrieved: what a stopped loop raised is not reported as never retrieved
