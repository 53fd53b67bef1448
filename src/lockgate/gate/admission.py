"""The gate's entry point: one arrival, one decision, one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..handles import RunHandle
from ..serde import validate_payload
from ..store import ops

if TYPE_CHECKING:
    from ..engine.client import Client, WorkflowRef

__all__ = ["admit"]


async def admit(
    client: Client,
    workflow: WorkflowRef,
    payload: Any,
    *,
    at: datetime | None,
    wait: bool,
    idempotency_key: str | None,
    flow_control: Any,
) -> RunHandle:
    """Decide one start: validate, resolve its identity, and create the run."""
    defn = client.app.get(workflow)
    model = validate_payload(defn.payload_model, payload, what=f"payload of {defn.name!r}")
    key = client.identity_key(defn, model, idempotency_key)
    row = client.new_run_row(defn, model, idempotency_key=key)
    now = client.clock.now()
    created, fresh = await client.store.write(ops.create_run, row, now)
    if fresh:
        client.wake(now)
    return RunHandle(
        workflow=defn.name,
        status="started" if fresh else "existing",
        ticket=row["ticket"],
        run_id=created["id"],
        _client=client,
    )
