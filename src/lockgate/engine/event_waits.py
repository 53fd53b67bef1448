"""``ctx.wait_for_event``: a body waits for a domain event that matches, parked meanwhile.

No race: the wait is satisfied by any matching event published from its lookback on (by
default since the run started), not only by those published after it began; an event
published as the run parks is found by the park itself (``store/event_waits.py`` locks the
keys both sides meet on). Each wait consumes one event per run: two waits in a row get two
different events, oldest first. Which event satisfied a wait is journaled (the event's row
itself, sealed when the run is encrypted), so a replay returns the same one, even once the
event log has forgotten it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..app import App
from ..crypto import Keyring, Undecryptable
from ..durations import Duration, to_seconds
from ..errors import InvalidArgument
from ..events import Event, EventDef, decode_event, payload_for_match
from ..matching import Match, check_match, event_matches, wait_key
from ..store import event_waits as store_waits
from ..store import events as event_ops
from ..store.base import Row, Tx
from . import events as domain_events
from .durable import Running, Wait
from .publish_claims import kept_event

__all__ = ["EventWait", "recorded_event", "wait_for_event"]

log = logging.getLogger("lockgate.executor")

PAGE = 100  # candidates read at a time: a callable match may turn down many before one matches


@dataclass(frozen=True)
class EventWait:
    """What one ``wait_for_event`` call waits for, checked before anything is written."""

    label: str  # the awaited names, joined with "|": the journal key's name
    declared: dict[str, EventDef]
    match: Match
    equalities: dict[str, str]
    timeout: float | None
    lookback: float | None

    @property
    def keys(self) -> list[str]:
        return [wait_key(name, self.equalities) for name in self.declared]

    @classmethod
    def of(cls, app: App, event: Any, match: Match, timeout: Duration | None, lookback: Duration | None) -> EventWait:
        """Check the call's arguments; ``InvalidArgument`` naming what is wrong."""
        events = list(event) if isinstance(event, list | tuple) else [event]
        if not events:
            raise InvalidArgument("ctx.wait_for_event: event must be a declared event or a non-empty list of them")
        declared: dict[str, EventDef] = {}
        for ev in events:
            found = domain_events.declared_event(app, ev)
            declared[found.name] = found
        label = "|".join(declared)
        where = f"ctx.wait_for_event({label!r})"
        equalities = check_match(match, [(d.name, d.payload) for d in declared.values()], where)
        seconds = None if timeout is None else to_seconds(timeout, what=f"{where} timeout")
        back = None if lookback is None else to_seconds(lookback, what=f"{where} lookback")
        return cls(label, declared, match, equalities, seconds, back)


async def wait_for_event(
    x: Running,
    event: Any,
    *,
    match: Match = None,
    timeout: Duration | None = None,
    lookback: Duration | None = None,
) -> Event | None:
    """``ctx.wait_for_event``: the first matching event not consumed yet, or ``None`` at the timeout."""
    host = x.host
    spec = EventWait.of(host.app, event, match, timeout, lookback)
    key = x.key(f"event:{spec.label}")
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return recorded_event(host.app, entry["output"], host.keyring)
    clock = x.clock
    async with x.busy():
        now = clock.now()
        if entry is None:
            started, due = now, None if spec.timeout is None else now + spec.timeout
        else:
            started = float(entry["started_at"])
            due = None if entry["due_at"] is None else float(entry["due_at"])
        since = float(x.row["created_at"]) if spec.lookback is None else started - spec.lookback
        base = {"step_key": key, "kind": "event", "due_at": due, "started_at": started}
        pending = None if entry is not None else {**base, "status": "pending", "finished_at": None}
        cancel_on = bool(x.host.app.get(x.row["workflow"]).cancel_on)  # else no cancel can come first

        async def look(tx: Tx) -> tuple[dict[str, Any] | None, _Looked]:
            """Find the event and consume it in one transaction; else journal the timeout, or the wait begun."""
            found = await _find(tx, x, spec, since)
            if found is not None:
                cancel = await _cancel_first(tx, x, found[1]) if cancel_on else None
                if cancel is not None:
                    return pending, _Looked(cancel=cancel)
                await store_waits.consume(tx, x.run_id, found[1].id, key, clock.now())
                return {**base, "status": "completed", "output": _output(x, key, found[0])}, _Looked(found[1])
            if due is not None and due <= now:
                await store_waits.delete_waits(tx, x.run_id, key)
                return {**base, "status": "completed", "output": None}, _Looked(timed_out=True)
            return pending, _Looked()

        looked = await x.record_if(look)
        if looked.cancel is not None:
            await _cancel(x, *looked.cancel)
        if looked.event is not None:
            x.event("event-received", {"event": looked.event.name, "event_id": looked.event.id, "step": key})
            return looked.event
        if looked.timed_out:
            x.event("event-wait-timed-out", {"event": spec.label, "step": key})
            return None
    shown = (
        None
        if x.sealer is not None or not spec.equalities
        else json.dumps({p: json.loads(v) for p, v in spec.equalities.items()})
    )
    rows = [
        {"key": k, "name": n, "match": shown, "since": since} for k, n in zip(spec.keys, spec.declared, strict=True)
    ]

    async def on_park(tx: Tx, now: float) -> bool:
        await store_waits.lock_for_park(tx, spec.keys)
        await store_waits.write_waits(tx, x.run_id, key, rows, now)
        return (due is not None and due <= now) or await _find(tx, x, spec, since) is not None

    described = [{"event": name, "match": _described(spec, x.sealer is not None)} for name in spec.declared]
    await x.block(Wait(f"event:{spec.label}", wake_at=due, on_park=on_park, events=described))


