"""``POST /hooks/{name}``: inbound webhooks (``app.webhook``), published as domain events.

Outside the API's bearer token (``security.py`` lets ``/hooks/`` through): each hook is
authenticated by its own signature and secret, resolved once as the app is built, so a
missing secret refuses the boot. A refused request writes nothing and logs one line (never
the body, never the secret). ``dedupe`` makes the provider's delivery id the event id (a Stripe
hook's: the body's event id), so a retried delivery answers with the event it published the first time.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from ..engine import events as domain_events
from ..errors import PayloadError, StoreError
from ..facades import Client
from ..store import events as event_ops
from ..webhooks import WebhookDef, delivery_event_id, resolve_secret
from .problems import problem_response

__all__ = ["HOOKS_PREFIX", "install_hooks"]

log = logging.getLogger("lockgate.webhooks")

HOOKS_PREFIX = "/hooks/"
_JSON_TYPES = ("application/json",)


def install_hooks(app: FastAPI, client: Client) -> None:
    """Serve the webhooks ``client.app`` declares; ``DefinitionError`` when a secret cannot be read."""
    client.app.definitions()  # validates the webhooks with the rest
    hooks = dict(client.app.webhooks)
    secrets = {name: resolve_secret(h.verify.secret, f"webhook {name!r}") for name, h in hooks.items()}
    router = APIRouter(tags=["webhooks"])

    @router.post(HOOKS_PREFIX + "{name}", summary="Receive a signed webhook delivery")
    async def receive(name: str, request: Request) -> JSONResponse:
        hook = hooks.get(name)
        if hook is None:
            return problem_response(404, "NotFound", f"no webhook {name!r}", instance=request.url.path)
        return await _receive(client, hook, secrets[name], request)

    app.include_router(router)


async def _receive(client: Client, hook: WebhookDef, secret: bytes, request: Request) -> JSONResponse:
    path = request.url.path
    body = await request.body()
    if len(body) > hook.max_body:
        return problem_response(413, "BodyTooLarge", f"request body over {hook.max_body} bytes", instance=path)
    headers = {k.lower(): v for k, v in request.headers.items()}
    refused = hook.verify.check(headers, body, secret, client.clock.now())
    if refused is not None:
        peer = request.client.host if request.client else "?"
        log.warning("webhook %s: request from %s refused: %s", hook.name, peer, refused)
        return problem_response(401, "SignatureRefused", f"webhook {hook.name!r}: {refused}", instance=path)
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in _JSON_TYPES and not kind.endswith("+json"):
        return problem_response(415, "UnsupportedMediaType", "the body must be application/json", instance=path)
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        return problem_response(400, "InvalidRequest", f"body: malformed JSON: {exc}", instance=path)
    try:
        delivery = hook.delivery_id(headers, parsed)  # the dedupe header, or a Stripe event's body id
    except ValueError as exc:
        return problem_response(400, "InvalidRequest", str(exc), instance=path)
    event_id = None if delivery is None else delivery_event_id(hook.name, delivery)
    if event_id is not None and await client.store.read(event_ops.get_event, event_id) is not None:
        return JSONResponse({"event_id": event_id, "duplicate": True})
    try:
        data: Any = parsed if hook.transform is None else hook.transform(headers, parsed)
    except Exception as exc:  # the transform's own failure: the delivery is unusable as sent
        log.warning("webhook %s: transform raised %s", hook.name, type(exc).__name__)
        return problem_response(422, "TransformFailed", f"transform raised {type(exc).__name__}", instance=path)
    try:
        published = await domain_events.publish(
            client.app,
            client.store,
            client.clock,
            hook.event,
            None,
            data,
            source=hook.source,
            event_id=event_id,
            local=client.core.local,
        )
    except PayloadError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "payload") or "body", "message": e.get("msg")}
            for e in exc.errors
        ]
        return problem_response(422, "PayloadError", str(exc), instance=path, errors=errors)
    except StoreError:
        if event_id is not None and await client.store.read(event_ops.get_event, event_id) is not None:
            return JSONResponse({"event_id": event_id, "duplicate": True})  # a retry racing the first delivery
        raise
    client.core.published()
    return JSONResponse({"event_id": published, "duplicate": False})
