"""The gate's entry point: turn ``start(...)`` into an offer and decide it in one transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from ..clock import to_datetime
from ..definitions import WorkflowDef
from ..errors import (
    BlockingStartRefused,
    DefinitionError,
    InvalidArgument,
    PayloadError,
    RateLimited,
    SingletonHeld,
)
from ..flowcontrol import check_flow_control, check_storable, resolve_flow
from ..handles import Deferral, RunHandle, Waiter
from ..ids import new_id
from ..plan import GatePlan
from ..serde import validate_payload
from ..store import gate
from ..store import runs as store_runs
from ..store.base import Row, Tx
from ..store.coalesce import Args, lone, with_many
from ..store.whole_starts import start_run_whole
from .pipeline import Decision, Offer, offer
from .runtime import Runtime

__all__ = [
    "admit",
    "admit_bare",
    "admit_bare_runs",
    "bare_run",
    "control_keys",
    "handle_for",
    "identity_key",
    "offer_for",
    "offer_of",
    "prepare",
    "start_flow_control",
]


async def admit(
    rt: Runtime,
    workflow: str | Callable[..., Any],
    payload: Any,
    *,
    at: datetime | None,
    wait: bool,
    idempotency_key: str | None,
    flow_control: Any,
    retry_of: str | None = None,
) -> RunHandle:
    """Decide one start and return its handle; blocking callers get typed refusals.

    ``retry_of`` marks a fresh run of a failed or cancelled one: it passes the gate like
    any start (so it counts against limits and windows) under a new identity.
    """
    defn, model, key, run = prepare(
        rt, workflow, payload, at=at, wait=wait, idempotency_key=idempotency_key, retry=bool(retry_of)
    )
    plan: GatePlan = defn.gate
    if flow_control is not None:  # stored on the run: every step of it runs under these limits
        run["flow_control"] = start_flow_control(flow_control, model)
    if retry_of:
        run["retry_of"] = retry_of
        run["source"] = f"retry:{retry_of}"  # where the start came from (origin.py)
    now = rt.clock.now()
    ticket = run["ticket"]
    if plan.bare and at is None and not await rt.pauses.paused(defn.name):
        created, fresh = await rt.store.write(_admit_bare, bare_run(plan, run, now), now)
        if fresh:
            rt.created_here(created, now)
            rt.wake(now)
        return RunHandle(
            workflow=defn.name,
            status="started" if fresh else "existing",
            ticket=ticket,
            run_id=created["id"],
            _client=rt.waiter,
        )
    o = await offer_of(rt, defn, model, key, run, at)
    decision = await rt.store.write(offer, o, now)
    rt.after_decision(defn, decision)
    handle = handle_for(rt.waiter, defn.name, decision)
    if wait:
        if decision.status == "dropped":
            raise RateLimited(defn.name, handle.retry_after or timedelta(0))
        if decision.status == "skipped":
            raise SingletonHeld(defn.name, decision.run_id or decision.reason or "a parked start")
    return handle


def prepare(
    rt: Runtime,
    workflow: str | Callable[..., Any],
    payload: Any,
    *,
    at: datetime | None,
    wait: bool,
    idempotency_key: str | None,
    retry: bool = False,
) -> tuple[WorkflowDef, BaseModel, str | None, dict[str, Any]]:
    """Check a start before anything is written: its definition, payload model, identity key and new run row."""
    defn = rt.app.get(workflow)
    plan: GatePlan = defn.gate
    if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
        raise PayloadError(f"start of {defn.name!r}", "at must be a timezone-aware datetime")
    if wait:
        if at is not None:
            raise BlockingStartRefused(defn.name, "at=", "wait=True")
        if plan.deferring is not None:
            raise BlockingStartRefused(defn.name, plan.deferring, "a blocking start (wait=True / run())")
    item_model = plan.item_model
    model = validate_payload(
        item_model or defn.payload_model, payload, what=f"{'item' if item_model else 'payload'} of {defn.name!r}"
    )
    if item_model is not None and idempotency_key is not None:
        raise PayloadError(
            f"start of {defn.name!r}",
            "idempotency_key cannot be given for one item: the batch's identity comes from the "
            "workflow's idempotency_key callback",
        )
    key = None if item_model is not None or retry else identity_key(defn, model, idempotency_key)
    run = rt.new_run_row(defn, "{}" if item_model is not None else model, idempotency_key=key, ticket=new_id("tkt"))
    run["retry_of"] = None
    return defn, model, key, run


def bare_run(plan: GatePlan, run: dict[str, Any], now: float) -> dict[str, Any]:
    """A start with no control to pass still carries what happens when its run fails or overruns."""
    run["on_failure"] = plan.on_failure
    if plan.finish_timeout is not None:
        run["deadline_at"] = now + plan.finish_timeout
    return run


async def offer_of(
    rt: Runtime, defn: WorkflowDef, model: BaseModel, key: str | None, run: dict[str, Any], at: datetime | None
) -> Offer:
    """What the gate's stages decide for a start with controls (or paused, or ``at=``)."""
    when = None if at is None else at.timestamp()
    return offer_for(defn, model, run, key, at=when, pauses=await rt.pauses.snapshot())


