"""Replay past events: offer each event of a window again to its triggers, as new, numbered deliveries.

A dry run (the default) says what would happen; ``commit`` starts through each trigger's
workflow gate under the identity ``<event id>:<trigger>:replay<n>``, so the replay is a new
start even where the first delivery started one. An (event, trigger) already replayed is
skipped unless ``force``: replaying the same window twice starts nothing new.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidArgument, LockgateError, StoreError
from ..events import TriggerDef, decode_event
from ..ids import new_id
from ..origin import starting_from
from ..store import events as event_ops
from .events import FanOut, _key, _why

__all__ = ["ReplayResult", "replay_events"]

MAX_LIMIT = 10_000


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did (or, in a dry run, would do) with one event for one trigger."""

    event_id: str
    trigger: str
    workflow: str
    status: str  # started | skipped | failed | would-replay
    reason: str | None = None
    replay: int = 0
    run_id: str | None = None
    ticket: str | None = None
    occurred_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def replay_events(
    deps: FanOut,
    event: str,
    *,
    triggers: list[str] | None = None,
    since: float,
    until: float,
    statuses: list[str] | None = None,
    limit: int = 100,
    commit: bool = False,
    force: bool = False,
) -> list[ReplayResult]:
    """Re-offer the events ``event`` published in ``[since, until]`` to ``triggers`` (default: all of its own).

    ``statuses``: only (event, trigger) pairs whose first delivery ended so (``skipped``, ``failed``).
    ``InvalidArgument`` naming the option for an undeclared event, an unknown trigger, a bad window.
    """
    deps.app.definitions()  # validates the events and triggers
    if event not in deps.app.events:
        raise InvalidArgument(f"event: {event!r} is not declared in this app (declared: {sorted(deps.app.events)})")
    own = [t for t in deps.app.triggers if t.event_name in (event, "*")]
    if triggers:
        unknown = sorted(set(triggers) - {t.name for t in own})
        if unknown:
            raise InvalidArgument(f"trigger: {unknown} do not listen for {event!r} (they do: {[t.name for t in own]})")
        own = [t for t in own if t.name in triggers]
    if until < since:
        raise InvalidArgument("until: must not be before since")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit: must be from 1 to {MAX_LIMIT}")
    wanted = set(statuses or ())
    if wanted - {"pending", "started", "skipped", "failed"}:
        raise InvalidArgument(f"status: unknown {sorted(wanted - {'pending', 'started', 'skipped', 'failed'})}")
    results: list[ReplayResult] = []
    for row in await deps.store.read(event_ops.replay_candidates, event, since, until, limit):
        for trigger in own:
            delivery, done = await deps.store.read(event_ops.replay_state, row["id"], trigger.name)
            if wanted and (delivery is None or delivery["status"] not in wanted):
                continue
            result = await _replay_one(deps, trigger, row, done, commit=commit, force=force)
            results.append(result)
    return results


async def _replay_one(
    deps: FanOut, trigger: TriggerDef, row: dict[str, Any], done: int, *, commit: bool, force: bool
) -> ReplayResult:
    base = {
        "event_id": row["id"],
        "trigger": trigger.name,
        "workflow": trigger.workflow_name,
        "occurred_at": float(row["occurred_at"]),
    }
    if done and not force:
        return ReplayResult(**base, status="skipped", reason=f"already replayed ({done}x); --force replays again")
    n = done + 1
    if not commit:
        return ReplayResult(**base, status="would-replay", replay=n)
    status, reason, key, outcome, run_id, ticket = await _start(deps, trigger, row, n)
    record = {
        "id": new_id("dlv"),
        "event_id": row["id"],
        "trigger_name": trigger.name,
        "workflow": trigger.workflow_name,
        "replay": n,
        "status": status,
        "reason": reason,
        "idempotency_key": key,
        "outcome": outcome,
        "run_id": run_id,
        "ticket": ticket,
        "now": deps.clock.now(),
    }
    if not await deps.store.write(event_ops.record_replay, record):
        return ReplayResult(**base, status="skipped", reason="replayed meanwhile by another caller", replay=n)
    return ReplayResult(**base, status=status, reason=reason, replay=n, run_id=run_id, ticket=ticket)


async def _start(
    deps: FanOut, trigger: TriggerDef, row: dict[str, Any], n: int
) -> tuple[str, str | None, str | None, str | None, str | None, str | None]:
    """Offer the event to the trigger's workflow gate: ``(status, reason, key, outcome, run id, ticket)``."""
    occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
    try:
        event = decode_event(deps.app.events.get(row["name"]), row, occurred, deps.keyring)
    except ValueError as exc:
        return "failed", str(exc), None, None, None, None
    try:
        if trigger.filter is not None and not trigger.filter(event):
            return "skipped", "filtered", None, None, None, None
        key = _key(trigger, event)
        payload = event.data if trigger.payload is None else trigger.payload(event)
    except Exception as exc:
        return "failed", _why(exc), None, None, None, None
    defn = deps.app.get(trigger.workflow_name)
    own = defn.idempotency_key is not None or defn.gate.item_model is not None
    gate_key = None if own else f"{event.id}:{trigger.name}:replay{n}"
    try:
        with starting_from(
            f"event:{event.name}", event.trace_id, None if event.subject is None else event.subject.to_json()
        ):
            handle = await deps.start(defn.name, payload, idempotency_key=gate_key)
    except StoreError:
        raise
    except LockgateError as exc:
        return "failed", _why(exc), key, None, None, None
    if handle.status in ("started", "existing", "queued"):
        return "started", None, key, handle.status, handle.run_id, handle.ticket
    return "skipped", f"gate:{handle.status}", key, handle.status, handle.run_id, handle.ticket
