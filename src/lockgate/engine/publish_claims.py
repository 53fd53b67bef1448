"""A publish made in a process that executes runs hands the runs it wakes straight to it.

Without it, a run parked in ``ctx.wait_for_event`` resumes after three commits: the publish
that makes it due, the dispatcher's claim, then its own look. Here the publish's transaction
also claims, for this worker, the woken runs it takes (``store/event_waits.Claim``), and the
dispatcher executes them as the publish returns: no claim of their own, no wait for a wake-up.
The room they take is reserved before the publish, as a blocking start reserves its run's,
so ``max_concurrent_runs`` holds whatever the dispatcher claims meanwhile.

When the claimed run's wait matches by equalities (kept on its wait rows: not a callable, not
an encrypted run) and its workflow has no ``cancel_on``, the same transaction also makes the
look the run would make on resuming (``settle_handed``): the oldest event from its lookback on
that it has not consumed and that the equalities match (``event_matches``, the one rule) is
consumed and journaled. The run then resumes from the journal it was handed, with no read and
no commit of its own. Anything else (a callable, a cancel that may come first) is left to the
run's own look, as is a wait whose first page of candidates holds no match.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from ..app import App
from ..clock import Clock
from ..crypto import Keyring
from ..events import decode_event
from ..matching import event_matches
from ..store import event_waits as store_waits
from ..store import journal as store_journal
from ..store import runs, shared
from ..store.base import Row, Tx
from ..store.event_waits import Claim
from .leases import Wakeup

__all__ = ["PUBLISH_CLAIMS", "Handed", "PublishClaims", "claim_handing", "kept_event", "settle_handed"]

PAGE = 100
"""Candidates a claim looks through for a wait; past them, the run's own look goes on."""

_KEPT = ("id", "name", "key", "data", "source", "trace_id", "subject", "occurred_at")

Handed = tuple[Row, list[Row] | None]
"""A run claimed, and its journal as the claiming transaction left it (``None``: not read there)."""

SETTLED_PER_CLAIM = 16
"""Runs parked on an event whose look one dispatcher claim makes (the rest look for themselves): a claim
that takes hundreds of them at once stays a short transaction."""

PUBLISH_CLAIMS = 1
"""Woken runs one publish claims at most; any others are left due, for whichever worker claims first. A
publish mostly wakes one run (runs wait on distinct keys), and every publish in flight holds its share of
the room meanwhile: a larger share would leave concurrent publishes none."""


class PublishClaims:
    """The dispatcher's side of ``engine/events.Claimer`` (mixed into ``Dispatcher``)."""

    worker_id: str
    lease: float
    clock: Clock
    keyring: Keyring
    draining: bool
    _running: bool
    _full: bool
    _reserved: int
    _claim_keys: str
    _claim_patches: str
    _wake: Wakeup

    def _room(self) -> int:
        raise NotImplementedError

    def launch(self, row: Row, journal: list[Row] | None = None) -> asyncio.Task[None] | None:
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


async def claim_handing(
    tx: Tx, app: App, keyring: Keyring | None, owner: str, now: float, lease_until: float, limit: int, *filters: str
) -> tuple[list[Handed], float | None]:
    """``runs.claim_runs`` (``filters``: its keys and patches), and for the runs parked on an event among them
    (woken by another process's publish), the look each would make on resuming (``settle_handed``). With
    them, when the next run becomes claimable (``runs.next_wake``), read in the claim's round trip."""
    claimed: list[Handed] = []
    settled = 0
    rows, due = await runs.claim_runs_waking(tx, owner, now, lease_until, limit, *filters)
    for row in rows:
        waiting = str(row.get("waiting_on") or "").startswith("event:") and settled < SETTLED_PER_CLAIM
        settled += waiting
        claimed.append((row, await settle_handed(tx, app, keyring, row, now) if waiting else None))
    return claimed, due


async def settle_handed(tx: Tx, app: App, keyring: Keyring | None, run: Row, now: float) -> list[Row]:
    """For a run just claimed: the look its pending wait would make on resuming, made here (see the module's
    text): the oldest event from its lookback on that it has not consumed and that its equalities match
    (``event_matches``, the one rule), consumed and journaled. The run's journal, for it to resume from."""
    run_id = run["id"]
    journal = await store_journal.load_journal(tx, run_id)
    if app.get(run["workflow"]).cancel_on or store_journal.CANCEL_KEY in {e["step_key"] for e in journal}:
        return journal  # a cancel may come first: the run looks for itself
    pending = {e["step_key"]: e for e in journal if e["kind"] == "event" and e["status"] == "pending"}
    steps: dict[str, list[Row]] = {}
    for wait in await store_waits.run_waits(tx, run_id):
        steps.setdefault(wait["step_key"], []).append(wait)
    for step_key, waits in steps.items():
        entry = pending.get(step_key)
        if entry is None or any(w["match"] is None for w in waits):
            continue  # a callable's or an encrypted run's match is the run's own to apply
        found = await _first_match(tx, app, keyring, run_id, waits)
        if found is None or not await store_waits.consume(tx, run_id, found["id"], step_key, now):
            continue
        fence = shared.Fence(run_id, run["owner"], int(run["epoch"]))
        seq = max(int(e["seq"]) for e in journal) + 1
        done: dict[str, Any] = {"step_key": step_key, "kind": "event", "status": "completed", "seq": seq}
        done.update(output=kept_event(found), due_at=entry["due_at"], started_at=entry["started_at"])
        await store_journal.record_entry(tx, fence, done, now)
        received = {"event": found["name"], "event_id": found["id"], "step": step_key}
        await shared.add_event(tx, run_id, "event-received", now, received)
        return await store_journal.load_journal(tx, run_id)
    return journal


async def _first_match(tx: Tx, app: App, keyring: Keyring | None, run_id: str, waits: list[Row]) -> Row | None:
    """The first page of the wait's candidates, oldest first: the first its equalities match (else the run's
    own look goes on past it)."""
    equalities = json.loads(waits[0]["match"])
    since = float(waits[0]["since"])
    for row in await store_waits.candidates(tx, run_id, [w["key"] for w in waits], since, None, PAGE):
        occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
        try:
            event = decode_event(app.events.get(row["name"]), row, occurred, keyring)
        except ValueError:
            return None  # the run's look logs it and goes past it
        if event_matches(equalities, event):
            return row
    return None
