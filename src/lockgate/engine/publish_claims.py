"""A publish made in a process that executes runs hands the runs it wakes straight to it.

Without it, a run parked in ``ctx.wait_for_event`` resumes after three commits: the publish
that makes it due, the dispatcher's claim, then its own look. Here the publish's transaction
also claims, for this worker, the woken runs it takes (``store/event_waits.Claim``), and the
dispatcher executes them as the publish returns: no claim of their own, no wait for a wake-up.
The room they take is reserved before the publish, as a blocking start reserves its run's,
so ``max_concurrent_runs`` holds whatever the dispatcher claims meanwhile.
"""

from __future__ import annotations

from ..clock import Clock
from ..store.base import Row
from ..store.event_waits import Claim
from .leases import Wakeup

__all__ = ["PUBLISH_CLAIMS", "PublishClaims"]

PUBLISH_CLAIMS = 1
"""Woken runs one publish claims at most; any others are left due, for whichever worker claims first. A
publish mostly wakes one run (runs wait on distinct keys), and every publish in flight holds its share of
the room meanwhile: a larger share would leave concurrent publishes none."""


class PublishClaims:
    """The dispatcher's side of ``engine/events.Claimer`` (mixed into ``Dispatcher``)."""

    worker_id: str
    lease: float
    clock: Clock
    draining: bool
    _running: bool
    _full: bool
    _reserved: int
    _claim_keys: str
    _claim_patches: str
    _wake: Wakeup

    def _room(self) -> int:
        raise NotImplementedError

    def launch(self, row: Row) -> None:
        raise NotImplementedError

    def publish_claim(self) -> Claim | None:
        """Room for the runs a publish made here wakes, reserved until ``after_publish``."""
        room = min(self._room(), PUBLISH_CLAIMS) if self._running and not self.draining else 0
        if room <= 0:
            return None
        self._reserved += room
        return Claim(self.worker_id, self.clock.now() + self.lease, room, self._claim_keys, self._claim_patches)

    def after_publish(self, claim: Claim | None, claimed: list[Row], woken: int) -> None:
        """Execute the runs the publish claimed here; wake the dispatcher for the others it made due, or
        when it waits for room the publish reserved and did not use."""
        if claim is not None:
            self._reserved -= claim.limit
        if self._running and not self.draining:  # else stopping the worker releases them
            for row in claimed:
                self.launch(row)
        if woken or (self._full and claim is not None and len(claimed) < claim.limit):
            self._full = False
            self._wake.set()
