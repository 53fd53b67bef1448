"""Inbound webhooks: ``app.webhook(name, event=, verify=, transform=, dedupe=)`` and their signatures.

A provider cannot send the API's bearer token, so each hook authenticates by its own HMAC
signature over the raw body, with a secret read from an environment variable
(``"env:NAME"``) or a file (``"file:/path"``), never from the declaration itself. Checking
is pure (``HmacSignature.check``); serving is ``http/hooks.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .durations import Duration, to_seconds
from .errors import DefinitionError
from .events import EventDef
from .names import name_problem

__all__ = ["MAX_BODY", "HmacSignature", "WebhookDef", "resolve_secret", "validate_webhooks"]

MAX_BODY = 1024 * 1024
"""Bytes a hook's body may hold unless its declaration says otherwise."""

_ALGORITHMS = {"sha1", "sha256", "sha512"}


def resolve_secret(spec: str, where: str) -> bytes:
    """The secret ``spec`` names (``env:NAME`` / ``file:PATH``); ``DefinitionError`` naming its source, not it."""
    kind, _, ref = spec.partition(":")
    if kind == "env" and ref:
        value = os.environ.get(ref)
        if not value:
            raise DefinitionError(where, "verify.secret", f"environment variable {ref} is not set")
        return value.encode()
    if kind == "file" and ref:
        try:
            return Path(ref).read_text().strip().encode()
        except OSError as exc:
            raise DefinitionError(where, "verify.secret", f"cannot read {ref}: {exc.strerror}") from None
    raise DefinitionError(where, "verify.secret", "must be 'env:NAME' or 'file:/path' (the secret is never inline)")


@dataclass(frozen=True)
class HmacSignature:
    """An HMAC signature of the raw body, in ``header``, hex-encoded after ``prefix``.

    With ``timestamp_header`` the signed text is ``"{timestamp}.{body}"`` and a timestamp
    further than ``tolerance`` from now is refused (a replayed delivery). ``scheme="stripe"``
    reads Stripe's ``t=<ts>,v1=<sig>[,v1=...]`` header instead (``HmacSignature.stripe``).
    """

    header: str
    secret: str
    algorithm: str = "sha256"
    prefix: str = ""
    timestamp_header: str | None = None
    tolerance: Duration = "5m"
    scheme: str = "plain"

    @classmethod
    def stripe(cls, secret: str, *, tolerance: Duration = "5m") -> HmacSignature:
        """Stripe's documented scheme: ``Stripe-Signature: t=…,v1=…`` over ``"{t}.{body}"``, 5 minutes' tolerance."""
        return cls(header="Stripe-Signature", secret=secret, tolerance=tolerance, scheme="stripe")

    @classmethod
    def github(cls, secret: str) -> HmacSignature:
        """GitHub's documented scheme: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``."""
        return cls(header="X-Hub-Signature-256", secret=secret, prefix="sha256=")

    def problem(self) -> str | None:
        """What is wrong with the declaration (checked at boot), naming the field."""
        if not isinstance(self.header, str) or not self.header:
            return "verify.header: a header name is required"
        if not isinstance(self.secret, str) or not self.secret:
            return "verify.secret: a secret is required ('env:NAME' or 'file:/path')"
        if self.secret.partition(":")[0] not in ("env", "file") or not self.secret.partition(":")[2]:
            return "verify.secret: must be 'env:NAME' or 'file:/path' (the secret is never inline)"
        if self.algorithm not in _ALGORITHMS:
            return f"verify.algorithm: must be one of {sorted(_ALGORITHMS)}"
        if self.scheme not in ("plain", "stripe"):
            return "verify.scheme: must be 'plain' or 'stripe'"
        try:
            to_seconds(self.tolerance, what="verify.tolerance")
        except ValueError as exc:
            return str(exc)
        return None

    def check(self, headers: Mapping[str, str], body: bytes, secret: bytes, now: float) -> str | None:
        """Why the request is refused (missing, bad or stale signature), or ``None``. Constant-time compare."""
        value = headers.get(self.header.lower())
        if not value:
            return f"no {self.header} header"
        if self.scheme == "stripe":
            parts = [p.partition("=") for p in value.split(",")]
            stamp = next((v.strip() for k, _, v in parts if k.strip() == "t"), "")
            given = [v.strip() for k, _, v in parts if k.strip() == "v1"]
        else:
            stamp = "" if self.timestamp_header is None else headers.get(self.timestamp_header.lower(), "")
            if not value.startswith(self.prefix):
                return f"{self.header} does not start with {self.prefix!r}"
            given = [value[len(self.prefix) :].strip()]
        signed = body
        if self.scheme == "stripe" or self.timestamp_header is not None:
            if not stamp.isdigit():
                return "no signature timestamp"
            if abs(now - int(stamp)) > to_seconds(self.tolerance, what="tolerance"):
                return "the signature timestamp is outside the tolerance"
            signed = stamp.encode() + b"." + body
        expected = hmac.new(secret, signed, self.algorithm).hexdigest()
        # every candidate is compared, constant-time each: which one failed is not told by timing
        if not any([hmac.compare_digest(expected.encode(), g.lower().encode()) for g in given]):
            return "the signature does not match"
        return None


