"""The dashboard's schedules page: every schedule by id, a schedule's firing ledger, and forms that
create, edit, pause, unpause and delete runtime schedules (declared ones are shown read-only: their
code owns them). Refusals are shown on the page with their type and message; nothing is written."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import InvalidArgument, InvalidSchedule, LockgateError, PayloadError, UnknownSchedule
from .actions import _foreign, _form, _refused
from .site import Dashboard, dashboard

__all__ = ["router"]

router = APIRouter()

EDITABLE = ("cron", "every", "timezone", "payload", "on_overlap", "note")


@router.get("/schedules", response_class=HTMLResponse)
async def schedules(request: Request, name: str = "", cursor: str = "", prefix: str = "") -> HTMLResponse:
    return await _page(dashboard(request), request, name, cursor=cursor, prefix=prefix)


async def _page(
    d: Dashboard,
    request: Request,
    name: str,
    *,
    cursor: str = "",
    prefix: str = "",
    problem: Any = None,
    form: dict[str, str] | None = None,
    status: int = 200,
) -> HTMLResponse:
    page = await d.client.schedules.list(prefix=prefix or None, cursor=cursor or None, limit=100)
    chosen = name or (page.items[0].id if page.items and problem is None else "")
    firings: list[Any] = []
    view = None
    if chosen:
        try:
            firings = await d.inspector.schedule_firings(chosen, 50)
            view = await d.client.schedules.get(chosen)
        except LockgateError as exc:
            if view is None and not firings:
                problem, status, chosen = exc, 404, ""
    return d.html(
        request,
        "schedules.html",
        status,
        schedules=page.items,
        cursor=page.cursor,
        prefix=prefix,
        chosen=chosen,
        view=view,
        payload_text="" if view is None or view.payload is None else json.dumps(view.payload),
        expression="" if view is None else view.cron or (f"{int(view.every)}s" if view.every else ""),
        firings=firings,
        problem=problem,
        form=form or {},
        active="schedules",
    )


def _options(schedule_id: str, form: dict[str, str], *, creating: bool) -> dict[str, Any]:
    """The options a form gives: blank fields are left out; the rule is ``cron`` or ``every``."""
    out: dict[str, Any] = {k: form[k].strip() for k in EDITABLE if form.get(k, "").strip()}
    if "payload" in out:
        try:
            out["payload"] = json.loads(out["payload"])
        except ValueError as exc:
            raise InvalidSchedule(schedule_id, "payload", f"not JSON: {exc}") from None
    if creating or "cron" in out or "every" in out:
        rule = form.get("rule", "cron" if "cron" in out else "every")
        value = out.pop("cron", None) or out.pop("every", None)
        out.pop("cron", None)
        out.pop("every", None)
        if value is not None:
            out[rule if rule in ("cron", "every") else "cron"] = value
    return out


@router.post("/schedules/create", response_model=None)
async def create(request: Request) -> Response:
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    schedule_id = form.get("id", "")
    try:
        options = _options(schedule_id, form, creating=True)
        await d.client.schedules.create(schedule_id, workflow=form.get("workflow", ""), **options)
    except LockgateError as exc:
        return await _page(d, request, "", problem=exc, form=form, status=_status(exc))
    return _back(d, request, schedule_id)


@router.post("/schedules/{schedule_id}/edit", response_model=None)
async def edit(request: Request, schedule_id: str) -> Response:
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    try:
        await d.client.schedules.update(schedule_id, **_options(schedule_id, form, creating=False))
    except LockgateError as exc:
        return await _page(d, request, schedule_id, problem=exc, status=_status(exc))
    return _back(d, request, schedule_id)


@router.post("/schedules/{schedule_id}/{verb}", response_model=None)
async def act(request: Request, schedule_id: str, verb: str) -> Response:
    """``pause``, ``unpause`` or ``delete`` a schedule."""
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    try:
        if verb == "pause":
            await d.client.schedules.pause(schedule_id, form.get("reason") or None)
        elif verb == "unpause":
            await d.client.schedules.unpause(schedule_id)
        elif verb == "delete":
            await d.client.schedules.delete(schedule_id)
            return _back(d, request, "")
        else:
            return Response(f"no verb {verb!r}", status_code=404, media_type="text/plain")
    except LockgateError as exc:
        return await _page(d, request, schedule_id, problem=exc, status=_status(exc))
    return _back(d, request, schedule_id)


def _status(exc: LockgateError) -> int:
    """As the API answers: 404 for an unknown schedule, 409 for a conflict, 422 for a wrong option."""
    if isinstance(exc, UnknownSchedule):
        return 404
    return 422 if isinstance(exc, InvalidArgument | PayloadError) else 409


def _back(d: Dashboard, request: Request, schedule_id: str) -> Response:
    where = f"?name={quote(schedule_id, safe='')}" if schedule_id else ""
    return RedirectResponse(f"{d.base(request)}/schedules{where}", status_code=303)

