"""A body's side of domain events: ``ctx.publish`` and who the run acts for (``ctx.subject``, ``ctx.scopes``).

The execution's ``Context`` methods delegate here in one line each. A publish is journaled
like a step: the event, its pending deliveries and the journal entry commit together, so a
replay returns the recorded event id and publishes nothing again.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..clock import Clock
from ..serde import decode, encode
from ..store import Store, shared
from ..store import events as store_events
from ..store import journal as store_journal
from ..store.base import Row
from . import events as domain_events
from . import identity

__all__ = ["Publisher", "ScopeResolver", "publish", "scopes", "subject"]


class Publisher(Protocol):
    """The part of an execution a publish reads and moves (``engine/executor.py``'s ``Execution``)."""

    row: Row
    fence: shared.Fence
    _journal: dict[str, Row]
    _store: Store
    _clock: Clock
    _progress_at: float

    @property
    def _host(self) -> Any: ...

    def _key(self, name: str) -> str: ...

    def _seq(self) -> int: ...

    def _op(self) -> Any: ...

    def _touch_due(self, now: float) -> bool: ...

    def stop(self, reason: str) -> None: ...


ScopeResolver = identity.ScopeResolver
subject = identity.run_subject
scopes = identity.scopes_for


async def publish(run: Publisher, event: Any, key: Any = None, payload: Any = None) -> str:
    """Publish ``event`` from inside ``run`` once: journaled under ``publish:<name>``; its id."""
    host = run._host
    declared = domain_events.declared_event(host.app, event)
    step_key = run._key(f"publish:{declared.name}")
    entry = run._journal.get(step_key)
    if entry is not None and entry["status"] == "completed":
        return str(decode(entry["output"], str))  # published by an earlier entry: not again
    key_json, data_json = declared.validate(key, payload)
    async with run._op():
        now = run._clock.now()
        row, deliveries = domain_events.run_event_rows(host.app, declared, key_json, data_json, now, run.row)
        entry_row = {"step_key": step_key, "seq": run._seq(), "kind": "publish", "status": "completed"}
        entry_row["output"] = encode(row["id"])
        touch = run._touch_due(now)

        async def write(tx: Any) -> None:  # the event, its deliveries and the journal entry commit together
            await store_events.publish(tx, row, deliveries)
            await store_journal.record_entry(tx, run.fence, entry_row, now, progress=touch)

        try:
            await run._store.write(write)
        except shared.Fenced:
            run.stop("lease lost")
            raise
        if touch:
            run._progress_at = now
        run._journal[step_key] = entry_row
        host.published()
        return str(row["id"])
