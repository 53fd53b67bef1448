"""The gate's state as an operator reads it: pauses in force, parked starts, ledger rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ..clock import to_datetime
from ..store import gate, ledger
from ..store.base import Row, Tx

__all__ = ["LedgerEntry", "ParkedStart", "Pause", "ledger_page", "parked_page", "pauses"]


def _plain(record: Any) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(record).items()}


def _at(value: Any) -> datetime | None:
    return to_datetime(None if value is None else float(value))


@dataclass(frozen=True)
class Pause:
    """A pause in force: a paused workflow (``kind="workflow"``) or a held flow-control key (``kind="key"``)."""

    scope: str  # as stored: ``wf:<workflow>`` or ``key:<key>``
    kind: str
    name: str
    reason: str | None
    since: datetime | None
    until: datetime | None  # None: until lifted

    @classmethod
    def from_row(cls, row: Row) -> Pause:
        kind, _, name = str(row["scope"]).partition(":")
        return cls(
            scope=row["scope"],
            kind={"wf": "workflow"}.get(kind, kind),
            name=name,
            reason=row.get("reason"),
            since=_at(row.get("created_at")),
            until=_at(row.get("until")),
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class ParkedStart:
    """A start parked at the gate, with the tickets of every arrival it holds (its own first)."""

    id: str
    ticket: str
    workflow: str
    mode: str  # paused | delayed | debounce | batch | throttle | concurrency | key-paused
    key: str | None
    scope: str | None
    priority: int
    folded: int
    seq: int  # arrival order: the cursor of ``parked(after=)``
    first_at: datetime | None
    last_at: datetime | None
    due_at: datetime | None
    expires_at: datetime | None
    tickets: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class LedgerEntry:
    """One gate decision: an arrival's, or a later one on the parked row that holds it."""

    id: int  # newest first: the cursor of ``ledger(before=)``
    ticket: str
    kind: str  # arrival | drain
    workflow: str
    control: str | None
    key: str | None
    outcome: str
    reason: str | None
    folded: int
    waited: float | None  # seconds
    pending_id: str | None
    run_id: str | None
    at: datetime | None
    source: str | None = None  # where the start came from (api, cli, event:<name>, schedule:<name>, ...)
    trace_id: str | None = None

    @classmethod
    def from_row(cls, row: Row) -> LedgerEntry:
        return cls(
            id=int(row["id"]),
            ticket=row["ticket"],
            kind=row["kind"],
            workflow=row["workflow"],
            control=row["control"],
            key=row["key"],
            outcome=row["outcome"],
            reason=row["reason"],
            folded=int(row["folded"]),
            waited=None if row["waited"] is None else float(row["waited"]),
            pending_id=row["pending_id"],
            run_id=row["run_id"],
            at=_at(row["at"]),
            source=row.get("source"),
            trace_id=row.get("trace_id"),
        )

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


async def pauses(tx: Tx, now: float) -> list[Pause]:
    """The pauses in force at ``now``, by scope."""
    return [Pause.from_row(r) for r in await gate.list_pauses(tx, now)]


async def ledger_page(
    tx: Tx,
    *,
    workflow: str | None = None,
    ticket: str | None = None,
    kind: str | None = None,
    outcome: str | None = None,
    since: float | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[LedgerEntry]:
    """Ledger rows matching every given filter, newest first; ``before`` (an entry id) pages on."""
    rows = await ledger.ledger_page(
        tx, workflow=workflow, ticket=ticket, kind=kind, outcome=outcome, since=since, before=before, limit=limit
    )
    return [LedgerEntry.from_row(r) for r in rows]


async def parked_page(
    tx: Tx, *, workflow: str | None = None, mode: str | None = None, after: int | None = None, limit: int = 100
) -> list[ParkedStart]:
    """Parked starts matching the filters, oldest arrival first; ``after`` (a ``seq``) pages on."""
    rows = await ledger.parked_page(tx, workflow=workflow, mode=mode, after=after, limit=limit)
    held: dict[str, list[str]] = {r["id"]: [r["ticket"]] for r in rows}
    if held:
        for entry in await ledger.ledger_for_pendings(tx, list(held)):
            tickets = held[entry["pending_id"]]
            if entry["kind"] == "arrival" and entry["ticket"] not in tickets:
                tickets.append(entry["ticket"])
    return [
        ParkedStart(
            id=r["id"],
            ticket=r["ticket"],
            workflow=r["workflow"],
            mode=r["mode"],
            key=r["hold_key"],
            scope=r["hold_scope"],
            priority=int(r["priority"]),
            folded=int(r["folded"]),
            seq=int(r["seq"]),
            first_at=_at(r["first_at"]),
            last_at=_at(r["last_at"]),
            due_at=_at(r["due_at"]),
            expires_at=_at(r["expires_at"]),
            tickets=held[r["id"]],
        )
        for r in rows
    ]