def offer_for(
    defn: WorkflowDef,
    model: BaseModel,
    run: dict[str, Any],
    key: str | None,
    *,
    at: float | None = None,
    pauses: dict[str, Row] | None = None,
) -> Offer:
    """The offer of a validated start whose run row is ``run`` (its ticket, its identity under ``key``)."""
    plan = defn.gate
    keys = control_keys(defn, plan, model)
    if run.get("flow_control"):  # a start's own flow_control rides on its parked row to the run the drainer creates
        keys["$flow"] = run["flow_control"]
    return Offer(
        defn=defn,
        plan=plan,
        ticket=run["ticket"],
        # the run row's payload: sealed when the workflow encrypts
        payload=model.model_dump_json() if plan.item_model is not None else run["payload"],
        keys=keys,
        priority=_priority(defn, plan, model),
        fair=_fair(defn, plan, model),
        identity=run["identity"] if key is not None else None,
        idempotency_key=key,
        run=run,
        at=at,
        pauses=pauses,
    )


async def admit_bare(tx: Tx, run: dict[str, Any], now: float) -> tuple[dict[str, Any], bool]:
    """A start with no control to pass: its run and its ledger row (one group commit's many together)."""
    return await _admit_bare(tx, run, now)


@lone
async def _admit_bare(tx: Tx, run: dict[str, Any], now: float) -> tuple[dict[str, Any], bool]:
    if tx.dialect == "postgres":  # one statement: alone in the writer's queue, one round trip in autocommit
        created, fresh = await start_run_whole(tx, run, now)
        if not fresh:  # the identity was spent by another start (a fresh one's ledger row is written with it)
            await gate.ledgers(tx, [_bare_decision(run, created, False, now)])
        return created, fresh
    created, fresh = await store_runs.create_run(tx, run, now)
    # its ledger row's id is not read: sent without waiting, it goes with the COMMIT
    await gate.ledgers(tx, [_bare_decision(run, created, fresh, now)])
    return created, fresh


async def admit_bare_runs(tx: Tx, runs: Sequence[tuple[dict[str, Any], float]]) -> list[tuple[Row, bool]]:
    """Many bare starts (each ``(run, now)``) in ``tx``: a multi-row insert per table; each run's row and
    whether it is new (else the one its identity already named)."""
    created = await store_runs.create_runs(tx, list(runs))
    await gate.ledgers(
        tx, [_bare_decision(run, c, fresh, now) for (run, now), (c, fresh) in zip(runs, created, strict=True)]
    )
    return created


async def _admit_bare_many(tx: Tx, calls: Sequence[Args]) -> list[Any]:
    """Many bare starts of one group commit: a multi-row insert per table instead of three rows each."""
    return await admit_bare_runs(tx, [(args[0], args[1]) for args, _ in calls])


MAX_PRIORITY = 1_000_000_000
"""The largest priority a callback may give (and its negative the smallest): a database integer holds it."""


def _bare_decision(run: dict[str, Any], created: dict[str, Any], fresh: bool, now: float) -> dict[str, Any]:
    return {
        "ticket": run["ticket"],
        "kind": "arrival",
        "workflow": run["workflow"],
        "outcome": "admitted" if fresh else "existing",
        "run_id": created["id"],
        "at": now,
        "source": run.get("source"),  # where the start came from (origin.py)
        "trace_id": run.get("trace_id"),
        "control": None if fresh else "identity",
        "reason": None if fresh else "idempotency key already spent",
    }


