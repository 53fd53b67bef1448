"""What a start returns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from .streams import StreamChunk

__all__ = ["Deferral", "RunHandle", "StartStatus", "Waiter"]

StartStatus = Literal["started", "existing", "queued", "dropped", "skipped"]


class Waiter(Protocol):
    """What a handle waits with (a ``Client`` or an ``Engine``)."""

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """The run's result once it ends."""
        ...

    async def admitted_run(self, ticket: str, timeout: float | None = None) -> str:
        """The id of the run a parked start became, once the gate admits it."""
        ...

    def stream(self, run_id: str, topic: str = "default", after: int = 0) -> AsyncIterator[StreamChunk]:
        """The run's stream ``topic`` past seq ``after``, live, until the run ended."""
        ...


@dataclass(frozen=True)
class Deferral:
    """Why and until when a start was parked at the gate."""

    mode: str
    due_at: datetime | None
    key: str | None = None


@dataclass(frozen=True)
class RunHandle:
    """The outcome of one arrival at the gate.

    ``ticket`` always identifies the arrival in the ledger; ``run_id`` is set once a run
    exists (``started``, ``existing``, ``skipped``: the incumbent).
    """

    workflow: str
    status: StartStatus
    ticket: str
    run_id: str | None
    deferral: Deferral | None = None
    retry_after: timedelta | None = None
    _client: Waiter | None = None

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the run's result; a start the gate parked is first waited for until it is admitted.

        Raises ``StartNotAdmitted`` if a parked start ends without a run, ``ValueError`` for a
        start that made none (``dropped``), ``ResultTimeout`` past ``timeout`` (both waits in all).
        """
        client = self._client
        if client is None:
            raise ValueError(f"start {self.ticket} has no engine to wait with")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        run_id = await self.admitted(timeout)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        return await client.result(run_id, timeout=left)

    async def admitted(self, timeout: float | None = None) -> str:
        """The id of the run this start made or joined; for a parked start, once the gate admits it."""
        if self.run_id is not None:
            return self.run_id
        if self._client is None or self.status != "queued":
            raise ValueError(f"start {self.ticket} has no run to wait for (status {self.status})")
        return await self._client.admitted_run(self.ticket, timeout)

    async def stream(self, topic: str = "default", *, after: int = 0) -> AsyncIterator[StreamChunk]:
        """``async for chunk in handle.stream()``: the run's stream ``topic`` past seq ``after``, as it is
        written, ending once the run ended and all of it was read (a parked start: once admitted).

        A ``reset`` chunk says to drop the chunks received of its ``step`` and ``attempt`` (``lg.drop_resets``).
        """
        if self._client is None:
            raise ValueError(f"start {self.ticket} has no engine to read with")
        run_id = await self.admitted()
        async for chunk in self._client.stream(run_id, topic, after):
            yield chunk

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "status": self.status,
            "ticket": self.ticket,
            "run_id": self.run_id,
            "deferral": None
            if self.deferral is None
            else {
                "mode": self.deferral.mode,
                "key": self.deferral.key,
                "due_at": None if self.deferral.due_at is None else self.deferral.due_at.isoformat(),
            },
            "retry_after": None if self.retry_after is None else self.retry_after.total_seconds(),
        }
