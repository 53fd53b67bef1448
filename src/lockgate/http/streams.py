"""``GET /api/v1/runs/{id}/stream``: a run's stream as Server-Sent Events, for a server or a browser.

Besides the API's own tokens, the endpoint (and no other) accepts a stream token
(``client.stream_token``) as ``?token=`` or as the bearer: it reads that run's stream, its
topics, until it expires. Browsers of the origins listed in ``stream_origins`` (or
``LOCKGATE_STREAM_ORIGINS``, comma-separated) may read it across origins: CORS headers are
sent for this endpoint alone, and a request from an origin not listed is refused (403).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..errors import StreamTokenRefused
from ..facades import Client
from ..inspect.streams import KEEPALIVE, resume_from, sse_events
from ..streams import DEFAULT_TOPIC, check_topic, is_stream_token
from .problems import problem_response
from .security import ASGIApp, Receive, Scope, Send, header_of, send_problem

__all__ = ["ORIGINS_ENV", "STREAM_PATH", "StreamCors", "origins_from_env", "router", "stream_token_of"]

router = APIRouter()

ORIGINS_ENV = "LOCKGATE_STREAM_ORIGINS"
STREAM_PATH = re.compile(r"/api/v1/runs/[^/]+/stream$")  # searched: the API may be mounted under a prefix
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def origins_from_env() -> list[str]:
    return [o.strip() for o in os.environ.get(ORIGINS_ENV, "").split(",") if o.strip()]


def stream_token_of(scope: Scope) -> str | None:
    """The stream token a request to the stream endpoint presents (query ``token`` or bearer), if any."""
    auth = header_of(scope, b"authorization") or ""
    kind, _, presented = auth.partition(" ")
    if kind.lower() == "bearer" and is_stream_token(presented.strip()):
        return presented.strip()
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "token" and value:
            return value
    return None


@router.get(
    "/runs/{run_id}/stream",
    tags=["runs"],
    summary="Follow a run's stream (Server-Sent Events)",
    response_model=None,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream(
    request: Request,
    run_id: str,
    topic: Annotated[str, Query(description="the stream's topic")] = DEFAULT_TOPIC,
    after: Annotated[str | None, Query(description="read past this seq (Last-Event-ID wins)")] = None,
    token: Annotated[str | None, Query(description="a stream token (client.stream_token)")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse | JSONResponse:
    """``chunk`` and ``reset`` events (``id``: the seq) as the run streams, then ``end`` with its outcome."""
    client: Client = request.app.state.lockgate_client
    check_topic(topic)
    presented = stream_token_of(request.scope)
    if presented is not None:
        try:
            await client.check_stream_token(presented, run_id, topic)
        except StreamTokenRefused as exc:
            status = 403 if exc.reason in ("other run", "other topic") else 401
            return problem_response(status, "StreamTokenRefused", str(exc), instance=request.url.path)
    after_seq = resume_from(last_event_id, after)
    source = await client.stream_events(run_id, topic, after_seq, heartbeat=KEEPALIVE)  # UnknownRun: 404 here
    events = sse_events(source, request.is_disconnected)
    return StreamingResponse(events, media_type="text/event-stream", headers=_HEADERS)


class StreamCors:
    """CORS for the stream endpoint alone: its preflight answered, its responses allowed to the listed origins."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.origins = frozenset(o.rstrip("/") for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not STREAM_PATH.search(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        origin = header_of(scope, b"origin")
        host = header_of(scope, b"host")
        if origin is None or (host is not None and origin in (f"http://{host}", f"https://{host}")):
            await self.app(scope, receive, send)  # not a cross-origin request
            return
        if origin.rstrip("/") not in self.origins:
            detail = f"origin {origin} may not read streams: list it in {ORIGINS_ENV}"
            await send_problem(send, 403, "CorsRefused", detail)
            return
        allow = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS":
            headers = [
                *allow,
                (b"access-control-allow-methods", b"GET"),
                (b"access-control-allow-headers", b"authorization, last-event-id"),
                (b"access-control-max-age", b"600"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def allowed(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *allow]}  # type: ignore[misc]
            await send(message)

        await self.app(scope, receive, allowed)  # type: ignore[arg-type]
