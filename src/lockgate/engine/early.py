"""Runs a worker executes as their claims' commits go out, before the commits return.

A run that ends passing its concurrency slot on claims the next start in line for its worker
in the same transaction (``gate/handoff.py``). Waiting for that commit's answer before the
claimed run's body starts leaves the slot idle for the commit's last round trip, on every turn
of every slot. The body may start sooner without breaking the limit: the run that freed the
slot has stopped, so the key has no more bodies than slots, and every write of the claimed run
is queued behind the claim's commit, so nothing of it is kept unless the claim is. Should the
commit fail (or its outcome be unknowable), the execution is stopped before the writer tries
again or gives up, and the claim's own answer then decides as it always did.

The dispatcher's own claims go the same way on PostgreSQL (``claim_starting``): a run a worker
claims because it became due (a start from another process) begins as the
claim's COMMIT goes out, not a round trip and a flush later. Nothing of it is kept unless the
claim is, for the same reason. Only a run at its first entry starts so: one resuming reads its
journal from a reader, which sees only what has committed, and the claim's transaction may hold
what it must see (a redrive in the same group commit reopened its failed step). SQLite would send
such a COMMIT from a thread (``store/sqlite.py``), a hop that costs a lone claim about what the
sync it overlaps saves: its claims start on the answer.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence

from ..app import App
from ..crypto import Keyring
from ..store.base import Row, Tx
from ..store.coalesce import volatile
from .publish_claims import Handed, claim_handing

__all__ = ["UNDONE", "EarlyClaims", "claim_starting"]

UNDONE = "claim not committed"
"""Why an execution begun as its claim's commit went out was stopped: the commit did not happen."""


class EarlyClaims:
    """The executions begun before their claims' commits returned, until those commits answer."""

    def __init__(
        self,
        launch: Callable[[Row], asyncio.Task[None] | None],
        stop: Callable[[str, asyncio.Task[None] | None], None],
    ) -> None:
        self._launch = launch  # begins executing a claimed row; its task, or None if it was not begun
        self._stop = stop  # stops the execution of a run here (its task, if known) whose claim did not commit
        self._begun: dict[str, asyncio.Task[None]] = {}
        self._undone: dict[str, asyncio.Task[None]] = {}  # stopped, not finished yet

    def launch(self, row: Row) -> None:
        """The claim of ``row`` is on its way: begin executing it."""
        task = self._launch(row)
        if task is not None:
            self._begun[row["id"]] = task

    def undo(self, row: Row) -> None:
        """The claim of ``row`` did not commit: stop its execution."""
        run_id = row["id"]
        task = self._begun.pop(run_id, None)
        if task is None or task.done():
            return
        self._undone[run_id] = task
        task.add_done_callback(lambda _: self._forget(run_id, task))
        self._stop(run_id, task)

    def stop(self, run_ids: Sequence[str]) -> None:
        """Stop the executions here of ``run_ids``: a step of each began on a slot handed to it in a transaction
        that did not commit (``engine/stepflow.py``). Nothing more of them is written; their runs, no longer
        executed here, are released at the next heartbeat and resumed from their journals."""
        for run_id in run_ids:
            self._stop(run_id, None)

    def claimed(self, row: Row, launch: Callable[[Row], object]) -> None:
        """The claim of ``row`` committed: ``launch`` it unless its execution began already.

        An execution of the same run stopped by an earlier attempt's failure is let finish first.
        """
        if self._begun.pop(row["id"], None) is not None:
            return
        stopping = self._undone.get(row["id"])
        if stopping is None:
            launch(row)
        else:
            stopping.add_done_callback(lambda _: launch(row))

    def _forget(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self._undone.get(run_id) is task:
            del self._undone[run_id]


@volatile  # a claim the machine loses is a run claimable again (store/coalesce.py)
async def claim_starting(
    tx: Tx,
    early: EarlyClaims,
    app: App,
    keyring: Keyring | None,
    owner: str,
    now: float,
    lease_until: float,
    limit: int,
    *filters: str,
) -> tuple[list[Handed], float | None]:
    """``claim_handing``, the runs claimed at their first entry beginning as the claim's COMMIT goes out
    where the store tells when that is; the others (resuming, or handed their journal by an event
    waiter's look made here) are launched by the caller once the claim returns, as is every run where
    the store cannot tell (``EarlyClaims.claimed``)."""
    claimed, due = await claim_handing(tx, app, keyring, owner, now, lease_until, limit, *filters)
    if tx.single_writer:  # SQLite would send the COMMIT from a thread for it: a hop that costs what it saves
        return claimed, due
    for row, journal in claimed:
        if journal is None and int(row["entries"]) <= 1:  # nothing to read back: it starts from its row
            tx.when_committing(functools.partial(early.launch, row), functools.partial(early.undo, row))
    return claimed, due
