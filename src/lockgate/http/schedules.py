"""``/schedules``: schedules listed and read, and runtime ones created, changed, paused and deleted.

Writes need the operate token (the guard refuses a read token anything but GET). Errors are
problems: an unknown schedule is 404 ``UnknownSchedule``, an id taken or a declared schedule
changed through these verbs 409 ``ScheduleExists`` / ``ScheduleNotOwned``, a wrong option 422
``InvalidSchedule`` naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..facades import Client
from ..inspect.schedule_views import PAGE_LIMIT, ScheduleView

__all__ = ["router"]

router = APIRouter(tags=["schedules"])

Seconds = float | str  # 3600, or a duration such as "1h"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is a 422, not silently ignored


class ScheduleOptions(_Body):
    """A schedule's options, as ``client.schedules.create`` takes them."""

    cron: str | None = None
    every: Seconds | None = None
    timezone: str = "UTC"
    payload: dict[str, Any] | None = None
    on_overlap: Literal["skip", "buffer", "cancel_other"] = "skip"
    buffer_limit: int = 1
    backfill: Seconds | None = None
    jitter: Seconds | None = None
    max_runtime: Seconds | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    note: str | None = None


class ScheduleCreateBody(ScheduleOptions):
    """A new runtime schedule: its id (the caller's), its workflow and its options."""

    id: str
    workflow: str
    paused: bool = False
    if_exists: Literal["error", "update", "skip"] = "error"


class ScheduleUpdateBody(_Body):
    """The options to change; those left out stay as they are."""

    workflow: str | None = None
    cron: str | None = None
    every: Seconds | None = None
    timezone: str | None = None
    payload: dict[str, Any] | None = None
    on_overlap: Literal["skip", "buffer", "cancel_other"] | None = None
    buffer_limit: int | None = None
    backfill: Seconds | None = None
    jitter: Seconds | None = None
    max_runtime: Seconds | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    note: str | None = None


class PauseBody(_Body):
    reason: str | None = Field(default=None, max_length=1000)


def _client(request: Request) -> Client:
    found: Client = request.app.state.lockgate_client
    return found


@router.get("/schedules", response_model=list[ScheduleView])
async def list_schedules(
    request: Request,
    response: Response,
    workflow: str | None = None,
    prefix: str | None = None,
    paused: bool | None = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT)] = 100,
    cursor: str | None = None,
) -> list[ScheduleView]:
    """Schedules by id, declared and runtime; the next page's cursor is in ``X-Next-Cursor``."""
    page = await _client(request).schedules.list(
        workflow=workflow, prefix=prefix, paused=paused, limit=limit, cursor=cursor
    )
    if page.cursor is not None:
        response.headers["X-Next-Cursor"] = page.cursor
    return page.items


@router.get("/schedules/{schedule_id}", response_model=ScheduleView)
async def get_schedule(request: Request, schedule_id: str) -> ScheduleView:
    """One schedule (404 ``UnknownSchedule``)."""
    return await _client(request).schedules.get(schedule_id)


@router.post("/schedules", response_model=ScheduleView, status_code=201)
async def create_schedule(request: Request, body: ScheduleCreateBody) -> ScheduleView:
    """Create a runtime schedule (409 ``ScheduleExists`` unless ``if_exists`` says otherwise)."""
    options = body.model_dump(exclude={"id", "workflow", "paused", "if_exists"})
    return await _client(request).schedules.create(
        body.id, workflow=body.workflow, paused=body.paused, if_exists=body.if_exists, **options
    )


@router.patch("/schedules/{schedule_id}", response_model=ScheduleView)
async def update_schedule(request: Request, schedule_id: str, body: ScheduleUpdateBody) -> ScheduleView:
    """Change a runtime schedule's options (409 ``ScheduleNotOwned`` for a declared one)."""
    return await _client(request).schedules.update(schedule_id, **body.model_dump(exclude_unset=True))


@router.delete("/schedules/{schedule_id}", status_code=204)
async def delete_schedule(request: Request, schedule_id: str) -> None:
    """Delete a runtime schedule (409 ``ScheduleNotOwned`` for a declared one)."""
    await _client(request).schedules.delete(schedule_id)


@router.post("/schedules/{schedule_id}/pause", status_code=204)
async def pause_schedule(request: Request, schedule_id: str, body: PauseBody | None = None) -> None:
    """Stop a schedule firing on every replica (declared or runtime)."""
    await _client(request).schedules.pause(schedule_id, None if body is None else body.reason)


@router.post("/schedules/{schedule_id}/unpause", status_code=204)
async def unpause_schedule(request: Request, schedule_id: str) -> None:
    """Fire a paused schedule again from its next slot."""
    await _client(request).schedules.unpause(schedule_id)