def _described(spec: EventWait, sealed: bool) -> Any:
    """The match as ``show`` and the API tell it: the equalities, unless the run is encrypted."""
    if spec.match is None:
        return None
    if not spec.equalities:
        return "callable"
    if sealed:
        return {path: "(encrypted)" for path in spec.equalities}
    return {path: json.loads(value) for path, value in spec.equalities.items()}


async def _find(tx: Tx, x: Running, spec: EventWait, since: float) -> tuple[Row, Event] | None:
    """The oldest event from ``since`` on that satisfies ``spec`` and the run has not consumed."""
    keyring = x.host.keyring
    after: tuple[float, str] | None = None
    while True:
        rows = await store_waits.candidates(tx, x.run_id, spec.keys, since, after, PAGE)
        for row in rows:
            event = _decoded(spec.declared.get(row["name"]), row, keyring)
            if event is not None and event_matches(spec.match, event):
                return row, event
        if len(rows) < PAGE:
            return None
        after = (float(rows[-1]["occurred_at"]), str(rows[-1]["id"]))


def _decoded(declared: EventDef | None, row: Row, keyring: Keyring | None) -> Event | None:
    occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
    try:
        return decode_event(declared, row, occurred, keyring)
    except ValueError as exc:
        log.warning("wait_for_event: %s; it satisfies no wait", exc)
        return None


def _output(x: Running, key: str, row: Row) -> str:
    """What the journal keeps of the event ``row`` a wait consumed (sealed when the run is encrypted)."""
    text = kept_event(row)
    return text if x.sealer is None else x.sealer.seal(key, "output", text)


@dataclass(frozen=True)
class _Looked:
    """What one look found: the event consumed, a cancel published first, or the timeout passed."""

    event: Event | None = None
    cancel: tuple[str, str] | None = None
    timed_out: bool = False


def recorded_event(app: App, output: str | None, keyring: Keyring | None) -> Event | None:
    """The event a completed wait journaled (``None``: it timed out)."""
    if output is None:
        return None
    row = json.loads(output)
    occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
    return decode_event(app.events.get(row["name"]), row, occurred, keyring)


# -- cancel_on beside a wait -----------------------------------------------------------------


async def _cancel_first(tx: Tx, x: Running, event: Event) -> tuple[str, str] | None:
    """A ``cancel_on`` event of the run's workflow that matches the run and was published no later than
    ``event``: ``(its id, the reason)``. The cancel wins then, whichever sweep or wake-up came first."""
    defn = x.host.app.get(x.row["workflow"])
    at = event.occurred_at.timestamp()
    created = float(x.row["created_at"])
    for entry in defn.cancel_on:
        within = entry.within_seconds
        rows = await store_waits.candidates(tx, "", [wait_key(entry.event.name, {})], created, None, PAGE)
        for row in rows:
            occurred = float(row["occurred_at"])
            if occurred > at or row["id"] == event.id:
                break
            if within is not None and occurred - within > created:
                continue
            cancel = _decoded(entry.event, row, x.host.keyring)
            try:
                payload = payload_for_match(defn, x.row["payload"], x.host.keyring)
            except Undecryptable:
                return None
            if cancel is not None and event_matches(entry.match, cancel, payload):
                return str(row["id"]), entry.reason_text
    return None


async def _cancel(x: Running, event_id: str, reason: str) -> None:
    stopped = await x.store.write(event_ops.cancel_run_for_event, x.run_id, event_id, reason, x.clock.now())
    x.host.runtime.stopped(stopped, reason)
    raise asyncio.CancelledError(reason)
