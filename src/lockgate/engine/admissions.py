"""Waiting for a parked start to become a run: its ticket, read back from the ledger in bulk.

A start the gate parked (``status="queued"``) has no run yet. ``Client.admitted_run(ticket)``
waits until the gate decides it for good: admitted, or joined to a run (a spent idempotency
key, a singleton's incumbent), giving that run's id; or ended without a run (expired past its
start timeout, cancelled, dropped by a rate limit when re-offered), raising
``StartNotAdmitted``. Waiting tickets are read with the same two queries per poll, at most
``PER_POLL`` of them: the longest waiting (a line admits its oldest first), and a turn of the
others, so that each is read within a few polls however many wait. Reading every waiting
ticket at every poll cost a process awaiting thousands of parked starts most of a core while
they drained (a poll comes every 10 ms while starts are being decided). The poll comes at once
when this process admitted parked starts or heard that another did (``poke``), and backs off
to the client's ``poll_interval`` while nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..clock import stop_tasks
from ..errors import EngineClosed, LockgateError, ResultTimeout, StartNotAdmitted
from ..gate.ledger import Admission, admissions
from ..store import Store

__all__ = ["Admissions"]

log = logging.getLogger("lockgate.engine")

FIRST_POLL = 0.01
"""Seconds before the first read after a wait begins or something was settled; doubled while nothing is."""

PER_POLL = 256
"""The most tickets one poll reads: half the longest waiting, half a turn of the others."""


class Admissions:
    """The parked starts this process waits for, by ticket, and the one task that polls for them."""

    def __init__(self, store: Store, max_delay: Callable[[], float]) -> None:
        self._store = store
        self._max_delay = max_delay  # the client's poll_interval
        self._waiters: dict[str, list[asyncio.Future[str]]] = {}
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._turn = 0  # where the next poll's turn of the younger tickets begins

    async def wait(self, ticket: str, timeout: float | None) -> str:
        """The id of the run the parked start ``ticket`` became (or joined)."""
        if self._closed:
            raise _closed(ticket)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(ticket, []).append(future)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="lockgate-admissions")
        self.poke()
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            raise ResultTimeout(f"start {ticket} was not admitted within {timeout}s") from None
        finally:
            waiting = self._waiters.get(ticket)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting:
                    del self._waiters[ticket]

    def poke(self) -> None:
        """Parked starts may have been decided: read the waiting tickets again now."""
        if self._waiters:
            self._poked.set()

    def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        """Stop polling; every caller still waiting gets ``EngineClosed`` (the parked starts stay parked)."""
        self._closed = True
        if self._task is not None:
            await stop_tasks([self._task])
            self._task = None
        waiting, self._waiters = self._waiters, {}
        for ticket, futures in waiting.items():
            for future in futures:
                if not future.done():
                    future.set_exception(_closed(ticket))

    async def _poll(self) -> None:
        delay = FIRST_POLL
        while self._waiters:
            self._poked.clear()
            try:
                settled = await self._store.read(admissions, self._to_read())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage: the waiters keep their own deadlines
                log.debug("reading parked starts' outcomes failed: %s", exc)
                settled = {}
            for ticket, admission in settled.items():
                for future in self._waiters.pop(ticket, []):
                    if not future.done():
                        _settle(future, ticket, admission)
            delay = FIRST_POLL if settled else min(delay * 2, max(self._max_delay(), FIRST_POLL))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._poked.wait()

    def _to_read(self) -> list[str]:
        """The tickets this poll reads: all, or the longest waiting and the next turn of the rest."""
        if len(self._waiters) <= PER_POLL:
            return list(self._waiters)
        waiting = list(self._waiters)  # in the order the waits began
        half = PER_POLL // 2
        oldest, rest = waiting[:half], waiting[half:]
        begin = self._turn % len(rest)
        turn = rest[begin : begin + half]
        turn += rest[: half - len(turn)]  # the turn wraps round to the youngest's elders
        self._turn = begin + half
        return oldest + turn


def _closed(ticket: str) -> EngineClosed:
    return EngineClosed(f"closed: no waiting for start {ticket} here; it stays parked at the gate until admitted")


def _settle(future: asyncio.Future[str], ticket: str, admission: Admission) -> None:
    if admission.run_id is not None:
        future.set_result(admission.run_id)
    elif admission.outcome is None:
        future.set_exception(LockgateError(f"no arrival with ticket {ticket!r}"))
    else:
        future.set_exception(StartNotAdmitted(ticket, admission.outcome, admission.reason))
