"""``GET`` endpoints: every answer comes from the ``Inspector`` (the one query layer)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..errors import InvalidArgument, LockgateError
from ..events import DeliveryRecord, EventRecord
from ..inspect import (
    MAX_HOURS,
    ClusterStatus,
    FiringInfo,
    FlowRow,
    Inspector,
    ParkedStart,
    Pause,
    RunFilter,
    Stats,
    Trace,
    split_statuses,
)
from ..records import EventInfo
from .models import Health, LedgerPage, RunDetailOut, RunPage
from .problems import ApiProblem

__all__ = ["router"]

router = APIRouter()

Limit = Annotated[int, Query(ge=1, le=1000)]


def inspector(request: Request) -> Inspector:
    """The Inspector ``create_app`` put on the app's state."""
    found: Inspector = request.app.state.lockgate_inspector
    return found


def written(request: Request) -> Inspector:
    """An Inspector on the write store (the client's): the same as ``inspector`` without a read store."""
    found: Inspector = request.app.state.lockgate_client.inspector
    return found


@router.get("/healthz", response_model=Health, tags=["health"])
async def healthz(request: Request) -> Health:
    """The store answers and holds exactly this code's migrations (503 ``StoreError`` or ``MigrationsNotCurrent``);
    with a read store, it answers too, and ``read_store`` says how far it trails the write store."""
    reads = inspector(request)
    schema = await written(request).schema()
    if not schema.current:
        missing = sorted(set(schema.known) - set(schema.applied))
        unknown = sorted(set(schema.applied) - set(schema.known))
        raise ApiProblem(
            503,
            "MigrationsNotCurrent",
            f"the database's migrations are not this code's: missing {missing}, from a newer release {unknown}",
        )
    return Health(
        ok=True,
        dialect=reads.store.dialect,
        schema_version=max(schema.applied, default=0),
        read_store=await reads.replica_lag(),  # a read store that does not answer: StoreError, the 503
    )


@router.get("/runs", response_model=RunPage, tags=["runs"])
async def list_runs(
    request: Request,
    workflow: str | None = None,
    status: Annotated[
        list[str] | None, Query(description="one or more statuses: repeated, or comma-separated (running,failed)")
    ] = None,
    source: str | None = None,
    parent_id: str | None = None,
    since: Annotated[datetime | None, Query(description="created at or after (ISO 8601 with an offset)")] = None,
    until: Annotated[datetime | None, Query(description="created before (ISO 8601 with an offset)")] = None,
    id_prefix: Annotated[str | None, Query(description="the run id starts with this")] = None,
    q: Annotated[
        str | None, Query(description="text in the payload or error, case-insensitive (a bounded window per page)")
    ] = None,
    dead_letter: Annotated[bool, Query(description="failed runs nobody has discarded")] = False,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    before: Annotated[str | None, Query(description="the last run id of the previous page")] = None,
    limit: Limit = 50,
) -> RunPage:
    """Runs newest first, matching every filter given; ``cursor`` continues below the previous page
    (stable while runs arrive)."""
    where = RunFilter(
        workflow=workflow,
        statuses=split_statuses(*(status or ())),
        source=source,
        parent_id=parent_id,
        since=since,
        until=until,
        id_prefix=id_prefix,
        text=q,
        dead_letter=dead_letter,
    )
    return RunPage.of(await inspector(request).run_page(where, cursor=cursor, before=before, limit=limit))


@router.get("/runs/{run_id}/children", response_model=RunPage, tags=["runs"])
async def children(
    request: Request,
    run_id: str,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    limit: Limit = 50,
) -> RunPage:
    """The runs this run started, newest first."""
    return RunPage.of(await inspector(request).children(run_id, cursor=cursor, limit=limit))


@router.get("/runs/{run_id}", response_model=RunDetailOut, tags=["runs"])
async def get_run(request: Request, run_id: str) -> RunDetailOut:
    """One run with its steps, step attempts, events and children."""
    return RunDetailOut.of(await inspector(request).run_detail(run_id))


@router.get("/runs/{run_id}/events", response_model=list[EventInfo], tags=["runs"])
async def run_events(request: Request, run_id: str) -> list[EventInfo]:
    """The run's lifecycle events, oldest first."""
    found = inspector(request)
    await found.run(run_id)  # 404 for an unknown run rather than an empty list
    return await found.events(run_id)


