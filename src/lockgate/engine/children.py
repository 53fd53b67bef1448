"""Children offered to their workflow's gate (``ctx.start_child`` by default, ``ctx.enqueue``).

The offer and the parent's journal entry commit in one transaction: the gate decides the
child exactly as it decides ``engine.start`` (its ledger row included), and a replayed
parent returns the recorded decision instead of offering again. A child admitted at once is
created with its parent; one the gate parks is created later by the drainer, without one,
and the parent adopts it by its ticket when it waits for it, so that its end wakes the
parent from then on. Until the parked start is settled, the waiting parent parks and looks
again every ``CHILD_POLL`` seconds. A start that never becomes a run of its own (dropped,
skipped, collapsed, batched, expired, cancelled) is answered with ``ChildNotStarted``.

A parent holding a concurrency slot gives it back while it is parked on a child
(``runs.park_run(give_back=True)``) and takes a slot again, under its key's limit, before its
body goes on (``take_back``): a parent never holds a slot its children wait for, so parents
and children in one pool, or limited parents of limited children, cannot wait on each other
for ever. While its key is full the parent waits with ``waiting_on="slot"`` and looks again
every ``CHILD_POLL`` seconds.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ..context import ChildHandle, ParentClose
from ..crypto import seal_payload
from ..definitions import WorkflowDef
from ..errors import ChildNotStarted
from ..gate.admission import identity_key, offer_for, start_flow_control
from ..gate.ledger import admissions
from ..gate.pipeline import Decision, offer
from ..gate.stages import has_room
from ..ids import new_id
from ..plan import GatePlan
from ..serde import decode, encode, validate_payload
from ..store import gate, ledger, runs, shared
from ..store.base import Row, Tx
from ..store.coalesce import with_locks
from .durable import Running, Wait

__all__ = ["CHILD_POLL", "OWN_RUN", "gave_back", "handle_of", "start_gated", "take_back", "wait_gated"]

CHILD_POLL = 1.0
"""Seconds between a parent's looks at a child its gate still holds."""
OWN_RUN = ("admitted", "existing")
"""Ledger outcomes under which an arrival has a run to wait for."""


def handle_of(workflow: str, output: Any) -> ChildHandle:
    """The handle a ``child`` journal entry recorded: a run id (created at once) or the gate's decision."""
    if isinstance(output, str):
        return ChildHandle(run_id=output, workflow=workflow)
    return ChildHandle(
        run_id=output.get("run_id"),
        workflow=workflow,
        ticket=output["ticket"],
        status=output["status"],
        parent_close=output.get("parent_close", "cancel"),
    )


async def start_gated(
    x: Running, child: WorkflowDef, payload: Any, key: str, parent_close: ParentClose, flow_control: Any = None
) -> ChildHandle:
    """Offer the child to its gate; the decision is journaled under ``key`` in the same commit.

    Like ``engine.start``, a workflow that gathers items (batch, ``keep="all"``) takes one item,
    and ``flow_control`` is checked and resolved for the payload (``start_flow_control``).
    """
    host = x.host
    item = child.gate.item_model
    what = f"child {child.name!r} {'item' if item else 'payload'}"
    model = validate_payload(item or child.payload_model, payload, what=what)
    flow = None if flow_control is None else start_flow_control(flow_control, model)
    async with x.busy():
        now = x.clock.now()
        body: BaseModel | str = "{}" if item is not None else model  # a gathered run's payload is built later
        if x.sealer is not None and item is None:  # an encrypted run's children carry its data: sealed too
            body = seal_payload(host.keyring, child.name, model.model_dump_json())
        identity = None if item is not None else identity_key(child, model, None)
        run = host.new_run_row(child, body, idempotency_key=identity, ticket=new_id("tkt"))
        run.update(parent_id=x.run_id, parent_close=parent_close, recording=x.row["recording"], flow_control=flow)
        # traced: the child's spans continue under this run's (else it keeps the parent's starter)
        traced = None if host.observer is None else host.observer.trace_parent()
        run.update(source=f"child:{x.run_id}", trace_id=traced or x.row["trace_id"], subject=x.row["subject"])
        o = offer_for(child, model, run, identity)
        entry: dict[str, Any] = {"step_key": key, "kind": "child", "status": "completed"}

        async def decide(tx: Tx) -> Decision:
            decision = await offer(tx, o, now)
            status = "queued" if decision.status == "queued" else decision.status
            recorded = {"run_id": decision.run_id, "ticket": decision.ticket, "status": status}
            entry["output"] = encode({**recorded, "parent_close": parent_close})
            return decision

        decision = await x.record_with(entry, decide)
        host.runtime.after_decision(child, decision)
        host.wake(now)
        return handle_of(child.name, decode(entry["output"]))


