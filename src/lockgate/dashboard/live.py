"""Server-Sent Events: each stream re-renders one part of a page and sends it when it changes.

The browser (``static/dashboard.js``) swaps the part in place, so new runs and status changes
appear without a reload. A stream ends after ``LIFETIME`` seconds (the browser reconnects), so
no connection outlives a server's shutdown for long.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..errors import LockgateError
from ..inspect.streams import KEEPALIVE as STREAM_KEEPALIVE
from ..inspect.streams import resume_from, sse_events
from ..streams import DEFAULT_TOPIC, check_topic
from .pages import flow_context, run_context, runs_context
from .site import dashboard

__all__ = ["INTERVAL", "LIFETIME", "EventStream", "router", "sse"]

router = APIRouter()

INTERVAL = 1.0  # seconds between two reads of the store per stream
LIFETIME = 300.0
KEEPALIVE = 15.0


def sse(event: str, html: str) -> str:
    """One Server-Sent Event carrying ``html`` (one ``data:`` line per line of it)."""
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in html.splitlines() or [""]) + "\n"


async def _changes(request: Request, render: Callable[[], Awaitable[str]]) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    ends = loop.time() + LIFETIME
    last: str | None = None
    quiet = loop.time()
    yield "retry: 2000\n\n"
    while loop.time() < ends and not await request.is_disconnected():
        try:
            html = await render()
        except LockgateError as exc:
            yield sse("gone", str(exc))
            return
        if html != last:
            yield sse("swap", html)
            last, quiet = html, loop.time()
        elif loop.time() - quiet > KEEPALIVE:
            yield ": still here\n\n"
            quiet = loop.time()
        await asyncio.sleep(INTERVAL)


class EventStream(StreamingResponse):
    """An event stream that ends its response quietly when the server shuts down under it.

    Stopping ``serve`` or ``inspect`` cancels the connections still open; a browser's stream
    always is, and that is no error to log: the browser reconnects to the next server."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _stream(request: Request, render: Callable[[], Awaitable[str]]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return EventStream(_changes(request, render), media_type="text/event-stream", headers=headers)


@router.get("/live/runs")
async def live_runs(request: Request) -> StreamingResponse:
    """The runs list of the query's filters, whenever it changes."""
    d = dashboard(request)
    query = dict(request.query_params)

    async def render() -> str:
        return d.fragment(request, "_runs_body.html", **await runs_context(d, query))

    return _stream(request, render)


@router.get("/live/runs/{run_id}")
async def live_run(request: Request, run_id: str) -> StreamingResponse:
    """A run's header, buttons and timeline, whenever they change."""
    d = dashboard(request)

    async def render() -> str:
        return d.fragment(request, "_run_live.html", **await run_context(d, run_id))

    return _stream(request, render)


@router.get("/live/flow")
async def live_flow(request: Request) -> StreamingResponse:
    """The flow page's counts, queue and pauses, whenever they change."""
    d = dashboard(request)
    query = dict(request.query_params)

    async def render() -> str:
        return d.fragment(request, "_flow_body.html", **await flow_context(d, query))

    return _stream(request, render)


@router.get("/live/runs/{run_id}/stream")
async def live_stream(request: Request, run_id: str, topic: str = DEFAULT_TOPIC) -> StreamingResponse:
    """The run's stream ``topic`` (the API's ``/runs/{id}/stream``, under the dashboard's sign-in)."""
    d = dashboard(request)
    check_topic(topic)
    after = resume_from(request.headers.get("last-event-id"), None)
    events = await d.client.stream_events(run_id, topic, after, heartbeat=STREAM_KEEPALIVE)  # UnknownRun: 404
    source = sse_events(events, request.is_disconnected)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return EventStream(source, media_type="text/event-stream", headers=headers)
