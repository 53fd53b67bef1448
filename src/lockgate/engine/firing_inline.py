"""Starting a firing's run in the transaction that claims it, when its workflow has no gate control.

A claimed firing otherwise takes three commits to start, one after the other: its claim, the
gate's admission of its run, and the move recording what the gate answered. A workflow whose
plan is bare (nothing for the gate to decide; ``admit`` writes such a start as its run and its
ledger row) needs no answer from the gate, so the claim's own transaction inserts the run and
its ledger row (``admission.admit_bare_runs``) and moves the firing to ``started``: one commit
for a batch of slots, whether the sweep claimed them (``firing_many``) or a run's end took a
buffered one (``firing.start_buffered``).

Anything else starts after the claim's commit, as before (``firing.start_claimed_many``): a
workflow with controls or paused, one this process does not know, a payload the model refuses
(its start fails there and is recorded), a ``cancel_other`` slot that first cancels the run
before it.

A slot still starts one run: its run's identity is the slot's key, as for any start of it, and
the claim and the start commit together, so no claim is left for ``settle`` to take over when
the process dies between them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..definitions import WorkflowDef
from ..gate.admission import admit_bare_runs, bare_run, prepare
from ..origin import starting_from
from ..schedule import ScheduleDef
from ..store.base import Row, Tx
from .firing import Fired, ScheduleRuntime, source_of

__all__ = ["Inline", "bare_workflows", "start_inline"]


async def bare_workflows(rt: ScheduleRuntime, workflows: Iterable[str] | None = None) -> frozenset[str]:
    """Of ``workflows`` (default: the app's), those whose firings start in their claim's transaction: known
    here, with a bare plan, not paused (as ``admit`` asks, from the pauses read at most a second ago)."""
    known = rt.runtime.app.definitions()
    out: set[str] = set()
    for name in set(known if workflows is None else workflows):
        defn = known.get(name)  # None: not this process's; started after the commit, where it fails, recorded
        if defn is not None and defn.gate.bare and not await rt.runtime.pauses.paused(defn.name):
            out.add(name)
    return frozenset(out)


@dataclass
class Inline:
    """The starts one claim transaction made: what each firing became, and the runs to tell the process of."""

    fired: dict[int, Fired] = field(default_factory=dict)
    """By firing id."""
    created: list[Row] = field(default_factory=list)
    """The new runs (not those an identity already named)."""
    now: float = 0.0

    def told(self, rt: ScheduleRuntime) -> None:
        """After the commit: the process learns of the new runs, as after ``admit``'s bare start."""
        for row in self.created:
            rt.runtime.created_here(row, self.now)
        if self.created:
            rt.runtime.wake(self.now)


async def start_inline(
    tx: Tx, rt: ScheduleRuntime, items: Sequence[tuple[ScheduleDef, Row]], bare: frozenset[str], now: float
) -> tuple[Inline, list[dict[str, Any]]]:
    """Insert in ``tx`` the runs of those claimed firings of ``items`` (each ``(schedule, firing row)``) whose
    workflow is in ``bare``; what they became, and the moves to ``started`` the caller writes in ``tx``
    (with its own). The rest are left to ``start_claimed_many``."""
    done = Inline(now=now)
    runs: list[tuple[dict[str, Any], float]] = []
    rows: list[tuple[ScheduleDef, Row]] = []
    for sched, row in items:
        if sched.workflow not in bare:
            continue
        try:
            # In a context of its own: the transaction may run in a task of the store's (a group commit's),
            # whose context is no concern of this start's.
            defn, run = contextvars.Context().run(_prepare, rt, sched, row)
        except Exception:  # refused: started after the commit, where the refusal is recorded
            continue
        runs.append((bare_run(defn.gate, run, now), now))
        rows.append((sched, row))
    if not runs:
        return done, []
    created = await admit_bare_runs(tx, runs)
    moves: list[dict[str, Any]] = []
    for (sched, row), (run, _), (made, fresh) in zip(rows, runs, created, strict=True):
        fid, slot = int(row["id"]), float(row["scheduled_at"])
        moves.append(
            {
                "firing_id": fid,
                "expect": "claimed",
                "status": "started",
                "run_id": made["id"],
                "ticket": run["ticket"],
                "start_status": "started" if fresh else "existing",
                "started_at": now,
            }
        )
        done.fired[fid] = Fired(sched.name, slot, "started", run_id=made["id"], ticket=run["ticket"], firing_id=fid)
        if fresh:
            done.created.append(made)
    return done, moves


def _prepare(rt: ScheduleRuntime, sched: ScheduleDef, row: Row) -> tuple[WorkflowDef, dict[str, Any]]:
    """The checked start of the claimed firing ``row``: its workflow's definition and its new run row."""
    payload = sched.payload_for(float(row["scheduled_at"]))
    with starting_from(row["source"] or source_of(sched.name)):  # the run records schedule:<name>
        defn, _, _, run = prepare(
            rt.runtime, sched.workflow, payload, at=None, wait=False, idempotency_key=row["idempotency_key"]
        )
    return defn, run
