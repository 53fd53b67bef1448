"""What a start returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .engine.client import Client

__all__ = ["Deferral", "RunHandle", "StartStatus"]

StartStatus = Literal["started", "existing", "queued", "dropped", "skipped"]


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
    _client: Client | None = None

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the run's result (raises if the start made no run)."""
        if self._client is None or self.run_id is None:
            raise ValueError(f"start {self.ticket} has no run to wait for (status {self.status})")
        return await self._client.result(self.run_id, timeout=timeout)

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
