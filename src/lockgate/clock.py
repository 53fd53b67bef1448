"""Clocks: the real one, and the seam a test clock plugs into."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

__all__ = ["Clock", "SystemClock", "to_datetime"]


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
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)
