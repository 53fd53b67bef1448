"""Approval tokens: a run waits for a person (or a system) who holds nothing but a token.

``ctx.create_token`` makes a ``CallbackToken``: an opaque secret of 256 random bits and the
URL that completes it. The store keeps only the secret's SHA-256 (``token_hash``): a leaked
database completes nothing. Whoever holds the token completes it with a JSON payload
(``POST /callbacks/{token}``, ``client.complete_token``), or rejects it
(``client.reject_token``); ``ctx.wait_for_token`` returns the payload, or raises
``TokenRejected``, or ``TokenExpired`` once the token's timeout passes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from .errors import InvalidArgument, LockgateError

__all__ = [
    "CALLBACKS_PREFIX",
    "PUBLIC_URL_ENV",
    "TOKEN_PREFIX",
    "CallbackToken",
    "TokenError",
    "TokenExpired",
    "TokenGone",
    "TokenRejected",
    "TokenUsed",
    "UnknownToken",
    "callback_url",
    "check_base_url",
    "new_token",
    "public_url_from_env",
    "token_hash",
    "without_secret",
]

CALLBACKS_PREFIX = "/callbacks/"
PUBLIC_URL_ENV = "LOCKGATE_PUBLIC_URL"
TOKEN_PREFIX = "lgcb_"
_SECRET_BYTES = 32  # 256 bits from the operating system's generator
_MAX_TOKEN = 128  # longer than any token made here: refused before it is hashed


class TokenError(LockgateError):
    """A token could not be completed (the HTTP status says why: ``status``)."""

    status = 409


class UnknownToken(TokenError):
    """No pending token has that secret: never made, mistyped, tampered with, or forgotten."""

    status = 404

    def __init__(self) -> None:
        super().__init__("no such callback token")


class TokenGone(TokenError):
    """The token can no longer be completed: its run ended."""

    status = 410


class TokenExpired(TokenGone):
    """The token's timeout passed before it was completed (raised in the body by ``ctx.wait_for_token``)."""

    def __init__(self, name: str, token_id: str = "") -> None:
        super().__init__(f"callback token {name!r} expired")
        self.name = name
        self.token_id = token_id


class TokenUsed(TokenError):
    """A single-use token was completed already; the second completion changed nothing."""

    status = 409

    def __init__(self, name: str) -> None:
        super().__init__(f"callback token {name!r} was completed already")
        self.name = name


class TokenRejected(LockgateError):
    """The token was completed with a rejection (``client.reject_token``); raised by ``ctx.wait_for_token``."""

    def __init__(self, name: str, reason: str | None) -> None:
        super().__init__(f"callback token {name!r} was rejected" + (f": {reason}" if reason else ""))
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class CallbackToken:
    """A token a body made with ``ctx.create_token``: hand ``token`` or ``url`` to whoever decides.

    ``id`` names the token to operators (the dashboard, events) and is no credential; ``token``
    is the secret, kept out of ``repr`` (and so is ``url``, which holds it). ``url`` is ``None``
    when no public URL is configured (``Engine(public_url=)``, ``LOCKGATE_PUBLIC_URL``,
    ``lockgate serve --public-url``); ``path`` is always there.
    """

    name: str
    id: str
    token: str = field(repr=False)
    url: str | None = field(repr=False)
    expires_at: datetime | None
    single_use: bool = True
    model: type[BaseModel] | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> str:
        return CALLBACKS_PREFIX + self.token

    def to_dict(self) -> dict[str, Any]:
        """As journaled: everything but the model."""
        at = None if self.expires_at is None else self.expires_at.timestamp()
        return {
            "name": self.name,
            "id": self.id,
            "token": self.token,
            "url": self.url,
            "expires_at": at,
            "single_use": self.single_use,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], model: type[BaseModel] | None) -> CallbackToken:
        at = data.get("expires_at")
        expires = None if at is None else datetime.fromtimestamp(float(at), UTC)
        return cls(data["name"], data["id"], data["token"], data.get("url"), expires, bool(data["single_use"]), model)


def without_secret(output: Any) -> Any:
    """A ``create_token`` journal entry's output as surfaces show it: the secret and its URL hidden."""
    if isinstance(output, dict) and "token" in output:
        return {**output, "token": "(hidden)", "url": None if output.get("url") is None else "(hidden)"}
    return output


def new_token() -> str:
    """A fresh secret: ``lgcb_`` and 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def token_hash(token: str) -> str:
    """What the store keeps of ``token``: its SHA-256, hex. ``UnknownToken`` for what no token looks like."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > _MAX_TOKEN:
        raise UnknownToken()
    return hashlib.sha256(token.encode()).hexdigest()


def check_base_url(url: str | None, *, what: str = "public_url") -> str | None:
    """``url`` without its trailing slash; ``InvalidArgument`` unless it is an http(s) URL."""
    if url is None or url == "":
        return None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
        raise InvalidArgument(f"{what} must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def public_url_from_env() -> str | None:
    """``LOCKGATE_PUBLIC_URL``, checked (``None`` when unset)."""
    return check_base_url(os.environ.get(PUBLIC_URL_ENV), what=PUBLIC_URL_ENV)


def callback_url(base: str | None, token: str) -> str | None:
    """The URL that completes ``token`` under ``base`` (``None`` without one)."""
    return None if base is None else base + CALLBACKS_PREFIX + token
