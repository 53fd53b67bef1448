"""The lease watch: an execution whose lease this worker cannot renew in time stops before it lapses.

Another worker takes a run once its lease has lapsed by the database's clock. A worker cut off
from the database (a partition, a server that stopped answering, a commit stuck behind a
missing synchronous standby) cannot learn that, so its bodies would run on beside their new
owner's, acting twice at once and holding concurrency and step flow room that others have
counted free again. The watch keeps, for each run executed here, the instant on the event
loop's monotonic clock its lease ends (from the claim, then from each renewal that committed),
and stops the execution ``MARGIN`` of the lease before it: the body is cancelled, whatever it
completed but did not journal runs again elsewhere (at least once), and nothing is written
for it here. A worker frozen or starved past its lease stops its bodies as soon as it runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from ..clock import Clock

__all__ = ["LAPSING", "MARGIN", "LeaseWatch"]

MARGIN = 0.1
"""The share of the lease before its end at which an execution whose lease was not renewed stops."""
LAPSING = "lease lapsing"
"""The stop reason of such an execution (the dispatcher logs it as a lease lost, once per run)."""


class Stoppable(Protocol):
    def stop(self, reason: str) -> None: ...


class LeaseWatch:
    """Each run executed here: when its lease ends (monotonic); ``loop`` stops the executions past it."""

    def __init__(self, clock: Clock, lease: float, executions: Callable[[], Mapping[str, Stoppable]]) -> None:
        self._clock = clock
        self._lease = lease
        self._executions = executions
        self._ends: dict[str, float] = {}
        # A test clock may jump or stand still: its leases are not the event loop's seconds.
        self.enabled = clock.changed() is None

    def held(self, run_id: str, lease_until: float) -> None:
        """``run_id``'s lease, claimed or renewed, now ends at ``lease_until`` (the store's time)."""
        if self.enabled:
            loop = asyncio.get_running_loop()
            self._ends[run_id] = loop.time() + float(lease_until) - self._clock.now()

    def forget(self, run_id: str) -> None:
        self._ends.pop(run_id, None)

    def lapsing(self) -> list[str]:
        """The runs whose lease ends within the margin, or ended, without a renewal: stopped here now."""
        if not self._ends:
            return []
        deadline = asyncio.get_running_loop().time() + self._lease * MARGIN
        executions = self._executions()
        out = [rid for rid, end in self._ends.items() if end <= deadline and rid in executions]
        for rid in out:
            del self._ends[rid]
            executions[rid].stop(LAPSING)
        return out

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self._lease * MARGIN / 2)
            self.lapsing()
