"""A freed concurrency slot passes straight to the next start in line, in the transaction that frees it.

A run of a workflow whose one control is a per-key concurrency limit ends; its slot is
freed and the starts waiting for that key are admitted into the room it left (as the
drainer would admit them: in priority, then arrival, order, each with its ``drain``
ledger row). The worker that ended the run claims the first of them in the same
statement, into the place the ended run leaves (unless it is stopping), and executes it
as soon as the commit returns, while it holds no more than its share of the key's slots
(the limit over the live workers), so a key's work spreads over the replicas. Past its
share it leaves the run to whichever worker claims first, but only where the others hear
of it at once (PostgreSQL's notifications): on a store without wake-ups between
processes they would find it at their next poll, and it claims anyway. Any further room
is left for whichever worker claims first. No drainer pass, no separate claim: one
commit per turn of a slot. Runs of one key ending in one group commit pass their slots
on together.

Where other processes decide beside this one (PostgreSQL), a slot passes without the key's
lock: each slot the commit frees goes to one start in line (``handoff_transfer``: rows another
decider has locked are skipped, not waited for), never more, and only when the run's end did
free a slot of its own. A transfer so never adds to the key's slots in use, and whatever
takes a slot under the key's lock (an arrival, the drainer) counts room from slots that no
transfer can grow: the limit holds without the lock, and ends on different processes no
longer queue on one another's commits. Room beyond the slots freed, left beside starts
still waiting, is the drainer's to fill: the end wakes it.

Whatever this path cannot decide as the drainer would (a row with an idempotency key or
items, a row past its start timeout, a key pause, a pool shared with other workflows)
stops it; it then says so and the drainer decides, as it does for every other workflow.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..definitions import WorkflowDef
from ..origin import origin_columns
from ..plan import GatePlan
from ..store import gate, journal, runs, shared
from ..store.base import Row, Tx
from ..store.coalesce import Args, with_many
from .keys import parked_flow_control
from .pipeline import admitted, key_pause_scopes, plain_row
from .rules import concurrency_ceiling

__all__ = ["Early", "HandOff", "Passed", "finish_passing", "hand_off_for"]


@dataclass(frozen=True)
class HandOff:
    """Where a run's slot goes when it ends: its key, the key's limit, and who claims the next run."""

    scope: str
    key: str
    limit: int  # the key's ceiling (``rules.concurrency_ceiling``): its room is that less its slots in use
    plan: GatePlan
    template: dict[str, Any]  # the row a run of the workflow starts from (``Client.new_run_row``)
    owner: str  # the worker ending the run
    lease: float
    held: int = 0  # the owner's other runs of this key in execution: it claims while that is below its share
    room: int = 1  # runs the owner can take on as this one ends (its own place included): none, it claims none
    spread: bool = True  # others hear at once of a run left to them: past its share, the owner leaves it
    early: Early | None = None  # how the owner executes its claim as the claim's COMMIT goes out, where it can


@dataclass(frozen=True)
class Early:
    """How a worker executes the run claimed for it before its claim's commit returns (``Tx.when_committing``).

    The run's body may start once its claim is on its way: the run that ended has stopped, so
    the key holds no more bodies than slots, and every write of the claimed run is queued behind
    the claim's commit. Should that commit fail, ``undo`` stops the body before anything else
    is decided about the slot.
    """

    launch: Callable[[Row], None]
    undo: Callable[[Row], None]


@dataclass
class Passed:
    """What ending a run with ``finish_passing`` did beyond ending it."""

    stopped: list[str]  # children closed with the run (``finish_run``'s result)
    claimed: Row | None = None  # a run admitted into the key's room, claimed for the caller
    unclaimed: int = 0  # runs admitted into the key's room besides those claimed: any worker's to claim
    settled: bool = False  # nothing is left for the drainer to decide on this key


def hand_off_for(
    defn: WorkflowDef, row: Row, status: str, pauses: dict[str, Row], now: float
) -> tuple[str, str, int] | None:
    """``(scope, key, limit)`` when ending ``row`` with ``status`` may pass its slot on here, else ``None``.

    So: the run ends for good (``succeeded``, or ``failed`` without a failure handler) and
    asks nothing else of its end (no parent); its workflow's one control is a per-key
    concurrency limit (``GatePlan.slot_only``, and no pool or ``fair_by``); and no pause
    holds its key.
    """
    if status not in ("succeeded", "failed") or (status == "failed" and row.get("on_failure")):
        return None
    plan = defn.gate
    c = plan.concurrency
    if (
        c is None
        or not plan.slot_only
        or c.pool  # a pool's queue holds other workflows' starts: the drainer admits those
        or plan.fair_by is not None
        or row.get("slot_scope") != plan.concurrency_scope
        or row.get("parent_id") is not None
    ):
        return None
    key = row.get("slot_key") or ""
    if gate.pause_in(pauses, key_pause_scopes(plan, {"concurrency": key}), now) is not None:
        return None
    return plan.concurrency_scope, key, concurrency_ceiling(c)  # the room left is counted by ``handoff_rows``


async def finish_passing(
    tx: Tx,
    fence: shared.Fence,
    now: float,
    handoff: HandOff,
    *,
    status: str,
    output: str | None = None,
    error_tag: str | None = None,
    error_message: str | None = None,
    event: dict[str, Any] | None = None,
    entries: Sequence[journal.Entry] = (),
) -> Passed:
    """End a held run (``succeeded`` or ``failed``) and pass its slot to the starts next in line.

    ``entries``: journal entries held back for this write, written first.
    """
    end = {
        "status": status,
        "output": output,
        "error_tag": error_tag,
        "error_message": error_message,
        "event": event,
        "entries": entries,
    }
    return (await _finish_passing_many(tx, [((fence, now, handoff), end)]))[0]


async def _finish_passing_many(tx: Tx, calls: Sequence[Args]) -> list[Passed]:
    """``finish_passing`` for many runs at once: the slots of one key pass on with one read and one admission.

    Ended one after the other, each run would admit the start next in line into the room
    it left; ended together, their key's room is read once all their slots are free and
    the same starts are admitted, in the same order, the first of them claimed one per
    run ended (in the order the runs ended).
    """
    out: list[Passed] = []
    freed: dict[gate.Slot, list[tuple[Passed, HandOff, float]]] = {}
    events: list[dict[str, Any]] = []
    ended: list[str] = []
    await journal.record_held(tx, [(fence, given.get("entries", ())) for (fence, _, _), given in calls])
    for (fence, now, handoff), given in calls:
        assert given["status"] in ("succeeded", "failed")
        # a run that asks more of its end after all (a child opened) ends the full way, its slot freed there
        stopped, plainly = await runs.finish_collecting(
            tx, fence, now, events, slotted=True, **runs.without_entries(given)
        )
        passed = Passed(stopped)
        out.append(passed)
        if plainly:
            ended.append(fence.run_id)
            freed.setdefault((handoff.scope, handoff.key), []).append((passed, handoff, now))
    await tx.execute_values("insert_event", events)
    # Each freed slot is offered to its key's line below: no other process's drainer has anything to do for
    # it, unless that line is left undecided (``_pass_on`` then wakes the drainers itself).
    await gate.quiet_slot_frees(tx, True)
    held = await gate.free_passed_slots(tx, ended)
    await gate.quiet_slot_frees(tx, False)
    for slot in sorted(freed):  # keys locked in one order: no two processes wait on each other
        await _pass_on(tx, slot, freed[slot], transfer=held and not tx.single_writer)
    return out


async def _pass_on(tx: Tx, slot: gate.Slot, ended: list[tuple[Passed, HandOff, float]], *, transfer: bool) -> None:
    """Admit the starts next in line for ``slot`` into its room; claim one for each run in ``ended``.

    ``transfer``: each freed slot passes to one start, without the key's lock (see the module's docstring).
    """
    handoff, now = ended[-1][1], max(at for _, _, at in ended)
    params = {"scope": slot[0], "key": slot[1], "limit": handoff.limit, "now": now, "lease": handoff.lease}
    line: Row | None = None
    if transfer:
        params["freed"] = len(ended)
        rows, lines = await tx.execute_all([("handoff_transfer", params), ("handoff_line", params)])
        line = lines[0]
    else:
        await gate.lock_key(tx, *slot)
        rows = await tx.execute("handoff_rows", params)
    ready = []
    for row in rows:
        if not _admissible(row, now):
            break
        ready.append(row)
    settled = len(ready) == len(rows)
    if line is not None and int(line["room"]) > len(ready) and int(line["waiting"]) > len(ready):
        settled = False  # room left beside starts still waiting (skipped, or past the slots passed): the drainer's
    for passed, _, _ in ended:
        passed.settled = settled
    if not settled:
        await gate.wake_drainers(tx)
    if not ready:
        return
    columns = gate.run_columns(admitted(handoff.plan, handoff.template, now))
    lease_until = now + handoff.lease
    # A worker claims while it executes fewer of the key's runs than its share (the limit over the live
    # workers): past that, runs are left to whichever worker claims first, so a key's work spreads. Where
    # the others would only find the run at their next poll, it is executed here at once all the same.
    share = -(-handoff.limit // max(1, int(rows[0]["live"])))
    claimers = _claimers(ended, share)
    claims = min(len(ready), len(claimers))
    owner = claimers[0][1].owner if claimers else None
    run_ids = await gate.admit_parked(
        tx,
        [(row, columns, slot) for row in ready],
        now,
        claim=None if owner is None else (owner, lease_until, claims),
        locked=True,
    )
    for (passed, claimer), row, run_id in zip(claimers[:claims], ready, run_ids, strict=False):
        claimed = {
            **columns,
            "id": run_id,
            "payload": row["payload"],
            "idempotency_key": row["idempotency_key"],
            "retry_of": row["retry_of"],
            **origin_columns(row),  # where the start came from (origin.py)
            "ticket": row["ticket"],
            "slot_scope": slot[0],
            "slot_key": slot[1],
            "flow_control": parked_flow_control(row),
        }
        passed.claimed = runs.claimed_row(claimed, claimer.owner, lease_until, now)
        if (early := claimer.early) is not None:  # the claimer starts it as the COMMIT goes out
            mine = passed.claimed
            tx.when_committing(functools.partial(early.launch, mine), functools.partial(early.undo, mine))
    ended[0][0].unclaimed = len(run_ids) - claims


with_many(finish_passing, _finish_passing_many, gather=True)


def _claimers(ended: list[tuple[Passed, HandOff, float]], share: int) -> list[tuple[Passed, HandOff]]:
    """The ended runs whose owner claims a run in their place, in order, with their hand-offs: each while its
    owner stays within its share of the key (or where the others would not hear of a run left to them).

    What an owner holds is counted as the commit leaves it: its runs of the key ending here do not count
    (``HandOff.held`` counted them, as they still ran), the runs it claimed here before do. A worker whose
    runs all end together so keeps its share, and leaves only the rest to the others, instead of leaving
    every one of them to whichever worker claims first (which would then hold them all).
    """
    ending = Counter(h.owner for _, h, _ in ended)
    granted: Counter[str] = Counter()
    out = []
    for passed, h, _ in ended:
        holds = h.held - (ending[h.owner] - 1) + granted[h.owner]
        if h.room > 0 and (holds < share or not h.spread):
            out.append((passed, h))
            granted[h.owner] += 1
    return out


def _admissible(row: Row, now: float) -> bool:
    """Whether the drainer would admit the waiting ``row`` as it stands, given room (``drainer._slot_only``)."""
    expires = row["expires_at"]
    return plain_row(row) and row["due_at"] is None and (expires is None or float(expires) > now)
