"""Reading the domain event log: events, newest first, and what became of each for its triggers."""

from __future__ import annotations

from datetime import datetime

from ..crypto import Keyring, reveal_row
from ..errors import InvalidArgument
from ..events import DeliveryRecord, EventRecord
from ..store import Store
from ..store import events as store_events

__all__ = ["deliveries", "get_event", "list_events"]


async def list_events(
    store: Store, keyring: Keyring, *, name: str | None = None, since: datetime | None = None, limit: int = 50
) -> list[EventRecord]:
    """Published events, newest first (``since``: a timezone-aware datetime)."""
    if limit < 1:
        raise InvalidArgument("limit must be >= 1")
    if since is not None and since.tzinfo is None:
        raise InvalidArgument("since must be a timezone-aware datetime")
    rows = await store.read(store_events.list_events, name, None if since is None else since.timestamp(), limit)
    return [EventRecord.from_row(reveal_row(keyring, r)) for r in rows]


async def get_event(store: Store, keyring: Keyring, event_id: str) -> EventRecord:
    """One event; ``InvalidArgument`` if there is none."""
    row = await store.read(store_events.get_event, event_id)
    if row is None:
        raise InvalidArgument(f"no event has the id {event_id!r}")
    return EventRecord.from_row(reveal_row(keyring, row))


async def deliveries(store: Store, event_id: str) -> list[DeliveryRecord]:
    """What became of ``event_id`` for each trigger, by trigger name."""
    return [DeliveryRecord.from_row(r) for r in await store.read(store_events.list_deliveries, event_id)]
