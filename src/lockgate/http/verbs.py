"""``POST`` endpoints: each one calls one verb of the ``Client``; its typed errors become problems."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import ResultTimeout
from ..facades import Client
from ..origin import starting_from
from .models import (
    BulkOut,
    CancelBody,
    CancelManyBody,
    CancelStartBody,
    CancelStartOut,
    DiscardOut,
    KeyBody,
    PauseKeyBody,
    ReasonBody,
    ReplayManyBody,
    ResumeFromStepBody,
    RetryBody,
    SignalBody,
    StartBody,
    StartOut,
    UnpauseOut,
    UpdateBody,
    UpdateOut,
    WorkflowPauseBody,
)

__all__ = ["router"]

router = APIRouter(tags=["verbs"])


def client(request: Request) -> Client:
    """The Client ``create_app`` was given."""
    found: Client = request.app.state.lockgate_client
    return found


@router.post("/runs/{run_id}/cancel", status_code=204)
async def cancel(request: Request, run_id: str, body: CancelBody | None = None) -> None:
    """Cancel a running or suspended run; with ``compensate``, after its compensations run."""
    body = body or CancelBody()
    await client(request).cancel(run_id, body.reason, compensate=body.compensate)


@router.post("/runs/{run_id}/suspend", status_code=204)
async def suspend(request: Request, run_id: str, body: ReasonBody | None = None) -> None:
    """Park a running run until resumed."""
    await client(request).suspend(run_id, None if body is None else body.reason)


@router.post("/runs/{run_id}/resume", status_code=204)
async def resume(request: Request, run_id: str) -> None:
    """Continue a suspended run."""
    await client(request).resume(run_id)


@router.post("/runs/{run_id}/redrive", status_code=204)
async def redrive(request: Request, run_id: str) -> None:
    """Continue a failed run from its journal."""
    await client(request).redrive(run_id)


@router.post("/runs/{run_id}/resume-from-step", status_code=204)
async def resume_from_step(request: Request, run_id: str, body: ResumeFromStepBody) -> None:
    """Re-run a failed run from one step; earlier steps replay."""
    await client(request).resume_from_step(run_id, body.step)


@router.post("/runs/{run_id}/discard", response_model=DiscardOut)
async def discard(request: Request, run_id: str) -> DiscardOut:
    """Acknowledge a failed run (it leaves the dead-letter view); a second discard changes nothing and says so."""
    changed = await client(request).discard(run_id)
    return DiscardOut(run_id=run_id, already_discarded=not changed)


@router.post("/runs/{run_id}/retry", response_model=StartOut)
async def retry(request: Request, run_id: str, body: RetryBody | None = None) -> StartOut:
    """A fresh run of a failed or cancelled run, with its payload or ``payload``."""
    return StartOut.of(await client(request).retry(run_id, None if body is None else body.payload))


@router.post("/runs/{run_id}/signal", status_code=204)
async def signal(request: Request, run_id: str, body: SignalBody) -> None:
    """Send a signal to a live run."""
    await client(request).signal(run_id, body.name, body.payload)


_UNANSWERED = "Not answered within `timeout`: the update stays delivered, and the run answers it when its handler runs."


@router.post(
    "/runs/{run_id}/update", response_model=UpdateOut, responses={202: {"model": UpdateOut, "description": _UNANSWERED}}
)
async def update(request: Request, run_id: str, body: UpdateBody) -> UpdateOut | JSONResponse:
    """Send an update and wait for the run's handler to answer (202 when ``timeout`` passes first)."""
    try:
        result = await client(request).update(run_id, body.name, body.payload, timeout=body.timeout)
    except ResultTimeout as exc:  # the wait the caller asked for ran out, not the server
        return JSONResponse(UpdateOut(result=None, answered=False, detail=str(exc)).model_dump(), status_code=202)
    return UpdateOut(result=result)


@router.post("/runs/cancel-many", response_model=BulkOut)
async def cancel_many(request: Request, body: CancelManyBody) -> BulkOut:
    """Cancel up to ``limit`` matching runs (a dry run unless ``commit``)."""
    result = await client(request).cancel_many(
        reason=body.reason, limit=body.limit, workflow=body.workflow, status=body.status, commit=body.commit
    )
    return BulkOut.of(result)


@router.post("/runs/replay-many", response_model=BulkOut)
async def replay_many(request: Request, body: ReplayManyBody) -> BulkOut:
    """Redrive or retry up to ``limit`` matching runs (a dry run unless ``commit``)."""
    result = await client(request).replay_many(
        mode=body.mode, limit=body.limit, workflow=body.workflow, status=body.status, commit=body.commit
    )
    return BulkOut.of(result)


@router.post("/starts", response_model=StartOut)
async def start(request: Request, body: StartBody) -> StartOut:
    """Offer a start to the gate; the answer says what became of it."""
    with starting_from("http"):  # the run records that it came through the API
        handle = await client(request).start(
            body.workflow, body.payload, at=body.at, idempotency_key=body.idempotency_key
        )
    return StartOut.of(handle)


@router.post("/tickets/{ticket}/cancel", response_model=CancelStartOut)
async def cancel_start(request: Request, ticket: str, body: CancelStartBody) -> CancelStartOut:
    """Cancel a start parked at the gate (409 when it is not parked)."""
    return CancelStartOut(arrivals=await client(request).cancel_start(ticket, body.reason))


@router.post("/workflows/{workflow}/pause", status_code=204)
async def pause(request: Request, workflow: str, body: WorkflowPauseBody | None = None) -> None:
    """Park every new start of ``workflow`` at the gate."""
    await client(request).pause(workflow, None if body is None else body.reason)


@router.post("/workflows/{workflow}/unpause", response_model=UnpauseOut)
async def unpause(request: Request, workflow: str) -> UnpauseOut:
    """Lift a workflow's pause."""
    return UnpauseOut(released=await client(request).unpause(workflow))


@router.post("/keys/pause", status_code=204)
async def pause_key(request: Request, body: PauseKeyBody) -> None:
    """Hold a flow-control key (until ``until``, or until lifted)."""
    await client(request).pause_key(body.key, body.until, body.reason)


@router.post("/keys/unpause", status_code=204)
async def unpause_key(request: Request, body: KeyBody) -> None:
    """Lift a key's hold."""
    await client(request).unpause_key(body.key)
