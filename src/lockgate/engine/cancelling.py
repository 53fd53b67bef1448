"""A compensating cancel as an execution sees it (``Client.cancel(run_id, compensate=True)``).

The request is the run's ``$cancel`` journal entry (``runs.request_cancel``), read as the run
is entered, or told to an execution of the run in this process (``Execution.stop``). From
then on, the body's next operation that the journal has no record of raises
``CancelRequested`` instead of acting: what the body completed stays done, its open
``ctx.compensations()`` blocks undo it (their compensations run past the request), and the
run ends ``cancelled``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..compensation import CancelRequested, cancel_stop_reason, requested_cancel
from ..errors import CompensationFailed
from ..gate.runtime import Runtime
from ..store import journal as store_journal
from ..store import runs
from ..store.base import Row

__all__ = ["CancelState", "request_cancel"]


async def request_cancel(rt: Runtime, run_id: str, reason: str | None, now: float) -> None:
    """``Client.cancel(run_id, compensate=True)``: the request journaled, the run woken or its execution here told.

    A run held elsewhere sees the request when it parks; one that ends first ends as it would.
    """
    stopped, held = await rt.store.write(runs.request_cancel, run_id, reason, now)
    if stopped:  # never entered: nothing to undo, cancelled at once
        rt.stopped(stopped, "cancelled")
    elif held:  # perhaps executed in this process: told at once
        rt.stopped([run_id], cancel_stop_reason(reason or "cancelled"))
    rt.wake(now)


class CancelState:
    """Whether a compensating cancel was requested of an execution's run, and whether compensations run now."""

    __slots__ = ("depth", "reason")

    def __init__(self, reason: str | None) -> None:
        self.reason = reason
        self.depth = 0  # compensations running (nested blocks): they go on after the request

    @classmethod
    def of(cls, journal: list[Row]) -> tuple[list[Row], CancelState]:
        """The journal without its request, and the state it says."""
        journal, reason = store_journal.cancel_request(journal)
        return journal, cls(reason)

    def told(self, stop_reason: str) -> bool:
        """Whether ``Execution.stop``'s reason is a compensating cancel (the body goes on to its next operation)."""
        reason = requested_cancel(stop_reason)
        if reason is None:
            return False
        self.reason = reason
        return True

    def check(self, recorded: bool = False) -> None:
        """Before a durable operation (``recorded``: its journal entry exists): stop here if cancelled."""
        if self.reason is not None and not recorded and not self.depth:
            raise CancelRequested(self.reason)

    def ends_cancelled(self, error: BaseException | None) -> bool:
        """Whether the body's end (``error`` it raised, ``None``: it returned) ends the run cancelled."""
        return self.reason is not None and not isinstance(error, CompensationFailed)

    def ending(self) -> dict[str, Any]:
        """The run's end for a compensating cancel: as ``Client.cancel`` writes one."""
        return {"tag": "Cancelled", "message": self.reason, "event": {"reason": self.reason, "compensated": True}}

    def entry(self, entry: Row) -> Row:
        """A step's journal entry, as a compensation's while compensations run (a resume re-runs those that failed)."""
        return {**entry, "kind": "compensation"} if self.depth else entry

    @contextlib.contextmanager
    def undoing(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