with_many(_admit_bare, _admit_bare_many)


def start_flow_control(value: Any, model: BaseModel) -> str:
    """``start(flow_control=)`` checked and resolved for this payload, as the run stores it."""
    try:
        checked = check_flow_control(value)
        check_storable(checked)
        return resolve_flow(checked, model).to_json()
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def identity_key(defn: WorkflowDef, payload: BaseModel, given: str | None) -> str | None:
    """The idempotency key of a start: the caller's, else the workflow's callback."""
    if given is not None:
        if not isinstance(given, str) or not given:
            raise PayloadError(f"start of {defn.name!r}", "idempotency_key must be a non-empty string")
        return _utf8(defn, "idempotency_key", given)
    if defn.idempotency_key is None:
        return None
    try:
        key = defn.idempotency_key(payload)
    except Exception as exc:
        raise DefinitionError(defn.name, "idempotency_key", f"callback raised {type(exc).__name__}: {exc}") from None
    if not isinstance(key, str) or not key:
        raise DefinitionError(defn.name, "idempotency_key", f"callback returned {key!r}, not a non-empty string")
    return _utf8(defn, "idempotency_key", key)


def _utf8(defn: WorkflowDef, field: str, key: str) -> str:
    """``key`` if it is text a database can store; a ``PayloadError`` for a lone surrogate."""
    if not key.isascii():
        try:
            key.encode()
        except UnicodeEncodeError as exc:
            raise PayloadError(
                f"start of {defn.name!r}", f"{field} {key!r} holds {key[exc.start]!r}, a lone surrogate, not text"
            ) from None
    return key


def handle_for(waiter: Waiter, workflow: str, d: Decision) -> RunHandle:
    deferral = None
    if d.status == "queued":
        deferral = Deferral(mode=d.mode or "queued", due_at=to_datetime(d.due_at), key=d.key)
    return RunHandle(
        workflow=workflow,
        status=d.status,  # type: ignore[arg-type]
        ticket=d.ticket,
        run_id=d.run_id,
        deferral=deferral,
        retry_after=None if d.retry_after is None else timedelta(seconds=d.retry_after),
        _client=waiter,
    )


def _call(defn: WorkflowDef, field: str, fn: Any, model: BaseModel) -> Any:
    try:
        value = fn(model)
    except Exception as exc:
        raise DefinitionError(defn.name, field, f"callback raised {type(exc).__name__}: {exc}") from None
    if value is None:
        raise DefinitionError(defn.name, field, "callback returned None; a key must be a value")
    return value


def control_keys(defn: WorkflowDef, plan: GatePlan, model: BaseModel) -> dict[str, str]:
    """Each declared control's key for this payload (``""`` for a control without a key)."""
    keys: dict[str, str] = {}
    pairs: list[tuple[str, Any]] = []
    if plan.debounce is not None:
        pairs.append(("debounce", plan.debounce.key))
    if plan.batch is not None:
        pairs.append(("batch", plan.batch.key))
    if plan.singleton is not None:
        pairs.append(("singleton", plan.singleton.key))
    if plan.concurrency is not None:
        pairs.append(("concurrency", plan.concurrency.key))
    pairs += [(w.name, w.key) for w in plan.windows]
    for name, fn in pairs:
        keys[name] = "" if fn is None else _utf8(defn, f"{name}.key", str(_call(defn, f"{name}.key", fn, model)))
    return keys


def _priority(defn: WorkflowDef, plan: GatePlan, model: BaseModel) -> int:
    if plan.priority is None:
        return 0
    value = _call(defn, "priority", plan.priority, model)
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_PRIORITY:
        raise DefinitionError(
            defn.name, "priority", f"callback returned {value!r}, not an int from -{MAX_PRIORITY} to {MAX_PRIORITY}"
        )
    return value


def _fair(defn: WorkflowDef, plan: GatePlan, model: BaseModel) -> str | None:
    return None if plan.fair_by is None else _utf8(defn, "fair_by", str(_call(defn, "fair_by", plan.fair_by, model)))
