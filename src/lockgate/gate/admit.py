"""The pipeline's last stage: the run is created, its slot and window hits taken, its ledger row written."""

from __future__ import annotations

import json

from ..store import gate, runs
from ..store.base import Tx
from .keys import primary_key, singleton_key, slot_of
from .offer import Decision, Offer, admitted
from .parking import end_parked, record
from .rules import BURST_REASON, Bucket, bucket_hit

__all__ = ["admit"]


async def admit(tx: Tx, o: Offer, now: float) -> Decision:
    """Start ``o``'s run (or find the run its identity already names): the admit stage."""
    plan, row = o.plan, o.pending
    payload, identity, idem = _merged(o)
    run = admitted(
        plan,
        {**o.run, "payload": payload, "idempotency_key": idem, "ticket": o.ticket, "singleton_key": singleton_key(o)},
        now,
    )
    if identity is not None:
        run["identity"] = identity
    if "$flow" in o.keys:  # the step flow control given at start, kept on the parked row
        run["flow_control"] = o.keys["$flow"]
    if plan.concurrency is not None:
        run["slot_scope"], run["slot_key"] = slot_of(plan, o.keys)
    created, fresh = await runs.create_run(tx, run, now)
    if not fresh:
        await record(
            tx,
            o,
            now,
            outcome="existing",
            control="identity",
            run_id=created["id"],
            pending_id=None if row is None else row["id"],
            reason="idempotency key already spent",
        )
        await end_parked(tx, o)
        return Decision("existing", o.ticket, run_id=created["id"])
    run_id = created["id"]
    on_burst = await _take(tx, o, run_id, run.get("deadline_at"), now)
    stopped: list[str] = []
    if plan.singleton is not None and plan.singleton.mode == "cancel":
        for incumbent in await tx.execute("singleton_incumbents", {"singleton_key": run["singleton_key"]}):
            if incumbent["id"] != run_id:
                stopped += await runs.cancel_run(tx, incumbent["id"], f"singleton: replaced by {run_id}", now)
    await record(
        tx,
        o,
        now,
        outcome="admitted",
        control=None if row is None else row["mode"],
        key=primary_key(o) if row is None else row["hold_key"],
        run_id=run_id,
        pending_id=None if row is None else row["id"],
        reason=BURST_REASON if on_burst else None,
    )
    await end_parked(tx, o)
    return Decision("started", o.ticket, run_id=run_id, stopped=stopped)


def _merged(o: Offer) -> tuple[str, str | None, str | None]:
    """The run's payload, identity and idempotency key: a gathered row's items become one payload."""
    plan, row = o.plan, o.pending
    payload, identity, idem = o.payload, o.identity, o.idempotency_key
    if (
        row is not None
        and row["items"] is not None
        and (plan.batch is not None or (plan.debounce is not None and plan.debounce.keep == "all"))
    ):
        model = o.defn.payload_model.model_validate({"items": [json.loads(i) for i in json.loads(row["items"])]})
        payload = model.model_dump_json()
        if o.defn.idempotency_key is not None and identity is None:
            idem = str(o.defn.idempotency_key(model))
            identity = f"{o.workflow}\x1f{idem}"
    return payload, identity, idem


async def _take(tx: Tx, o: Offer, run_id: str, expires_at: float | None, now: float) -> bool:
    """What the admitted run holds: a hit in each throttle window, and its concurrency slot; whether a
    token-bucket throttle let it through on burst."""
    plan = o.plan
    on_burst = False
    for w in plan.throttles:
        key = o.keys.get(w.name, "")
        if w.burst is None:
            await gate.add_window_hit(tx, w.scope, key, now, w.period)
            continue
        state = await gate.bucket_state(tx, w.scope, key)  # under the key's lock, taken by the throttle stage
        taken, burst = bucket_hit(None if state is None else Bucket(*state), w.limit, w.period, now)
        await gate.set_bucket(tx, w.scope, key, taken.anchor, taken.n, taken.last)
        on_burst = on_burst or burst
    if plan.concurrency is not None:
        await tx.execute(
            "take_slot",
            {
                "run_id": run_id,
                "scope": plan.concurrency_scope,
                "key": o.keys.get("concurrency", ""),
                "workflow": o.workflow,
                "now": now,
                "expires_at": expires_at,
            },
        )
    return on_burst
