"""Clocks: the real one, and the seam a test clock plugs into."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

__all__ = ["Clock", "SystemClock", "to_datetime", "wait_event"]


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
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, when: float) -> None:
        delay = when - time.time()
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
