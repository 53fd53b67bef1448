"""The dashboard's pages: runs, a run, flow, why, events, schedules and cluster (``GET`` only)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ..errors import LockgateError, UnknownRun
from ..inspect import RUN_STATUSES, Inspector, LedgerEntry, RunDetail
from ..store import event_waits
from .flowview import WINDOWS, flow_page
from .runs_filter import RunFilter, fetch_runs
from .site import Dashboard, dashboard
from .timeline import build_timeline
from .verbs import VERBS, allowed

__all__ = ["flow_context", "router", "run_context", "runs_context"]

router = APIRouter()

CHILDREN_SHOWN = 100


def _is_partial(request: Request) -> bool:
    """A partial update (``dashboard.js``) asks for the page's live part alone."""
    return request.headers.get("hx-request") == "true"


async def runs_context(d: Dashboard, query: Mapping[str, str]) -> dict[str, Any]:
    """The runs list of ``query``'s filters (a refusal of a bad filter is shown, not raised)."""
    problem = None
    page = None
    try:
        wanted = RunFilter.from_query(query)
    except LockgateError as exc:
        wanted, problem = RunFilter(), exc
    if problem is None:
        try:
            page = await fetch_runs(d.inspector, wanted)
        except LockgateError as exc:
            problem = exc
    return {"filter": wanted, "page": page, "problem": problem, "statuses": RUN_STATUSES}


@router.get("/runs", response_model=None)
async def runs(request: Request) -> HTMLResponse | RedirectResponse:
    d = dashboard(request)
    if not _is_partial(request) and "" in request.query_params.values():
        # a form sent without script carries its empty fields: the link to share leaves them out
        try:
            canonical = RunFilter.from_query(request.query_params).query()
        except LockgateError:
            pass
        else:
            return RedirectResponse(f"{d.base(request)}/runs" + (f"?{canonical}" if canonical else ""), 303)
    context = await runs_context(d, request.query_params)
    if _is_partial(request):
        return d.html(request, "_runs_body.html", **context)
    views = await d.inspector.saved_views()
    # the declared workflows, and those on this page (a grouped count of every run costs too much here)
    shown = context["page"].items if context["page"] else []
    workflows = sorted(set(d.inspector.app.definitions()) | {r.workflow for r in shown})
    status = 422 if context["problem"] is not None else 200
    return d.html(request, "runs.html", status, views=views, workflows=workflows, active="runs", **context)


@router.get("/views/{name}", response_model=None)
async def open_view(request: Request, name: str) -> HTMLResponse | RedirectResponse:
    """A saved view's link: the runs list with its filters in the URL."""
    d = dashboard(request)
    found = next((v for v in await d.inspector.saved_views() if v.name == name), None)
    if found is None:
        return d.html(request, "missing.html", 404, what="saved view", problem=f"no view is named {name!r}")
    return RedirectResponse(f"{d.base(request)}/runs?{found.query}", status_code=303)


async def run_context(d: Dashboard, run_id: str, inspector: Inspector | None = None) -> dict[str, Any]:
    """A run with its timeline and the verbs its state allows; ``UnknownRun`` if there is none.

    ``inspector``: where to read it (default: where pages read, ``d.inspector``)."""
    inspector = inspector or d.inspector
    detail = await _detail(inspector, run_id)
    gate_wait = await _gate_wait(inspector, detail.run.ticket)
    now = d.now()
    attempts: dict[str, list[Any]] = {}
    for attempt in detail.attempts:
        attempts.setdefault(attempt.step_key, []).append(attempt)
    return {
        "detail": detail,
        "run": detail.run,
        "timeline": build_timeline(detail, now, gate_wait),
        "attempts": attempts,
        "verbs": VERBS,
        "allowed": allowed(detail.run),
        "tokens": [t for t in await inspector.tokens(run_id) if t.state == "pending"],  # dashboard/tokens.py
    }


