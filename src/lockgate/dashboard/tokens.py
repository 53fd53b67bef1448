"""A run's pending approval tokens: the operator completes or rejects one from its page (no secret needed:
the dashboard's session is the credential, as for a signal)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import LockgateError, UnknownRun
from ..inspect.callbacks import TokenInfo
from .actions import _foreign, _form, _refused
from .site import Dashboard, dashboard
from .verbs import _payload

__all__ = ["router"]

router = APIRouter()


async def _token(d: Dashboard, run_id: str, token_id: str) -> TokenInfo | None:
    return next((t for t in await d.inspector.tokens(run_id) if t.id == token_id), None)


@router.get("/runs/{run_id}/tokens/{token_id}", response_class=HTMLResponse)
async def confirm(request: Request, run_id: str, token_id: str) -> HTMLResponse:
    d = dashboard(request)
    try:
        run, token = await d.inspector.run(run_id), await _token(d, run_id, token_id)
    except UnknownRun as exc:
        return d.html(request, "missing.html", 404, what="run", problem=exc, active="runs")
    if token is None:
        return d.html(request, "missing.html", 404, what="token", problem=f"no token {token_id!r}", active="runs")
    return d.html(request, "token.html", run=run, token=token, form={}, active="runs")


@router.post("/runs/{run_id}/tokens/{token_id}", response_model=None)
async def complete(request: Request, run_id: str, token_id: str) -> Response:
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    try:
        token = await _token(d, run_id, token_id)
        if token is None:
            return d.html(request, "missing.html", 404, what="token", problem=f"no token {token_id!r}", active="runs")
        if form.get("action") == "reject":
            await d.client.complete_token_by_id(token_id, reject=True, reason=form.get("reason", "").strip() or None)
        else:
            await d.client.complete_token_by_id(token_id, _payload(form.get("payload", "")))
    except UnknownRun as exc:
        return d.html(request, "missing.html", 404, what="run", problem=exc, active="runs")
    except LockgateError as exc:
        run = await d.inspector.run(run_id)
        status = getattr(exc, "status", 422)
        return d.html(request, "token.html", status, run=run, token=token, form=form, refusal=exc, active="runs")
    done = "reject token" if form.get("action") == "reject" else "complete token"
    return RedirectResponse(f"{d.base(request)}/runs/{run_id}?done={quote(done)}", status_code=303)
