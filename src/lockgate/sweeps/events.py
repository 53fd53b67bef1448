"""Fan-out: each pending delivery (one per event and trigger) becomes a start, a skip or a failure.

A delivery moves ``pending -> started | skipped | failed`` once. Its start passes the
workflow's gate like any other (a debounced workflow folds a burst of events) under the
identity ``<event id>:<trigger>``, unless the workflow keys its own starts: so a sweep that
crashed after starting but before settling the row finds the same run again
(``existing``) instead of starting a second one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..app import App
from ..clock import Clock
from ..crypto import Keyring
from ..errors import LockgateError, StoreError
from ..events import Event, TriggerDef, decode_event
from ..gate.admission import admit
from ..gate.runtime import Runtime, WorkerRuntime
from ..handles import RunHandle
from ..origin import starting_from
from ..store import Store
from ..store import events as event_ops
from .base import Sweep, SweepSettings

__all__ = ["Delivered", "FanOut", "PokedSweep", "fan_out", "fanout_sweep", "gate_start"]

log = logging.getLogger("lockgate.sweeps")

BATCH = 200

StartFn = Callable[..., Awaitable[RunHandle]]
"""``start(workflow, payload, *, idempotency_key=None)``: a start through the gate (``gate_start``)."""


def gate_start(rt: Runtime) -> StartFn:
    """A start through the gate with ``rt``, as ``Client.start`` makes one (no wait, no ``at``)."""

    async def start(workflow: str, payload: Any, *, idempotency_key: str | None = None) -> RunHandle:
        return await admit(
            rt, workflow, payload, at=None, wait=False, idempotency_key=idempotency_key, flow_control=None
        )

    return start


@dataclass(frozen=True)
class FanOut:
    """What the fan-out needs: the store and clock, the app's triggers and events, and a way to start."""

    store: Store
    clock: Clock
    app: App
    start: StartFn
    batch: int = BATCH
    keyring: Keyring | None = None  # opens what an encrypted run published
    # Seconds one pass may take: past it the rest wait for the next tick, so a pass ends while its replica
    # still holds the sweep's lease (another would otherwise work the same rows beside it).
    budget: float | None = None


@dataclass
class Delivered:
    """What one fan-out pass did, by delivery status."""

    started: int = 0
    skipped: int = 0
    failed: int = 0
    ids: list[str] = field(default_factory=list)


async def fan_out(deps: FanOut) -> Delivered:
    """Settle up to ``deps.batch`` pending deliveries of the triggers ``deps.app`` declares."""
    triggers = {t.name: t for t in deps.app.triggers}
    done = Delivered()
    if not triggers:
        return done
    rows = await deps.store.read(event_ops.pending_deliveries, sorted(triggers), deps.batch)
    until = None if deps.budget is None else time.monotonic() + deps.budget
    for row in rows:
        if until is not None and time.monotonic() > until:
            break
        status = await _deliver(deps, triggers[row["trigger_name"]], row)
        setattr(done, status, getattr(done, status) + 1)
        done.ids.append(row["id"])
    return done


async def _deliver(deps: FanOut, trigger: TriggerDef, row: dict[str, Any]) -> str:
    """Settle one delivery; its status."""
    did = row["id"]
    occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
    try:
        event = decode_event(deps.app.events.get(row["name"]), {**row, "id": row["event_id"]}, occurred, deps.keyring)
    except ValueError as exc:
        return await _settle(deps, row, "failed", reason=str(exc))
    try:
        if trigger.filter is not None and not trigger.filter(event):
            return await _settle(deps, row, "skipped", reason="filtered")
        key = _key(trigger, event)
        payload = event.data if trigger.payload is None else trigger.payload(event)
    except Exception as exc:
        return await _settle(deps, row, "failed", reason=_why(exc))
    earlier = await deps.store.read(event_ops.started_by_key, did, trigger.workflow_name, key)
    if earlier is not None:
        return await _settle(deps, row, "skipped", reason="duplicate", idempotency_key=key)
    defn = deps.app.get(trigger.workflow_name)
    # The start's identity is the delivery's own (event and trigger), unless the workflow derives its own or
    # batches items: a sweep that died between start and settle finds the same run again. A custom key
    # deduplicates through the delivery rows alone, for as long as they are kept (delivery_retention).
    own = defn.idempotency_key is not None or defn.gate.item_model is not None
    gate_key = None if own else f"{event.id}:{trigger.name}"
    try:
        with starting_from(
            f"event:{event.name}", event.trace_id, None if event.subject is None else event.subject.to_json()
        ):
            handle = await deps.start(defn.name, payload, idempotency_key=gate_key)
    except StoreError:
        raise  # the store, not the delivery: it stays pending for the next tick
    except LockgateError as exc:  # refused payload, a raising key callback, ...: this delivery only
        return await _settle(deps, row, "failed", reason=_why(exc), idempotency_key=key)
    status, reason = (
        ("started", None)
        if handle.status in ("started", "existing", "queued")
        else ("skipped", f"gate:{handle.status}")
    )
    return await _settle(
        deps,
        row,
        status,
        reason=reason,
        idempotency_key=key,
        outcome=handle.status,
        run_id=handle.run_id,
        ticket=handle.ticket,
    )


def _key(trigger: TriggerDef, event: Event) -> str:
    if trigger.idempotency_key is None:
        return f"{event.id}:{trigger.name}"
    key = trigger.idempotency_key(event)
    if not isinstance(key, str) or not key:
        raise ValueError(f"idempotency_key returned {key!r}, not a non-empty string")
    return key


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _settle(deps: FanOut, row: dict[str, Any], status: str, **columns: Any) -> str:
    delivery_id, at = row["id"], float(row["created_at"])
    settled = await deps.store.write(
        event_ops.settle_delivery, delivery_id, deps.clock.now(), created_at=at, status=status, **columns
    )
    if not settled and columns.get("ticket") is not None:
        # Settled by another pass, or its start is not in the database: a failover lost that start's commit
        # and this write reached the promoted server. Still pending then, it is delivered again.
        log.info(
            "event delivery %s: not settled (settled elsewhere, or its start %s was lost)",
            delivery_id,
            columns["ticket"],
        )
    return status


class PokedSweep(Sweep):
    """A sweep that also ticks as soon as ``poke()`` is called (a publish in this process)."""

    def __init__(self, name: str, interval: float, tick: Callable[[WorkerRuntime], Awaitable[Any]]) -> None:
        super().__init__(name, interval, tick)
        self._poked = asyncio.Event()

    def poke(self) -> None:
        self._poked.set()

    async def loop(self, worker: WorkerRuntime) -> None:
        while True:
            # Never asyncio.wait_for here: on Python 3.11 a shutdown's cancel that meets the timeout comes out of
            # it as a TimeoutError, this loop went on, and the engine's close waited for it for good.
            try:
                async with asyncio.timeout(self.interval):
                    await self._poked.wait()
            except TimeoutError:
                pass
            self._poked.clear()
            await self.run_once(worker)


def fanout_sweep(worker: WorkerRuntime, settings: SweepSettings) -> PokedSweep | None:
    """The fan-out sweep, ticking every poll interval (and on a local publish); none without triggers."""
    rt = worker.runtime
    if not rt.app.triggers:
        return None
    interval = max(rt.poll_interval, 0.01)
    deps = FanOut(rt.store, rt.clock, rt.app, gate_start(rt), budget=interval, keyring=rt.keyring)

    async def tick(_: WorkerRuntime) -> Delivered:
        return await fan_out(deps)

    sweep = PokedSweep("events", interval, tick)
    rt.published.listen(sweep.poke)
    return sweep
