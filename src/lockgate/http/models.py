"""The request bodies and response documents of the HTTP API (its OpenAPI schemas).

Records the Inspector already returns as dataclasses (steps, ledger entries, flow rows, ...)
are served as they are; pydantic derives their schemas. A run is copied into ``Run`` so that
the raw store row it carries never reaches a response.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..facades.operator import BulkItem, BulkResult
from ..handles import RunHandle
from ..inspect import LedgerEntry, ReplicaLag, RunDetail
from ..inspect import RunPage as RunsRead
from ..records import AttemptInfo, EventInfo, RunInfo, StepInfo

__all__ = [
    "BulkOut",
    "CancelBody",
    "CancelManyBody",
    "CancelStartBody",
    "CancelStartOut",
    "DiscardOut",
    "Health",
    "KeyBody",
    "LedgerPage",
    "PauseKeyBody",
    "Problem",
    "ReasonBody",
    "ReplayManyBody",
    "ResumeFromStepBody",
    "RetryBody",
    "Run",
    "RunDetailOut",
    "RunPage",
    "SignalBody",
    "StartBody",
    "StartOut",
    "UnpauseOut",
    "UpdateBody",
    "UpdateOut",
    "WorkflowPauseBody",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a 422, not silently ignored


class Problem(BaseModel):
    """An RFC 9457 problem document; ``type`` names the error (``urn:lockgate:error:UnknownRun``)."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class Run(BaseModel):
    """One run as stored (payload and output are JSON data, never evaluated)."""

    id: str
    workflow: str
    status: str
    waiting_on: str | None
    payload: Any
    output: Any
    error_tag: str | None
    error_message: str | None
    idempotency_key: str | None
    version: str | None
    patches: list[str]
    parent_id: str | None
    parent_close: str | None
    retry_of: str | None
    ticket: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    wake_at: datetime | None
    owner: str | None
    entries: int
    reclaim_count: int
    discarded: bool
    source: str | None = None
    trace_id: str | None = None
    waiting_match: list[dict[str, Any]] | None = None  # what a run parked on events waits for, with the match
    waiting_version: dict[str, Any] | None = None  # waiting_on="version": the version it needs, what workers offer

    @classmethod
    def of(cls, info: RunInfo) -> Run:
        return cls(**{name: getattr(info, name) for name in cls.model_fields})


class RunPage(BaseModel):
    """A page of runs, newest first; pass ``next_cursor`` as ``cursor`` for the next page (null: last page).

    ``next_before`` is the id of the page's last run when more follow (for ``before``); ``searched``
    is how many runs a text search (``q``) read for this page.
    """

    items: list[Run]
    next_cursor: str | None
    next_before: str | None
    searched: int = 0

    @classmethod
    def of(cls, page: RunsRead) -> RunPage:
        items = [Run.of(r) for r in page.items]
        last = items[-1].id if items and page.next_cursor is not None else None
        return cls(items=items, next_cursor=page.next_cursor, next_before=last, searched=page.searched)


class RunDetailOut(BaseModel):
    """One run with its journal, step attempts, lifecycle events and children (newest first)."""

    run: Run
    steps: list[StepInfo]
    attempts: list[AttemptInfo]
    events: list[EventInfo]
    children: list[Run]

    @classmethod
    def of(cls, detail: RunDetail) -> RunDetailOut:
        return cls(
            run=Run.of(detail.run),
            steps=detail.steps,
            attempts=detail.attempts,
            events=detail.events,
            children=[Run.of(c) for c in detail.children],
        )


class LedgerPage(BaseModel):
    """Gate decisions, newest first; pass ``next_before`` as ``before`` for the next page."""

    items: list[LedgerEntry]
    next_before: int | None


class Health(BaseModel):
    """The API answers, its store is reachable and holds this code's migrations (``schema_version``: the last).

    ``read_store``: with a read store (a standby the reads are served from), how far it trails the
    write store; ``null`` without one.
    """

    ok: bool
    dialect: str
    schema_version: int
    read_store: ReplicaLag | None = None


