"""Sweeps: periodic work each engine runs, one replica per tick (a lease row decides which)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..store import workers

if TYPE_CHECKING:
    from ..engine.engine import Engine

__all__ = ["Sweep", "start_sweeps"]

log = logging.getLogger("lockgate.sweeps")


class Sweep:
    """Run ``tick`` every ``interval`` seconds on whichever replica holds the sweep's lease."""

    def __init__(self, name: str, interval: float, tick: Callable[[Engine], Awaitable[Any]]) -> None:
        self.name = name
        self.interval = interval
        self.tick = tick

    async def loop(self, engine: Engine) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.run_once(engine)

    async def run_once(self, engine: Engine) -> bool:
        """One tick, if this replica wins the lease; whether it ran."""
        now = engine.clock.now()
        try:
            won = await engine.store.write(workers.acquire_sweep, self.name, engine.worker_id, now, self.interval * 2)
            if won:
                await self.tick(engine)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            engine.store_failed(f"sweep {self.name}", exc)  # an outage is logged once, not once per tick
            return False
        engine.store_recovered()
        return bool(won)


def sweeps_for(engine: Engine) -> list[Sweep]:
    from .retention import retention_sweep
    from .staleness import staleness_sweep

    return [s for s in (staleness_sweep(engine), retention_sweep(engine)) if s is not None]


def start_sweeps(engine: Engine) -> list[asyncio.Task[Any]]:
    return [asyncio.create_task(s.loop(engine), name=f"lockgate-sweep-{s.name}") for s in sweeps_for(engine)]
