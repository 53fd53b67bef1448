"""A start decided inside the caller's own transaction (``start(..., conn=)``).

The same checks (``admission.prepare``) and the same decision (``admission.admit_bare``
for a start with no control, else the stages' ``offer``) as any start, run on the
caller's connection through ``Store.join`` instead of the store's group commit: the run,
its ledger row, a parked row and the keys' locks belong to the caller's transaction.
Nothing is told to this process's workers before the COMMIT: the database's own wake-ups
(PostgreSQL) fire then, and the handle learns the outcome when it is awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from ..definitions import WorkflowDef
from ..errors import ResultTimeout, StartRolledBack
from ..handles import RunHandle
from ..store.base import Joined
from ..streams import StreamChunk
from .admission import admit_bare, bare_run, handle_for, offer_of, prepare
from .pipeline import Decision, offer
from .runtime import Runtime

__all__ = ["InTransaction", "admit_within"]


async def admit_within(
    rt: Runtime,
    conn: Any,
    workflow: str | Callable[..., Any],
    payload: Any,
    *,
    at: datetime | None,
    idempotency_key: str | None,
) -> RunHandle:
    """Decide one start in the caller's open transaction on ``conn``; its handle is valid at once.

    Refusals (payload, definition, a connection elsewhere) come before anything is written.
    """
    defn, model, key, run = prepare(rt, workflow, payload, at=at, wait=False, idempotency_key=idempotency_key)
    plan = defn.gate
    bare = plan.bare and at is None and not await rt.pauses.paused(defn.name)
    o = None if bare else await offer_of(rt, defn, model, key, run, at)
    async with rt.store.join(conn) as joined:
        now = rt.clock.now()
        if o is None:
            created, fresh = await admit_bare(joined.tx, bare_run(plan, run, now), now)
            status = "started" if fresh else "existing"
            decision = Decision(status=status, ticket=run["ticket"], run_id=created["id"])
        else:
            decision = await offer(joined.tx, o, now)
    return handle_for(InTransaction(rt, joined, defn, decision), defn.name, decision)


class InTransaction:
    """What a handle made in the caller's transaction waits with: first for that transaction's end.

    After its COMMIT the wait goes on as for any start (and this process reacts to the
    decision as it would have at once: its workers, an evicted singleton); after its
    rollback ``StartRolledBack``. A timeout covers both waits.
    """

    def __init__(self, rt: Runtime, joined: Joined, defn: WorkflowDef, decision: Decision) -> None:
        self._rt = rt
        self._joined = joined
        self._defn = defn
        self._decision = decision
        self._committed = False

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        left = await self.committed(timeout)
        return await self._rt.waiter.result(run_id, left)

    async def admitted_run(self, ticket: str, timeout: float | None = None) -> str:
        left = await self.committed(timeout)
        return await self._rt.waiter.admitted_run(ticket, left)

    async def stream(self, run_id: str, topic: str = "default", after: int = 0) -> AsyncIterator[StreamChunk]:
        await self.committed()
        async for chunk in self._rt.waiter.stream(run_id, topic, after):
            yield chunk

    async def committed(self, timeout: float | None = None) -> float | None:
        """Wait for the caller's transaction to commit (``StartRolledBack`` if it did not); the timeout left."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.005
        ticket = self._decision.ticket
        while not self._committed:
            outcome = await self._joined.outcome(ticket)
            if outcome == "rolled back":
                raise StartRolledBack(self._defn.name, ticket)
            if outcome == "committed":
                self._committed = True
                self._rt.after_decision(self._defn, self._decision)
                break
            wait = delay if deadline is None else min(delay, deadline - loop.time())
            if wait <= 0:
                raise ResultTimeout(f"start {ticket}: its transaction did not commit within {timeout}s")
            await asyncio.sleep(wait)
            delay = min(delay * 2, self._rt.poll_interval)
        return None if deadline is None else max(0.0, deadline - loop.time())
