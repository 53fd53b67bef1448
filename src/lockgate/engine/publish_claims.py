"""A publish made in a process that executes runs hands the runs it wakes straight to it.

Without it, a run parked in ``ctx.wait_for_event`` resumes after three commits: the publish
that makes it due, the dispatcher's claim, then its own look. Here the publish's transaction
also claims, for this worker, the woken runs it takes (``store/event_waits.Claim``), and the
dispatcher executes them as the publish returns: no claim of their own, no wait for a wake-up.
The room they take is reserved before the publish, as a blocking start reserves its run's,
so ``max_concurrent_runs`` holds whatever the dispatcher claims meanwhile.

When the claimed run's wait matches by equalities (shown on its wait row: not a callable, not
an encrypted run) and its workflow has no ``cancel_on``, the same transaction also consumes the
event for that wait and journals it, exactly as the run's own look would (``settle_handed``):
the run then resumes from the journal it was handed, with no read and no commit of its own.
Anything else (a callable, a cancel that may come first) is left to the run's own look.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ..app import App
from ..clock import Clock
from ..events import decode_event
from ..matching import event_matches
from ..store import event_waits as store_waits
from ..store import journal as store_journal
from ..store import shared
from ..store.base import Row, Tx
from ..store.event_waits import Claim
from .leases import Wakeup

__all__ = ["PUBLISH_CLAIMS", "Handed", "PublishClaims", "kept_event", "settle_handed"]

_KEPT = ("id", "name", "key", "data", "source", "trace_id", "subject", "occurred_at")

Handed = tuple[Row, list[Row]]
"""A run a publish claimed, and its journal as the publish's transaction left it."""

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

    def launch(self, row: Row, journal: list[Row] | None = None) -> None:
        raise NotImplementedError

    def publish_claim(self) -> Claim | None:
        """Room for the runs a publish made here wakes, reserved until ``after_publish``."""
        room = min(self._room(), PUBLISH_CLAIMS) if self._running and not self.draining else 0
        if room <= 0:
            return None
        self._reserved += room
        return Claim(self.worker_id, self.clock.now() + self.lease, room, self._claim_keys, self._claim_patches)

    def after_publish(self, claim: Claim | None, claimed: list[Handed], woken: int) -> None:
        """Execute the runs the publish claimed here; wake the dispatcher for the others it made due, or
        when it waits for room the publish reserved and did not use."""
        if claim is not None:
            self._reserved -= claim.limit
        if self._running and not self.draining:  # else stopping the worker releases them
            for row, journal in claimed:
                self.launch(row, journal)
        if woken or (self._full and claim is not None and len(claimed) < claim.limit):
            self._full = False
            self._wake.set()


def kept_event(row: Row) -> str:
    """What a wait's journal entry keeps of the event it consumed (sealed by the caller for an encrypted run)."""
    return json.dumps({k: row[k] for k in _KEPT})


async def settle_handed(tx: Tx, app: App, run: Row, event: Row, now: float) -> list[Row]:
    """Consume ``event`` for the wait of the claimed ``run`` it satisfies, as the run's look would, when that
    can be told here (see the module's text); the run's journal, for it to resume from."""
    run_id = run["id"]
    journal = await store_journal.load_journal(tx, run_id)
    if app.get(run["workflow"]).cancel_on or store_journal.CANCEL_KEY in {e["step_key"] for e in journal}:
        return journal  # a cancel may come first: the run looks for itself
    pending = {e["step_key"]: e for e in journal if e["kind"] == "event" and e["status"] == "pending"}
    declared = app.events.get(event["name"])
    for wait in await store_waits.run_waits(tx, run_id):
        entry = pending.get(wait["step_key"])
        if entry is None or wait["name"] != event["name"] or wait["match"] is None or declared is None:
            continue  # a callable's or an encrypted run's match is the run's own to apply
        if float(event["occurred_at"]) < float(wait["since"]):
            continue
        try:
            decoded = decode_event(declared, event, datetime.fromtimestamp(float(event["occurred_at"]), UTC))
        except ValueError:
            return journal
        if not event_matches(json.loads(wait["match"]), decoded):
            continue
        if not await store_waits.consume(tx, run_id, event["id"], entry["step_key"], now):
            return journal
        fence = shared.Fence(run_id, run["owner"], int(run["epoch"]))
        seq = max(int(e["seq"]) for e in journal) + 1
        done: dict[str, Any] = {"step_key": entry["step_key"], "kind": "event", "status": "completed", "seq": seq}
        done.update(output=kept_event(event), due_at=entry["due_at"], started_at=entry["started_at"])
        await store_journal.record_entry(tx, fence, done, now)
        received = {"event": event["name"], "event_id": event["id"], "step": entry["step_key"]}
        await shared.add_event(tx, run_id, "event-received", now, received)
        return await store_journal.load_journal(tx, run_id)
    return journal
