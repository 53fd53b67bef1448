"""``client.schedules``: schedules created, changed, paused and deleted at runtime, and read back.

A thin facade: the writes are ``engine/schedule_verbs.py``'s (and pause/unpause the operator
verbs of ``engine/schedules.py``), the reads ``inspect/schedule_views.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..durations import Duration
from ..engine import schedule_verbs, schedules
from ..engine.firing import ScheduleRuntime
from ..inspect.schedule_views import SchedulePage, ScheduleView, schedule_view, schedules_page
from ..schedule import Overlap
from ..schedule_options import IfExists

__all__ = ["Schedules"]


class Schedules:
    """Runtime schedules: ``create``, ``update``, ``pause``, ``unpause``, ``delete``, ``get``, ``list``.

    ``id`` is the caller's (``digest:tenant-4711``). Declared schedules are read here too, and
    paused and unpaused, but only their code changes or removes them (``ScheduleNotOwned``).
    """

    def __init__(self, runtime: Callable[[], ScheduleRuntime]) -> None:
        self._runtime = runtime

    async def create(
        self,
        id: str,
        *,
        workflow: str | Callable[..., Any],
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        on_overlap: Overlap = "skip",
        buffer_limit: int = 1,
        backfill: Duration | None = None,
        jitter: Duration | None = None,
        max_runtime: Duration | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        paused: bool = False,
        note: str | None = None,
        if_exists: IfExists = "error",
        conn: Any = None,
    ) -> ScheduleView:
        """Create a schedule starting ``workflow`` by ``cron`` (in ``timezone``) or ``every``, as
        ``lg.Schedule`` does, with a payload checked against the workflow's model now.

        ``if_exists``: ``"error"`` (``ScheduleExists``), ``"update"`` (set these options; a pause
        stays as it is) or ``"skip"`` (leave it). ``conn``: the caller's open transaction, so that the
        schedule commits (or rolls back) with the caller's own rows. ``paused`` applies to a new one.
        """
        options = {
            "cron": cron,
            "every": every,
            "timezone": timezone,
            "payload": payload,
            "on_overlap": on_overlap,
            "buffer_limit": buffer_limit,
            "backfill": backfill,
            "jitter": jitter,
            "max_runtime": max_runtime,
            "start_at": start_at,
            "end_at": end_at,
            "note": note,
        }
        rt = self._runtime()
        name = _workflow_name(workflow)
        done, row = await schedule_verbs.create(rt, id, name, options, paused=paused, if_exists=if_exists, conn=conn)
        if done == "created":  # the row as written (with conn=, not committed yet: not readable elsewhere)
            return ScheduleView.from_row(row, rt.schedules)
        return await self.get(id)

    async def update(self, id: str, *, conn: Any = None, **changes: Any) -> ScheduleView:
        """Change the named options (``create``'s, and ``workflow``); the rest stay. A new cron, interval
        or time zone takes effect from now: slots the old rule had due fire once, first. ``conn``: the
        caller's open transaction, as for ``create`` (the view returned is the row it now holds)."""
        if "workflow" in changes:
            changes["workflow"] = _workflow_name(changes["workflow"])
        rt = self._runtime()
        _, written = await schedule_verbs.update(rt, id, changes, conn=conn)
        if written is not None:
            return ScheduleView.from_row(written, rt.schedules)
        return await self.get(id)

    async def pause(self, id: str, reason: str | None = None) -> None:
        """Stop ``id`` firing on every replica until ``unpause``."""
        await schedules.pause(self._runtime(), id, True, reason)

    async def unpause(self, id: str) -> None:
        """Fire ``id`` again from its next slot (slots of the pause are not caught up)."""
        await schedules.pause(self._runtime(), id, False)

    async def delete(self, id: str, *, conn: Any = None) -> None:
        """Delete runtime schedule ``id`` (``UnknownSchedule`` if there is none)."""
        await schedule_verbs.delete(self._runtime(), id, conn=conn)

    async def get(self, id: str) -> ScheduleView:
        """Schedule ``id``, declared or runtime (``UnknownSchedule`` if there is none)."""
        rt = self._runtime()
        return await rt.store.read(schedule_view, rt.schedules, id)

    async def list(
        self,
        *,
        workflow: str | None = None,
        prefix: str | None = None,
        paused: bool | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> SchedulePage:
        """A page of schedules by id; pass its ``cursor`` for the next page."""
        rt = self._runtime()
        return await rt.store.read(
            schedules_page, rt.schedules, workflow=workflow, prefix=prefix, paused=paused, limit=limit, cursor=cursor
        )


def _workflow_name(workflow: Any) -> Any:
    """A workflow's name, from its name or its decorated function."""
    return workflow if isinstance(workflow, str) else getattr(workflow, "__lockgate_workflow__", workflow)
