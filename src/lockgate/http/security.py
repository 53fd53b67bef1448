"""Who may call the API, and how much they may send.

Two bearer tokens give two scopes: ``LOCKGATE_TOKEN`` may read and operate,
``LOCKGATE_TOKEN_READ`` may only read (``GET``/``HEAD``). With neither set the API is open,
which ``lockgate serve``/``inspect`` allow only on a loopback address. Tokens are compared
in constant time. Bodies over ``max_body`` bytes are refused with 413 before they are read
whole. The middleware is plain ASGI so it guards every path, the OpenAPI document included.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from .problems import PROBLEM_JSON

__all__ = [
    "DEFAULT_MAX_BODY",
    "READ_TOKEN_ENV",
    "TOKEN_ENV",
    "AccessPolicy",
    "GuardMiddleware",
    "bind_refusal",
    "header_of",
    "is_loopback",
    "send_problem",
]

TOKEN_ENV = "LOCKGATE_TOKEN"
READ_TOKEN_ENV = "LOCKGATE_TOKEN_READ"
DEFAULT_MAX_BODY = 1024 * 1024
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class AccessPolicy:
    """The tokens the API accepts (``None``: that scope has no token) and the largest body it reads."""

    token: str | None = None
    read_token: str | None = None
    max_body: int = DEFAULT_MAX_BODY

    @classmethod
    def from_env(cls, *, max_body: int = DEFAULT_MAX_BODY) -> AccessPolicy:
        """Tokens from ``LOCKGATE_TOKEN`` and ``LOCKGATE_TOKEN_READ`` (empty counts as unset).

        A value of only whitespace, or with a space inside, is a ``ValueError`` naming the
        variable, as the same value in a token file is: it never serves the API open.
        """
        return cls(_token_env(TOKEN_ENV), _token_env(READ_TOKEN_ENV), max_body)

    @classmethod
    def load(
        cls, token_file: str | None = None, read_token_file: str | None = None, *, max_body: int = DEFAULT_MAX_BODY
    ) -> AccessPolicy:
        """Tokens read from ``token_file`` / ``read_token_file`` where given, else from the environment.

        A file holds one token (surrounding whitespace is ignored); ``ValueError`` names the file
        when it cannot be read or holds none, so a typo never serves the API open.
        """
        env = cls.from_env(max_body=max_body)
        token = env.token if token_file is None else _token_in(token_file)
        read = env.read_token if read_token_file is None else _token_in(read_token_file)
        return cls(token, read, max_body)

    @property
    def open(self) -> bool:
        """No token is configured: every request is allowed."""
        return self.token is None and self.read_token is None

    def scope_of(self, presented: str) -> str | None:
        """``operate``, ``read`` or ``None`` for the bearer token ``presented`` (constant-time compares)."""
        given = presented.encode()
        operate = self.token is not None and hmac.compare_digest(given, self.token.encode())
        read = self.read_token is not None and hmac.compare_digest(given, self.read_token.encode())
        if operate:
            return "operate"
        return "read" if read else None


def _token_env(name: str) -> str | None:
    value = os.environ.get(name)
    if not value:
        return None
    token = value.strip()
    if not token or any(c.isspace() for c in token):
        raise ValueError(f"{name} must hold one token (no spaces), found {len(token.split())} words")
    return token


def _token_in(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {path}: {exc}") from exc
    if not token or any(c.isspace() for c in token):
        raise ValueError(f"the token file {path} must hold one token (no spaces), found {len(token.split())} words")
    return token


def is_loopback(host: str) -> bool:
    """``host`` only accepts connections from this machine (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere


def bind_refusal(host: str, policy: AccessPolicy) -> str | None:
    """Why the API must not listen on ``host`` with ``policy``, or ``None`` when it may."""
    if is_loopback(host) or not policy.open:
        return None
    return (
        f"refusing to serve the HTTP API on {host}, which is not a loopback address, without a token: "
        f"set {TOKEN_ENV} (read and operate) and/or {READ_TOKEN_ENV} (read only), "
        "or bind to 127.0.0.1"
    )


class GuardMiddleware:
    """Checks the bearer token and scope of every HTTP request and caps its body size."""

    def __init__(
        self, app: ASGIApp, policy: AccessPolicy, let_through: Callable[[Scope], bool] | None = None
    ) -> None:
        self.app = app
        self.policy = policy
        self.let_through = let_through  # requests whose route checks a credential of its own (a stream token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._refusal(scope)
        if refused is not None:
            await _problem(send, *refused)
            return
        limit = self.policy.max_body
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _problem(send, 413, "BodyTooLarge", f"request body over {limit} bytes")
            return
        if length is None and scope["method"] not in READ_METHODS:
            # no declared length (chunked): read at most ``limit`` bytes before the app sees any
            messages = await _buffered(receive, limit)
            if messages is None:
                await _problem(send, 413, "BodyTooLarge", f"request body over {limit} bytes")
                return
            receive = _replay(messages, receive)
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        if self.policy.open or str(scope.get("path", "")).startswith(("/hooks/", "/callbacks/")):
            return None  # a webhook has its own signature (http/hooks.py), a callback its token (http/callbacks.py)
        if self.let_through is not None and scope["method"] in READ_METHODS and self.let_through(scope):
            return None
        auth = _header(scope, b"authorization") or ""
        kind, _, presented = auth.partition(" ")
        granted = self.policy.scope_of(presented.strip()) if kind.lower() == "bearer" and presented else None
        if granted is None:
            return 401, "Unauthorized", "a valid 'Authorization: Bearer <token>' header is required"
        if granted == "read" and scope["method"] not in READ_METHODS:
            return 403, "Forbidden", f"the read token cannot {scope['method']}: operating needs {TOKEN_ENV}"
        return None


async def _buffered(receive: Receive, limit: int) -> list[Message] | None:
    """The request's body messages, or ``None`` once they pass ``limit`` bytes (a body sent without length)."""
    messages: list[Message] = []
    seen = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        seen += len(message.get("body", b""))
        if seen > limit:
            return None
        if not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that hands out ``messages`` first, then whatever the client sends next (a disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def header_of(scope: Scope, name: bytes) -> str | None:
    """The value of the request header ``name`` (lower case), if sent."""
    return _header(scope, name)


async def send_problem(send: Send, status: int, name: str, detail: str) -> None:
    """Answer with a problem+json body, before the app sees the request."""
    await _problem(send, status, name, detail)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _problem(send: Send, status: int, name: str, detail: str) -> None:
    titles = {401: "Unauthorized", 403: "Forbidden", 413: "Content Too Large"}
    body = json.dumps(
        {"type": f"urn:lockgate:error:{name}", "title": titles.get(status, name), "status": status, "detail": detail}
    ).encode()
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="lockgate"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
