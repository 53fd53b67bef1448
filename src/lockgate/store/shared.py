"""Low-level pieces the store's subject modules share: fences, a run's parameters, events.

The subject modules (``runs``, ``journal``, ``messages``, ``gate``, ``workers``,
``retention``) each own their named queries; what more than one of them needs sits here,
below them all. It runs ``get_run`` and ``lock_run`` (``runs.sql``) and ``insert_event`` (``journal.sql``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UnknownRun
from ..serde import dump_json
from .base import Row, Tx

__all__ = [
    "LIVE",
    "TERMINAL",
    "Fence",
    "Fenced",
    "add_event",
    "event_row",
    "get_run",
    "run_by_identity",
    "run_params",
    "started_data",
]


TERMINAL = ("succeeded", "failed", "cancelled")
"""The statuses a run ends in."""
LIVE = ("running", "suspended")
"""The statuses of a run that has not ended."""


class Fenced(BaseException):
    """This worker no longer holds the run's lease; its write was refused."""


@dataclass(frozen=True)
class Fence:
    """Who holds a run, and under which lease epoch: what a held run's writes are checked against."""

    run_id: str
    owner: str
    epoch: int

    def params(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "owner": self.owner, "epoch": self.epoch}


_RUN_DEFAULTS: dict[str, Any] = {
    "parent_id": None,
    "parent_close": None,
    "retry_of": None,
    "source": None,  # where the run came from (origin.py)
    "trace_id": None,
    "subject": None,
    "ticket": None,
    "idempotency_key": None,
    "version": None,
    "recording": "full",
    "singleton_key": None,
    "deadline_at": None,
    "on_failure": None,
    "slot_scope": None,
    "slot_key": None,
    "owner": None,  # set (with lease_until .. entries) when the starting engine claims it at once
    "lease_until": None,
    "epoch": 0,
    "entered_at": None,
    "entries": 0,
    "flow_control": None,  # the step flow control given at start (flowcontrol.FlowLimits as JSON)
}


def run_params(run: dict[str, Any], now: float) -> dict[str, Any]:
    """The parameters ``insert_run`` takes for ``run`` (its omitted columns defaulted)."""
    params = {**_RUN_DEFAULTS, "wake_at": now, **run, "now": now}
    if "identity" not in run:
        params["identity"] = run["id"]
    return params


def started_data(workflow: str, ticket: str | None, parent_id: str | None) -> str:
    """The data of a run's ``run-started`` event."""
    return dump_json({"workflow": workflow, "ticket": ticket, "parent_id": parent_id})


def event_row(run_id: str, type_: str, now: float, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters of ``insert_event`` for one event."""
    return {"run_id": run_id, "type": type_, "at": now, "data": None if data is None else dump_json(data)}


async def add_event(tx: Tx, run_id: str, type_: str, now: float, data: dict[str, Any] | None = None) -> None:
    await tx.execute("insert_event", event_row(run_id, type_, now, data))


async def get_run(tx: Tx, run_id: str, *, lock: bool = False) -> Row:
    """The run's row (``UnknownRun`` if none); ``lock``: locked until ``tx`` commits (``lock_run``)."""
    row = await tx.one("lock_run" if lock else "get_run", {"id": run_id})
    if row is None:
        raise UnknownRun(run_id)
    return row


async def run_by_identity(tx: Tx, identity: str) -> Row:
    """The run that spent ``identity`` (a start's insert found it taken: it exists)."""
    row = await tx.one("get_run_by_identity", {"identity": identity})
    assert row is not None
    return row
