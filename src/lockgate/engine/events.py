"""Publishing domain events (``Client.publish``, ``ctx.publish``); the log is read through ``inspect/events.py``.

A publish validates the key and payload against the declaration before anything is
written, then writes the event and one pending delivery per matching trigger (exact name
and ``"*"``) in one transaction; the fan-out sweep (``sweeps/events.py``) starts the runs.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..app import App
from ..clock import Clock
from ..crypto import Keyring
from ..errors import InvalidArgument
from ..events import WILDCARD, EventDef, Subject
from ..ids import new_id
from ..matching import leaf_keys
from ..store import Store
from ..store import events as event_ops
from ..store.base import Tx
from ..store.event_waits import Claim
from .publish_claims import Handed, settle_handed

__all__ = ["Claimer", "declared_event", "event_rows", "publish", "run_event_rows"]


class Claimer(Protocol):
    """A process that executes runs (the dispatcher): the waiting runs a publish made there wakes are claimed
    in the publish's transaction and executed there at once, not left for a claim of their own."""

    keyring: Keyring  # opens the data of an event an encrypted run published, to be matched

    def publish_claim(self) -> Claim | None:
        """Room reserved for the runs a publish wakes (``None``: none); ``after_publish`` releases it."""
        ...

    def after_publish(self, claim: Claim | None, claimed: list[Handed], woken: int) -> None:
        """The publish ended: execute the runs it ``claimed``; ``woken`` others became due."""
        ...


def declared_event(app: App, event: EventDef | str) -> EventDef:
    """The app's declaration of ``event`` (a descriptor or a name); ``InvalidArgument`` if it has none."""
    app.definitions()  # validates, and with it the events
    declared = app.events
    name = event if isinstance(event, str) else getattr(event, "name", None)
    found = declared.get(name) if isinstance(name, str) else None
    if found is None or (isinstance(event, EventDef) and found is not event):
        raise InvalidArgument(f"event {name!r} is not declared in this app (declared: {sorted(declared)})")
    return found


def event_rows(
    app: App,
    event: EventDef,
    key_json: str,
    data_json: str,
    now: float,
    *,
    source: str,
    trace_id: str | None = None,
    subject: Subject | None = None,
    event_id: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The event row and its pending delivery rows, one per trigger listening for ``event``."""
    eid = event_id or new_id("evt")
    row = {
        "id": eid,
        "name": event.name,
        "key": key_json,
        "data": data_json,
        "source": source,
        "trace_id": trace_id,
        "subject": None if subject is None else subject.to_json(),
        "occurred_at": now,
    }
    deliveries = [
        {
            "id": new_id("dlv"),
            "event_id": eid,
            "trigger_name": t.name,
            "workflow": t.workflow_name,
            "created_at": now,
        }
        for t in app.triggers
        if t.event_name in (event.name, WILDCARD)
    ]
    return row, deliveries


def run_event_rows(
    app: App, event: EventDef, key_json: str, data_json: str, now: float, run: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``event_rows`` for a publish from inside ``run``: its source, and its trace and starter inherited."""
    return event_rows(
        app,
        event,
        key_json,
        data_json,
        now,
        source=f"run:{run['id']}",
        trace_id=run.get("trace_id"),
        subject=Subject.from_json(run.get("subject")),
    )


async def publish(
    app: App,
    store: Store,
    clock: Clock,
    event: EventDef | str,
    key: Any = None,
    payload: Any = None,
    *,
    source: str,
    trace_id: str | None = None,
    subject: Subject | None = None,
    conn: Any = None,
    event_id: str | None = None,
    local: Claimer | None = None,
) -> str:
    """Validate, then write the event with its pending deliveries in one transaction; the event id.

    ``conn``: the caller's open transaction to write them in (``Store.join``) instead of a group commit;
    ``event_id``: the id to publish under (a webhook's delivery id makes a provider's retry the same event);
    ``local``: this process's dispatcher, which executes at once the waiting runs the publish wakes.
    """
    declared = declared_event(app, event)
    key_json, data_json = declared.validate(key, payload)  # PayloadError: nothing written
    now = clock.now()
    row, deliveries = event_rows(
        app, declared, key_json, data_json, now, source=source, trace_id=trace_id, subject=subject, event_id=event_id
    )
    keys = leaf_keys(declared.name, data_json)  # what runs waiting for it find it by (matching.py)
    if conn is None:
        claim = None if local is None else local.publish_claim()
        handed: tuple[list[Handed], int] = ([], 0)
        try:
            keyring = None if local is None else local.keyring
            handed = await store.write(
                _publish_handing, app, keyring, row, deliveries, keys, claim, event_id is not None
            )
        finally:
            if local is not None:
                local.after_publish(claim, *handed)
    else:
        async with store.join(conn) as joined:
            await event_ops.publish(joined.tx, row, deliveries, keys, given=event_id is not None)
    return str(row["id"])


async def _publish_handing(
    tx: Tx,
    app: App,
    keyring: Keyring | None,
    row: dict[str, Any],
    deliveries: list[dict[str, Any]],
    keys: list[str],
    claim: Claim | None,
    given: bool = False,
) -> tuple[list[Handed], int]:
    """``store/events.publish``, and the look of each run ``claim`` claimed made for it when that can be
    told here (``publish_claims.settle_handed``): those runs with their journals, and how many others woke."""
    claimed, woken = await event_ops.publish(tx, row, deliveries, keys, claim, given=given)
    now = float(row["occurred_at"])
    return [(run, await settle_handed(tx, app, keyring, run, now)) for run in claimed], woken
