"""Cancel-on: events past the durable watermark cancel the live runs and parked starts they correlate with.

Each event is decoded against its declaration before any ``match`` sees it; one that does
not decode is marked with its problem and never matched. Only runs (and parked starts)
that arrived no later than the event — and, with ``within``, not longer before it — are
candidates, so a sweep catching up after downtime never cancels work started since.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..app import App
from ..clock import Clock
from ..crypto import Keyring, Undecryptable
from ..definitions import WorkflowDef
from ..events import CancelOn, Event, decode_event, payload_for_match
from ..gate.runtime import WorkerRuntime
from ..matching import event_matches
from ..store import Store
from ..store import events as event_ops
from ..store.base import Row
from .base import Sweep, SweepSettings
from .events import PokedSweep

__all__ = ["CancelOnPass", "CancelOnSweep", "cancel_on_sweep", "sweep_cancel_on"]

log = logging.getLogger("lockgate.sweeps")

BATCH = 200
TARGETS = 1000  # candidates read per (event, workflow): more are found by the next event's pass, not this one's


@dataclass(frozen=True)
class CancelOnSweep:
    """What the cancel-on pass needs: store, clock, the app's declarations, and who to tell of stopped runs."""

    store: Store
    clock: Clock
    app: App
    stopped: Callable[[list[str], str], None]  # runs ended here: stop local executions, wake waiters
    batch: int = BATCH
    keyring: Keyring | None = None  # opens what an encrypted run published


@dataclass
class CancelOnPass:
    """What one pass did."""

    events: int = 0
    runs: list[str] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # event id -> why it could not be read


def consumers(defs: dict[str, WorkflowDef]) -> dict[str, list[tuple[WorkflowDef, CancelOn]]]:
    """Each event name's ``cancel_on`` entries, with the workflow declaring them."""
    found: dict[str, list[tuple[WorkflowDef, CancelOn]]] = {}
    for defn in defs.values():
        for entry in defn.cancel_on:
            found.setdefault(entry.event.name, []).append((defn, entry))
    return found


async def sweep_cancel_on(deps: CancelOnSweep) -> CancelOnPass:
    """Read up to ``deps.batch`` events past the watermark and apply every ``cancel_on`` they correlate with."""
    by_event = consumers(deps.app.definitions())
    done = CancelOnPass()
    for row in await deps.store.read(event_ops.unswept_events, deps.batch):
        done.events += 1
        entries = by_event.get(row["name"], [])
        problem = None
        if entries:
            occurred = datetime.fromtimestamp(float(row["occurred_at"]), UTC)
            try:
                event = decode_event(deps.app.events.get(row["name"]), row, occurred, deps.keyring)
            except ValueError as exc:
                problem = str(exc)
                done.problems[row["id"]] = problem
                log.warning("cancel-on: %s; no run is cancelled for it", problem)
            else:
                for defn, entry in entries:
                    await _apply(deps, defn, entry, event, float(row["occurred_at"]), done)
        await deps.store.write(event_ops.mark_swept, row["id"], float(row["occurred_at"]), deps.clock.now(), problem)
    return done


async def _apply(
    deps: CancelOnSweep, defn: WorkflowDef, entry: CancelOn, event: Event, at: float, done: CancelOnPass
) -> None:
    within = entry.within_seconds
    after = None if within is None else at - within
    runs, parked = await deps.store.read(event_ops.cancel_on_targets, defn.name, at, after, TARGETS)
    reason = entry.reason_text
    # Parked starts first: a cancelled run frees its slot, and the drainer would admit the next one.
    for start in parked:
        if not any(_matches(defn, entry, event, p, deps.keyring) for p in _parked_payloads(start)):
            continue
        if await deps.store.write(event_ops.cancel_parked_for_event, start["id"], reason, deps.clock.now()):
            done.starts.append(start["ticket"])
    for run in runs:
        if not _matches(defn, entry, event, run["payload"], deps.keyring):
            continue
        now = deps.clock.now()
        stopped = await deps.store.write(event_ops.cancel_run_for_event, run["id"], event.id, reason, now)
        if stopped:
            done.runs.append(run["id"])
            deps.stopped(stopped, reason)


def _parked_payloads(row: Row) -> list[str]:
    """The payloads a parked start holds: its items (a batch), else its payload."""
    if row["items"]:
        return [str(i) for i in json.loads(row["items"])]
    return [str(row["payload"])]


def _matches(defn: WorkflowDef, entry: CancelOn, event: Event, payload_json: str, keyring: Keyring | None) -> bool:
    try:
        payload = payload_for_match(defn, payload_json, keyring)
    except Undecryptable:
        log.warning("cancel_on of %s: no key opens a payload; event %s not matched to it", defn.name, event.id)
        return False
    return event_matches(entry.match, event, payload)  # the one rule ctx.wait_for_event matches by too


def cancel_on_sweep(worker: WorkerRuntime, settings: SweepSettings) -> Sweep | None:
    """The cancel-on sweep, ticking every poll interval; none when no workflow declares ``cancel_on``."""
    rt = worker.runtime
    if not consumers(rt.app.definitions()):
        return None
    deps = CancelOnSweep(rt.store, rt.clock, rt.app, rt.stopped, keyring=rt.keyring)

    async def tick(_: WorkerRuntime) -> CancelOnPass:
        return await sweep_cancel_on(deps)

    sweep = PokedSweep("cancel-on", max(rt.poll_interval, 0.01), tick)
    rt.published.listen(sweep.poke)
    return sweep