@router.get("/flow", response_model=list[FlowRow], tags=["gate"])
async def flow(request: Request, workflow: str | None = None, since: datetime | None = None) -> list[FlowRow]:
    """Per workflow and key: queued, oldest waiting, in flight, and the gate's decisions since ``since``."""
    return await inspector(request).flow(workflow, since=since)


@router.get("/ledger", response_model=LedgerPage, tags=["gate"])
async def ledger(
    request: Request,
    workflow: str | None = None,
    ticket: str | None = None,
    kind: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    before: int | None = None,
    limit: Limit = 100,
) -> LedgerPage:
    """Gate decisions newest first; ``before`` continues after the previous page's last entry."""
    items = await inspector(request).ledger(
        workflow=workflow, ticket=ticket, kind=kind, outcome=outcome, since=since, before=before, limit=limit
    )
    return LedgerPage(items=items, next_before=items[-1].id if len(items) == limit else None)


@router.get("/tickets/{ticket}", response_model=Trace, tags=["gate"])
async def trace(request: Request, ticket: str) -> Trace:
    """What became of one arrival at the gate."""
    try:
        return await inspector(request).trace(ticket)
    except LockgateError as exc:
        if type(exc) is LockgateError:  # the inspector's "no arrival with ticket"
            raise ApiProblem(404, "UnknownTicket", str(exc)) from exc
        raise


@router.get("/pending", response_model=list[ParkedStart], tags=["gate"])
async def pending(
    request: Request,
    workflow: str | None = None,
    mode: str | None = None,
    after: Annotated[int | None, Query(description="the last seq of the previous page")] = None,
    limit: Limit = 100,
) -> list[ParkedStart]:
    """Starts parked at the gate, oldest arrival first."""
    return await inspector(request).parked(workflow=workflow, mode=mode, after=after, limit=limit)


@router.get("/pauses", response_model=list[Pause], tags=["gate"])
async def pauses(request: Request) -> list[Pause]:
    """Paused workflows and held flow-control keys."""
    return await inspector(request).pauses()


@router.get("/stats", response_model=Stats, tags=["totals"])
async def stats(
    request: Request,
    workflow: str | None = None,
    hours: Annotated[
        int | None, Query(ge=1, le=MAX_HOURS, description="also count the runs created in each of the last N hours")
    ] = None,
) -> Stats:
    """Runs per workflow and status, and parked starts per mode; with ``hours``, runs per hour (``hourly``)."""
    return await inspector(request).stats(workflow, hours=hours)


@router.get("/cluster", response_model=ClusterStatus, tags=["totals"])
async def cluster(request: Request) -> ClusterStatus:
    """The workers sharing the store and the sweep leases."""
    return await inspector(request).cluster_status()


@router.get("/events", response_model=list[EventRecord], tags=["events"])
async def list_events(
    request: Request, name: str | None = None, since: datetime | None = None, limit: Limit = 50
) -> list[EventRecord]:
    """Published domain events, newest first."""
    return await inspector(request).list_events(name=name, since=since, limit=limit)


@router.get("/events/{event_id}", response_model=EventRecord, tags=["events"])
async def get_event(request: Request, event_id: str) -> EventRecord:
    """One published event."""
    try:
        return await inspector(request).get_event(event_id)
    except InvalidArgument as exc:
        raise ApiProblem(404, "UnknownEvent", str(exc)) from exc


@router.get("/events/{event_id}/deliveries", response_model=list[DeliveryRecord], tags=["events"])
async def deliveries(request: Request, event_id: str) -> list[DeliveryRecord]:
    """What became of the event for each trigger listening for it."""
    found = inspector(request)
    try:
        await found.get_event(event_id)
    except InvalidArgument as exc:
        raise ApiProblem(404, "UnknownEvent", str(exc)) from exc
    return await found.deliveries(event_id)


@router.get("/schedules/{name}/firings", response_model=list[FiringInfo], tags=["schedules"])
async def schedule_firings(request: Request, name: str, limit: Limit = 50) -> list[FiringInfo]:
    """The firing ledger of one schedule, newest first."""
    return await inspector(request).schedule_firings(name, limit)
