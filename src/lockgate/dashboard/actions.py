"""The dashboard's actions: each verb asks for confirmation on a page of its own, then calls the
``Client``; a refusal is shown with its type and message. Saved views and the flow page's
unpause and bulk verbs live here too.

Forms post ``application/x-www-form-urlencoded``; a post from another origin is refused, so a
page elsewhere cannot drive an operator's browser into acting.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import InvalidArgument, LockgateError, UnknownRun
from ..facades import Client
from ..facades.operator import BulkResult
from .pages import run_context
from .runs_filter import RunFilter
from .site import dashboard
from .verbs import VERBS, perform

__all__ = ["router"]

router = APIRouter()


async def _form(request: Request) -> dict[str, str]:
    return dict(parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True))


def _foreign(request: Request) -> bool:
    """The post comes from a page of another origin (``Origin`` or ``Sec-Fetch-Site`` says so)."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin == "null"
    return urlsplit(origin).netloc != request.headers.get("host", "")


def _refused() -> Response:
    return Response("cross-origin form posts are refused", status_code=403, media_type="text/plain")


@router.get("/runs/{run_id}/do/{verb}", response_class=HTMLResponse)
async def confirm(request: Request, run_id: str, verb: str) -> HTMLResponse:
    """The confirmation page of ``verb`` on the run, with the fields it asks for."""
    d = dashboard(request)
    if verb not in VERBS:
        return d.html(request, "missing.html", 404, what="verb", problem=f"no verb {verb!r}", active="runs")
    try:
        context = await run_context(d, run_id)
    except UnknownRun as exc:
        return d.html(request, "missing.html", 404, what="run", problem=exc, active="runs")
    return d.html(request, "confirm.html", verb=VERBS[verb], form={}, active="runs", **context)


@router.post("/runs/{run_id}/do/{verb}", response_model=None)
async def act(request: Request, run_id: str, verb: str) -> Response:
    """Call the verb; back to the run on success, the confirmation page with the refusal otherwise."""
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    if verb not in VERBS:
        return d.html(request, "missing.html", 404, what="verb", problem=f"no verb {verb!r}", active="runs")
    try:
        result = await perform(d.client, verb, run_id, form)
    except LockgateError as exc:
        try:
            context = await run_context(d, run_id, d.client.inspector)  # as the refusal found it
        except UnknownRun as missing:
            return d.html(request, "missing.html", 404, what="run", problem=missing, active="runs")
        status = 422 if isinstance(exc, InvalidArgument) else 409
        return d.html(
            request, "confirm.html", status, verb=VERBS[verb], form=form, refusal=exc, active="runs", **context
        )
    if verb == "retry" and getattr(result, "run_id", None):
        return RedirectResponse(f"{d.base(request)}/runs/{result.run_id}?done=retry", status_code=303)
    if verb == "update":
        context = await run_context(d, run_id, d.client.inspector)  # it shows the update: read where it was written
        return d.html(request, "confirm.html", verb=VERBS[verb], form=form, answer=result, active="runs", **context)
    return RedirectResponse(f"{d.base(request)}/runs/{run_id}?done={quote(verb)}", status_code=303)


@router.post("/views", response_model=None)
async def save_view(request: Request) -> Response:
    """Save the runs list's current filters under a name; the view's own link follows."""
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    try:
        query = RunFilter.from_query(dict(parse_qsl(form.get("query", "")))).query(before="")
        view = await d.inspector.save_view(form.get("name", ""), query)
    except LockgateError as exc:
        return d.html(request, "missing.html", 422, what="view", problem=exc, active="runs")
    return RedirectResponse(f"{d.base(request)}/views/{quote(view.name, safe='')}", status_code=303)


@router.post("/views/{name}/delete", response_model=None)
async def delete_view(request: Request, name: str) -> Response:
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    await d.inspector.delete_view(name)
    return RedirectResponse(f"{d.base(request)}/runs", status_code=303)


@router.post("/flow/unpause", response_model=None)
async def unpause(request: Request) -> Response:
    """Lift a workflow's pause or a key's hold."""
    if _foreign(request):
        return _refused()
    d = dashboard(request)
    form = await _form(request)
    kind, name = form.get("kind", ""), form.get("name", "")
    try:
        if kind == "workflow":
            await d.client.unpause(name)
        elif kind == "key":
            await d.client.unpause_key(name)
        else:
            raise InvalidArgument("kind must be workflow or key")
    except LockgateError as exc:
        return d.html(request, "missing.html", 409, what="pause", problem=exc, active="flow")
    return RedirectResponse(f"{d.base(request)}/flow?unpaused={quote(name)}", status_code=303)


@router.post("/flow/bulk", response_class=HTMLResponse)
async def bulk(request: Request) -> HTMLResponse:
    """A bulk cancel or replay: a dry run listing the runs first; ``commit=1`` acts on them."""
    if _foreign(request):
        return HTMLResponse("cross-origin form posts are refused", status_code=403)
    d = dashboard(request)
    form = await _form(request)
    commit = form.get("commit") == "1"
    result: BulkResult | None = None
    problem: LockgateError | None = None
    try:
        result = await _bulk(d.client, form, commit)
    except LockgateError as exc:
        problem = exc
    return d.html(
        request, "bulk.html", 422 if problem else 200, form=form, result=result, problem=problem, active="flow"
    )


async def _bulk(client: Client, form: dict[str, str], commit: bool) -> BulkResult:
    verb = form.get("verb", "")
    limit_text = form.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 10_000:
        raise InvalidArgument("limit must be a number from 1 to 10000")
    workflow = form.get("workflow") or None
    status = form.get("status") or None
    if verb == "cancel":
        result: BulkResult = await client.cancel_many(
            reason=form.get("reason", ""), limit=int(limit_text), workflow=workflow, status=status, commit=commit
        )
        return result
    if verb in ("redrive", "retry"):
        result = await client.replay_many(
            mode=verb, limit=int(limit_text), workflow=workflow, status=status, commit=commit
        )
        return result
    raise InvalidArgument("verb must be cancel, redrive or retry")