async def _settled(tx: Tx, ticket: str) -> tuple[str, str | None, str | None] | None:
    """What became of the arrival ``ticket``: (outcome, run id, reason); ``None`` while it is parked.

    A collapsed or batched arrival is answered as such at once, though its group's run may
    follow: that run does the work, the arrival never has a run of its own.
    """
    own = [r for r in await ledger.ledger_for_ticket(tx, ticket) if r["kind"] == "arrival"]
    if not own:
        return "unknown", None, "no arrival has this ticket"
    arrival = own[0]
    if arrival["outcome"] != "queued":
        return arrival["outcome"], arrival["run_id"], arrival["reason"]
    settled = (await admissions(tx, [ticket])).get(ticket)
    if settled is None:
        return None
    return settled.outcome or "unknown", settled.run_id, settled.reason


async def wait_gated(x: Running, handle: ChildHandle, settle: Any) -> Row:
    """The gated child's ended row once it ends (``settle`` records it); parks meanwhile.

    ``ChildNotStarted`` (recorded, so a replay answers the same) when it never had a run of its own.
    """
    assert handle.ticket is not None
    key = x.key(f"wait:{handle.ticket}")
    entry = x.entry(key)
    if entry is not None and entry["status"] in ("completed", "failed"):
        return _answer(handle, entry)
    wake_at: float | None = None
    run_id = handle.run_id
    async with x.busy():
        if run_id is None:
            settled = await x.store.read(_settled, handle.ticket)
            if settled is None:
                wake_at = x.clock.now() + CHILD_POLL
            elif settled[0] not in OWN_RUN or settled[1] is None:
                outcome, other, reason = settled
                data = {"status": "not-started", "outcome": outcome, "run_id": other, "reason": reason}
                await x.record({"step_key": key, "kind": "wait_child", "status": "failed", "output": encode(data)})
                raise ChildNotStarted(handle.workflow, handle.ticket, outcome, reason, other)
            else:
                run_id = settled[1]
        if run_id is not None:
            now = x.clock.now()
            if handle.status == "started":  # created with this parent in the commit that offered it: read it
                row = await x.store.read(shared.get_run, run_id)
            else:
                row = await x.store.write(runs.adopt_child, run_id, handle.ticket, x.run_id, handle.parent_close, now)
            if row["status"] in shared.TERMINAL:
                return await settle(x, key, row, handle)  # type: ignore[no-any-return]
            if row["parent_id"] != x.run_id:  # an existing run of someone else's: its end wakes nobody here
                wake_at = now + CHILD_POLL
    await x.block(Wait("child", wake_at=wake_at, children=[] if run_id is None else [run_id]))


def _answer(handle: ChildHandle, entry: Row) -> Row:
    """A recorded wait: the entry of an ended child (the caller reads it), else the typed refusal."""
    outcome = decode(entry["output"])
    if outcome.get("status") == "not-started":
        raise ChildNotStarted(
            handle.workflow, handle.ticket or "", outcome["outcome"], outcome.get("reason"), outcome.get("run_id")
        )
    return entry


def gave_back(row: Row) -> bool:
    """Whether the run ``row`` gave its concurrency slot back as it parked (``runs.park_run(give_back=True)``)."""
    waiting = row.get("waiting_for")
    return row.get("slot_scope") is not None and waiting is not None and json.loads(waiting).get("slot") is True


async def take_back(x: Running, defn: WorkflowDef) -> bool:
    """Whether the body may be entered: a run that gave its slot back (``gave_back``) takes one again
    first; ``False``: it is parked while its key is full (or it was fenced: another worker holds it)."""
    if not gave_back(x.row):
        return True
    now = x.clock.now()
    try:
        if await x.store.write(_take_or_park, x.fence, x.row, defn.gate, now):
            return True
    except shared.Fenced:
        return False
    x.host.wake(now + CHILD_POLL)
    return False


async def _take_or_park(tx: Tx, fence: shared.Fence, run: Row, plan: GatePlan, now: float) -> bool:
    """Under the key's lock: the run's slot, held already (an entry after a crash) or taken if it has room."""
    key = run["slot_key"] or ""
    await gate.lock_key(tx, run["slot_scope"], key)
    if await gate.holds_slot(tx, run["id"]):
        return True
    if await has_room(tx, plan, key):
        await gate.retake_slot(tx, run, now)
        return True
    wake_at = now + CHILD_POLL
    await runs.park_run(tx, fence, now, wake_at=wake_at, waiting_on="slot", names=[], children=[], give_back=True)
    return False


with_locks(_take_or_park, lambda args, kwargs: [gate.lock_name(args[1]["slot_scope"], args[1]["slot_key"] or "")])
