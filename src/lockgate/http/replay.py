"""``POST /api/v1/events/replay``: offer past events to their triggers again (``Client.replay_events``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from .verbs import client

__all__ = ["ReplayBody", "ReplayOut", "router"]

router = APIRouter(tags=["events"])


class ReplayBody(BaseModel):
    """Which events to replay; a dry run unless ``commit`` (as ``lockgate events replay``)."""

    event: str
    since: datetime
    until: datetime | None = None  # default: now
    trigger: list[str] | None = None
    status: list[str] | None = None  # only events whose first delivery ended so (skipped, failed, ...)
    limit: int = Field(default=100, ge=1, le=10_000)
    commit: bool = False
    force: bool = False


class ReplayOut(BaseModel):
    commit: bool
    results: list[dict[str, Any]]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@router.post("/events/replay", response_model=ReplayOut)
async def replay(request: Request, body: ReplayBody) -> ReplayOut:
    """Per event and trigger: started, skipped (why), failed (why), or would-replay in a dry run."""
    found = client(request)
    until = _utc(body.until) if body.until is not None else datetime.fromtimestamp(found.clock.now(), UTC)
    results = await found.replay_events(
        body.event,
        since=_utc(body.since),
        until=until,
        trigger=body.trigger,
        status=body.status,
        limit=body.limit,
        commit=body.commit,
        force=body.force,
    )
    return ReplayOut(commit=body.commit, results=[r.to_dict() for r in results])
