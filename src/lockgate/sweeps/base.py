"""A sweep: periodic work each engine runs, one replica per tick (a lease row decides which)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..gate.runtime import WorkerRuntime
from ..store import workers

__all__ = ["SteadySweep", "Sweep", "SweepSettings"]


@dataclass(frozen=True, slots=True)
class SweepSettings:
    """The engine's settings the sweeps read (seconds)."""

    stall_after: float
    retention: float | None
    event_retention: float | None = None
    """Domain events published longer ago are deleted (only in an app that declares events)."""
    delivery_retention: float | None = None
    """Settled deliveries older are deleted: a trigger's custom idempotency key deduplicates this long."""
    unroutable_after: float = 60.0
    """Due runs no live worker takes for this long are reported (a log line; doctor and /metrics show them)."""
    history_partition: float = 86400.0
    """What one partition of the run history spans on PostgreSQL (history.py; docs/history.md)."""


class Sweep:
    """Run ``tick`` every ``interval`` seconds on whichever replica holds the sweep's lease."""

    def __init__(self, name: str, interval: float, tick: Callable[[WorkerRuntime], Awaitable[Any]]) -> None:
        self.name = name
        self.interval = interval
        self.tick = tick

    async def loop(self, worker: WorkerRuntime) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.run_once(worker)

    async def run_once(self, worker: WorkerRuntime) -> bool:
        """One tick, if this replica wins the lease; whether it ran."""
        rt = worker.runtime
        now = rt.clock.now()
        try:
            won = await rt.store.write(workers.acquire_sweep, self.name, worker.worker_id, now, self.interval * 2)
            if won:
                await self.tick(worker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            worker.store_failed(f"sweep {self.name}", exc)  # an outage is logged once, not once per tick
            return False
        worker.store_recovered()
        return bool(won)


class SteadySweep(Sweep):
    """A sweep whose ticks start ``interval`` apart, not ``interval`` after the previous one ended.

    A tick that took the whole interval or more is followed after ``interval * GAP`` only: the
    work a tick finds grows with the time since the last one, so a sweep whose ticks are long would
    otherwise fall further behind with each.
    """

    GAP = 0.2
    """The least pause between two ticks, as a share of the interval (the process's other work runs then)."""

    def __init__(
        self,
        name: str,
        interval: float,
        tick: Callable[[WorkerRuntime], Awaitable[Any]],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name, interval, tick)
        self._monotonic = monotonic

    async def loop(self, worker: WorkerRuntime) -> None:
        began = self._monotonic()
        while True:
            await asyncio.sleep(max(self.interval * self.GAP, began + self.interval - self._monotonic()))
            began = self._monotonic()
            await self.run_once(worker)