async def _detail(inspector: Inspector, run_id: str) -> RunDetail:
    """The run with its journal, attempts and events, and its children when its body started any.

    Only a body's ``child`` journal entry makes children, so a run without one skips the
    children query (which a store with many runs answers slowest)."""
    run = await inspector.run(run_id)
    steps, attempts, events = await asyncio.gather(
        inspector.steps(run_id), inspector.attempts(run_id), inspector.events(run_id)
    )
    parent = any(s.kind in ("child", "wait_child") for s in steps)
    children = await inspector.runs(parent_id=run_id, limit=CHILDREN_SHOWN) if parent else []
    return RunDetail(run=run, steps=steps, attempts=attempts, events=events, children=children)


async def _gate_wait(inspector: Inspector, ticket: str | None) -> float | None:
    if ticket is None:
        return None
    try:
        found = await inspector.trace(ticket)
    except LockgateError:
        return None  # started around the gate (a child, a retry) or its ledger rows were pruned
    waited = [h["waited"] for h in found.history if h.get("waited")]
    return max(waited) if waited else None


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run(request: Request, run_id: str) -> HTMLResponse:
    d = dashboard(request)
    try:
        context = await run_context(d, run_id, d.reading(request.query_params))
    except UnknownRun as exc:
        return d.html(request, "missing.html", 404, what="run", problem=exc, active="runs")
    if _is_partial(request):
        return d.html(request, "_run_live.html", **context)
    return d.html(request, "run.html", active="runs", done=request.query_params.get("done"), **context)


async def flow_context(d: Dashboard, query: Mapping[str, str]) -> dict[str, Any]:
    window = query.get("window") or "1h"
    workflow = query.get("workflow", "").strip()
    inspector = d.reading(query)
    try:
        found = await flow_page(inspector, window, workflow or None)
    except LockgateError as exc:
        return {"flow": await flow_page(inspector, "1h"), "problem": exc, "workflow": ""}
    return {"flow": found, "problem": None, "workflow": workflow}


@router.get("/flow", response_class=HTMLResponse)
async def flow(request: Request) -> HTMLResponse:
    d = dashboard(request)
    context = await flow_context(d, request.query_params)
    if _is_partial(request):
        return d.html(request, "_flow_body.html", **context)
    return d.html(request, "flow.html", windows=list(WINDOWS), active="flow", **context)


WHY_RECENT = 20  # decisions the why page lists before a ticket is asked for


@router.get("/why", response_class=HTMLResponse)
async def why(request: Request, ticket: str = "") -> HTMLResponse:
    d = dashboard(request)
    ticket = ticket.strip()
    found = problem = None
    recent: list[LedgerEntry] = []
    if ticket:
        try:
            found = await d.inspector.trace(ticket)
        except LockgateError as exc:
            problem = exc
    else:  # nothing asked yet: the latest decisions give a ticket to follow
        recent = await d.inspector.ledger(limit=WHY_RECENT)
    return d.html(
        request,
        "why.html",
        404 if problem else 200,
        ticket=ticket,
        trace=found,
        problem=problem,
        recent=recent,
        active="why",
    )


@router.get("/events", response_class=HTMLResponse)
async def events(request: Request, name: str = "") -> HTMLResponse:
    d = dashboard(request)
    found = await d.inspector.list_events(name=name or None, limit=50)
    deliveries = await asyncio.gather(*(d.inspector.deliveries(e.id) for e in found))
    waiting: dict[str, int] = {}  # runs parked in ctx.wait_for_event, per event
    for row in await d.inspector.store.read(event_waits.waiting_per_event, None):
        waiting[row["name"]] = waiting.get(row["name"], 0) + int(row["waiting"])
    listed = list(zip(found, deliveries, strict=True))
    return d.html(request, "events.html", name=name, events=listed, waiting=waiting, active="events")


@router.get("/cluster", response_class=HTMLResponse)
async def cluster(request: Request) -> HTMLResponse:
    d = dashboard(request)
    found = await d.inspector.cluster_status()
    if _is_partial(request):
        return d.html(request, "_cluster_body.html", cluster=found)
    return d.html(request, "cluster.html", active="cluster", cluster=found)