# -- verbs ---------------------------------------------------------------------------------------


class ReasonBody(_Body):
    """An optional reason, recorded on the run's event."""

    reason: str | None = None


class CancelBody(ReasonBody):
    """An optional reason; ``compensate``: the body's open compensation blocks undo first, then it ends cancelled."""

    compensate: bool = False


class RetryBody(_Body):
    """A fresh run of a failed or cancelled run; ``payload`` overrides the original one."""

    payload: Any = None


class ResumeFromStepBody(_Body):
    """The step to re-run from (its name, or ``name#n``)."""

    step: str = Field(min_length=1)


class SignalBody(_Body):
    name: str = Field(min_length=1)
    payload: Any = None


class UpdateBody(_Body):
    name: str = Field(min_length=1)
    payload: Any = None
    timeout: float | None = Field(default=30.0, gt=0, le=300)


class UpdateOut(BaseModel):
    result: Any = None
    answered: bool = True  # False (status 202): not answered within the timeout; the update stays delivered
    detail: str | None = None


class StartBody(_Body):
    """Offer a start of ``workflow`` to the gate."""

    workflow: str = Field(min_length=1)
    payload: Any = None
    idempotency_key: str | None = None
    at: datetime | None = None


class StartOut(BaseModel):
    """What the gate did with a start: ``status`` started, deferred, existing, dropped, ...; ``ticket`` traces it."""

    workflow: str
    status: str
    ticket: str
    run_id: str | None
    deferral_mode: str | None = None
    deferral_due_at: datetime | None = None
    retry_after: float | None = None  # seconds

    @classmethod
    def of(cls, handle: RunHandle) -> StartOut:
        return cls(
            workflow=handle.workflow,
            status=handle.status,
            ticket=handle.ticket,
            run_id=handle.run_id,
            deferral_mode=None if handle.deferral is None else handle.deferral.mode,
            deferral_due_at=None if handle.deferral is None else handle.deferral.due_at,
            retry_after=None if handle.retry_after is None else handle.retry_after.total_seconds(),
        )


class CancelStartBody(_Body):
    reason: str = Field(min_length=1)


class CancelStartOut(BaseModel):
    """How many arrivals the cancelled start held."""

    arrivals: int


class WorkflowPauseBody(_Body):
    reason: str | None = None


class DiscardOut(BaseModel):
    """What a discard did: ``already_discarded`` when the run was discarded before (nothing changed)."""

    run_id: str
    already_discarded: bool


class UnpauseOut(BaseModel):
    """How many parked starts the unpause released."""

    released: int


class KeyBody(_Body):
    key: str = Field(min_length=1)


class PauseKeyBody(KeyBody):
    until: datetime | None = None
    reason: str | None = None


class CancelManyBody(_Body):
    """Cancel up to ``limit`` running or suspended runs; a dry run unless ``commit``."""

    reason: str = Field(min_length=1)
    limit: int = Field(ge=1, le=10_000)
    workflow: str | None = None
    status: Literal["running", "suspended"] | None = None
    commit: bool = False


class ReplayManyBody(_Body):
    """Redrive (failed) or retry (failed, cancelled) up to ``limit`` runs; a dry run unless ``commit``."""

    mode: Literal["redrive", "retry"]
    limit: int = Field(ge=1, le=10_000)
    workflow: str | None = None
    status: Literal["failed", "cancelled"] | None = None
    commit: bool = False


class BulkOut(BaseModel):
    """Per-run outcome of a bulk verb; ``truncated``: more runs matched than ``limit``."""

    verb: str
    committed: bool
    truncated: bool
    items: list[BulkItem]
    counts: dict[str, int]

    @classmethod
    def of(cls, result: BulkResult) -> BulkOut:
        counts = {o: result.count(o) for o in ("succeeded", "failed", "skipped", "would-act")}
        return cls(
            verb=result.verb, committed=result.committed, truncated=result.truncated, items=result.items, counts=counts
        )