Transform = Callable[[Mapping[str, str], Any], Any]


@dataclass(frozen=True, eq=False)
class WebhookDef:
    """``app.webhook(...)``: ``POST /hooks/{name}`` verified by ``verify``, published as ``event``.

    ``transform(headers, body) -> data`` maps the provider's JSON to the event's data (default:
    the body as is); ``dedupe`` names the provider's delivery-id header, so that a retried
    delivery publishes once (with the Stripe preset and no ``dedupe``, the body's event ``id``
    is the delivery id: ``delivery_id``); ``max_body``: bytes accepted.
    """

    name: str
    event: EventDef
    verify: HmacSignature
    transform: Transform | None = None
    dedupe: str | None = None
    max_body: int = MAX_BODY

    @property
    def source(self) -> str:
        return f"webhook:{self.name}"

    def delivery_id(self, headers: Mapping[str, str], body: Any) -> str | None:
        """What a provider's retry of this delivery repeats (``None``: deliveries are not deduplicated).

        The ``dedupe`` header's value; with the Stripe preset and no ``dedupe``, the JSON body's
        ``id``: Stripe sends no delivery-id header, and its retries resend the same event (``evt_…``).
        ``ValueError`` naming what is missing (``headers``: lower-cased names).
        """
        if self.dedupe is not None:
            value: Any = headers.get(self.dedupe.lower())
            if not value:
                raise ValueError(f"no {self.dedupe} header")
            return str(value)
        if self.verify.scheme != "stripe":
            return None
        value = body.get("id") if isinstance(body, Mapping) else None
        if not isinstance(value, str) or not value:
            raise ValueError("body.id: a Stripe event's id is required (it is what a retried delivery repeats)")
        return value


def validate_webhooks(hooks: list[WebhookDef], events: Mapping[str, EventDef]) -> dict[str, WebhookDef]:
    """Check the app's webhooks (``DefinitionError`` naming the hook and field); them by name."""
    found: dict[str, WebhookDef] = {}
    for hook in hooks:
        where = f"webhook {hook.name!r}"
        problem = name_problem(hook.name) if isinstance(hook.name, str) and hook.name else "a webhook needs a name"
        if problem is not None or "/" in hook.name:
            raise DefinitionError(where, "name", problem or "must not contain '/'")
        if hook.name in found:
            raise DefinitionError(where, "name", "two webhooks are declared with this name")
        if not isinstance(hook.event, EventDef) or events.get(hook.event.name) is not hook.event:
            raise DefinitionError(where, "event", "must be an event declared in this app (app.event)")
        if not isinstance(hook.verify, HmacSignature):
            raise DefinitionError(where, "verify", "a signature check is required: lg.HmacSignature(...)")
        problem = hook.verify.problem()
        if problem is not None:
            field, _, why = problem.partition(": ")
            raise DefinitionError(where, field, why)
        if hook.transform is not None and not callable(hook.transform):
            raise DefinitionError(where, "transform", "must be callable (headers, body) -> data")
        if hook.dedupe is not None and (not isinstance(hook.dedupe, str) or not hook.dedupe):
            raise DefinitionError(where, "dedupe", "must name the provider's delivery-id header")
        if not isinstance(hook.max_body, int) or hook.max_body <= 0:
            raise DefinitionError(where, "max_body", "must be a positive number of bytes")
        found[hook.name] = hook
    return found


def delivery_event_id(hook: str, delivery: str) -> str:
    """The event id a delivery publishes under: the same for the provider's retries of one delivery."""
    return "evt_hook_" + hashlib.sha256(f"{hook}\x1f{delivery}".encode()).hexdigest()[:32]
