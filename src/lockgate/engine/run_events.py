"""A body's side of domain events: ``ctx.publish`` and who the run acts for (``ctx.subject``, ``ctx.scopes``).

The execution's ``Context`` methods delegate here in one line each. A publish is journaled
like a step: the event, its pending deliveries and the journal entry commit together, so a
replay returns the recorded event id and publishes nothing again.
"""

from __future__ import annotations

from typing import Any

from ..crypto import event_identity
from ..matching import leaf_keys
from ..serde import decode, encode
from ..store import events as store_events
from . import events as domain_events
from . import identity
from .durable import Running

__all__ = ["ScopeResolver", "publish", "scopes", "subject"]


ScopeResolver = identity.ScopeResolver
subject = identity.run_subject
scopes = identity.scopes_for


async def publish(run: Running, event: Any, key: Any = None, payload: Any = None) -> str:
    """Publish ``event`` from inside ``run`` once: journaled under ``publish:<name>``; its id."""
    host = run.host
    declared = domain_events.declared_event(host.app, event)
    step_key = run.key(f"publish:{declared.name}")
    entry = run.entry(step_key)
    if entry is not None and entry["status"] == "completed":
        return str(decode(entry["output"], str))  # published by an earlier entry: not again
    key_json, data_json = declared.validate(key, payload)
    async with run.busy():
        now = run.clock.now()
        row, deliveries = domain_events.run_event_rows(host.app, declared, key_json, data_json, now, run.row)
        keys = leaf_keys(declared.name, data_json)  # from the data in clear: a sealed event is found all the same
        if run.sealer is not None:  # an encrypted run's data stays sealed in what it publishes
            row["data"] = host.keyring.seal(row["data"], event_identity(row["id"]))
        entry_row = {"step_key": step_key, "kind": "publish", "status": "completed", "output": encode(row["id"])}

        async def write(tx: Any) -> None:  # the event, its deliveries and the journal entry commit together
            await store_events.publish(tx, row, deliveries, keys)

        await run.record_with(entry_row, write)
        host.published()
        return str(row["id"])
