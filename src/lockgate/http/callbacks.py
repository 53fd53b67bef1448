"""``POST /callbacks/{token}`` and ``GET /callbacks/{token}``: complete an approval token, or ask its state.

Outside the API's bearer token (``security.py`` lets ``/callbacks/`` through): the token in the
path is the credential, 256 random bits of which the store keeps only the hash. A refusal
writes nothing and answers a problem document: 404 for a token nobody made (mistyped, tampered
with), 410 for one that expired or whose run ended, 409 for a single-use token completed
already, 422 for a payload its model refuses. The ``GET`` says ``pending``, ``completed``,
``expired`` or ``closed`` and the token's name and expiry, nothing of its run. Every refused
attempt counts in ``lockgate_callback_failures_total`` by client address, on ``/metrics``.
"""

from __future__ import annotations

import json
import logging
import weakref
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter

from ..callbacks import CALLBACKS_PREFIX, TokenError
from ..errors import PayloadError
from ..facades import Client
from .problems import problem_response

__all__ = ["CALLBACKS_PREFIX", "install_callbacks"]

log = logging.getLogger("lockgate.callbacks")

_HIDDEN = CALLBACKS_PREFIX + "..."  # the problem's instance: a problem body never echoes a token
MAX_CLIENTS = 1000
"""Distinct client addresses labelled in the failure counter; later ones count under ``other``."""


class Failures:
    """Refused completions and lookups per client address and reason, in the engine's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            "lockgate_callback_failures",
            "Refused callback token requests, by client address and reason.",
            ["client", "reason"],
            registry=registry,
        )
        self.clients: set[str] = set()

    def count(self, request: Request, reason: str) -> None:
        peer = request.client.host if request.client else "unknown"
        if peer not in self.clients and len(self.clients) >= MAX_CLIENTS:
            peer = "other"
        self.clients.add(peer)
        self.counter.labels(peer, reason).inc()


_FAILURES: weakref.WeakKeyDictionary[CollectorRegistry, Failures] = weakref.WeakKeyDictionary()


def failures_of(registry: CollectorRegistry) -> Failures:
    """The failure counter in ``registry`` (one per registry: two apps over one client share it)."""
    found = _FAILURES.get(registry)
    if found is None:
        found = _FAILURES[registry] = Failures(registry)
    return found


def _reason(exc: Exception) -> str:
    return {404: "unknown", 410: "gone", 409: "used"}.get(getattr(exc, "status", 0), "invalid")


def install_callbacks(app: FastAPI, client: Client) -> None:
    """Serve ``/callbacks/{token}`` over ``client``."""
    failures = failures_of(client.core.metrics().registry)
    router = APIRouter(tags=["callbacks"])

    @router.get(CALLBACKS_PREFIX + "{token}", summary="The state of a callback token")
    async def state(token: str, request: Request) -> JSONResponse:
        path = _HIDDEN
        try:
            info = await client.inspector.token_state(token)
        except TokenError as exc:
            failures.count(request, _reason(exc))
            return problem_response(exc.status, type(exc).__name__, str(exc), instance=path)
        shown = info.to_dict()
        return JSONResponse({"state": info.state, "name": info.name, "expires_at": shown["expires_at"]})

    @router.post(CALLBACKS_PREFIX + "{token}", summary="Complete a callback token with a JSON payload")
    async def complete(token: str, request: Request) -> JSONResponse:
        path = _HIDDEN
        body = await request.body()
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if body and kind != "application/json" and not kind.endswith("+json"):
            failures.count(request, "invalid")
            return problem_response(415, "UnsupportedMediaType", "the body must be application/json", instance=path)
        try:
            payload: Any = json.loads(body) if body else None
        except ValueError as exc:
            failures.count(request, "invalid")
            return problem_response(400, "InvalidRequest", f"body: malformed JSON: {exc}", instance=path)
        try:
            token_id = await client.complete_token(token, payload)
        except TokenError as exc:
            failures.count(request, _reason(exc))
            return problem_response(exc.status, type(exc).__name__, str(exc), instance=path)
        except PayloadError as exc:
            failures.count(request, "invalid")
            errors = [{"field": _field(e), "message": e.get("msg")} for e in exc.errors]
            return problem_response(422, "PayloadError", str(exc), instance=path, errors=errors)
        log.info("callback token %s completed", token_id)
        return JSONResponse({"state": "completed"})

    app.include_router(router)


def _field(error: dict[str, Any]) -> str:
    return ".".join(str(p) for p in error.get("loc", ()) if p != "payload") or "body"
