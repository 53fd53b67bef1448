"""A stopping worker's wait for the step attempts running in it.

No run is released while a step attempt of it still executes in this process: within the grace
an attempt finishes and is journaled; past it, an attempt awaited on the event loop is ended
(cancelled, its run handed back to be run again), and one running in a thread, which nothing can
end, keeps its run's lease (renewed meanwhile) until it returns and its result is journaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..durations import format_seconds
from .durable import IN_THREAD
from .executor import Execution

__all__ = ["Drained", "Shutdown", "drain"]

log = logging.getLogger("lockgate.engine")


@dataclass(frozen=True)
class Shutdown:
    """What ``close`` did: step attempts that finished while stopping, runs released for others, and
    step attempts ended (cancelled) after the grace."""

    finished: int
    released: int
    ended: int = 0


@dataclass(frozen=True)
class Drained:
    """Step attempts that finished and were journaled while stopping, and those ended after the grace."""

    finished: int
    ended: int


async def drain(executions: Callable[[], list[Execution]], grace: float) -> Drained:
    """Wait up to ``grace`` for the step attempts of ``executions()``; then end those that can be ended
    and wait, without a deadline, for those that cannot (a second signal stops the process at once)."""

    def running() -> int:
        return sum(e.attempting for e in executions())

    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    busy = running()
    while running() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    ended = [e for e in executions() if e.attempting and e.task is not None and e.task not in IN_THREAD]
    for execution in ended:
        execution.stop("shutdown")
    for execution in ended:
        if execution.task is not None:
            with contextlib.suppress(BaseException):
                await execution.task
    if ended:
        log.warning(
            "grace of %s over: %d step attempt(s) ended (cancelled); their runs are handed back and run again",
            format_seconds(grace),
            len(ended),
        )
    if left := running():
        log.warning(
            "grace of %s over: %d step attempt(s) still running in a thread, which cannot be ended: their runs "
            "stay leased here until each returns and is journaled (a second signal stops at once)",
            format_seconds(grace),
            left,
        )
        while running():
            await asyncio.sleep(0.05)
    for _ in range(3):  # let the finished attempts reach their journal entries
        await asyncio.sleep(0)
    return Drained(finished=max(0, busy - len(ended)), ended=len(ended))
