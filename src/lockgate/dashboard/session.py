"""Signing in to the dashboard when the API needs a token: a browser sends no bearer header.

``DashboardSession`` sits in front of the API's guard. Under the dashboard's prefix it turns
the ``lockgate_token`` cookie into the ``Authorization`` header the guard checks, serves the
sign-in page itself (the guard lets nothing through without a token), and sends a browser
without the cookie there. The cookie is ``HttpOnly``, ``SameSite=Strict`` and scoped to the
dashboard's path, so the API's own routes never accept it and no other site's page can use it.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, urlsplit

__all__ = ["COOKIE", "READ_ONLY", "DashboardSession", "TokenPolicy"]

COOKIE = "lockgate_token"
READ_ONLY = "lockgate_read_only"
"""The request state's flag: signed in with the read token (pages show their verbs disabled)."""
_READ_ONLY = (
    '<p class="refusal" role="alert">Signed in with the read token, which may look but not act. '
    "Sign in with the operating token (LOCKGATE_TOKEN) to use this button.</p>"
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenPolicy(Protocol):
    """What the session needs of the API's ``AccessPolicy``: whether tokens are set, and a token's scope."""

    @property
    def open(self) -> bool: ...

    def scope_of(self, presented: str) -> str | None: ...


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark"><title>Sign in · lockgate</title>
<style>body{{font:15px/1.5 system-ui,sans-serif;max-width:28em;margin:4em auto;padding:0 1em}}
input,button{{font:inherit;padding:.4em .6em}}label{{display:block;margin:.8em 0 .3em}}
.refusal{{border-left:4px solid #cf222e;padding:.4em .8em}}</style></head>
<body><main><h1>lockgate</h1>
<p>This dashboard needs the API's token (LOCKGATE_TOKEN, or LOCKGATE_TOKEN_READ to read only).</p>
{problem}<form method="post" action="{action}"><input type="hidden" name="next" value="{next}">
<label for="token">Token</label><input id="token" name="token" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button></form></main></body></html>"""


class DashboardSession:
    """Sign-in for the dashboard's pages under ``prefix`` when ``policy`` asks for a token."""

    def __init__(self, app: ASGIApp, policy: TokenPolicy, prefix: str) -> None:
        self.app = app
        self.policy = policy
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = str(scope.get("root_path", ""))
        path = str(scope.get("path", ""))
        if root and path.startswith(root):  # mounted in another app: paths are the app's own below its root
            path = path[len(root) :]
        if (
            scope["type"] != "http"
            or self.policy.open
            or not (path == self.prefix or path.startswith(self.prefix + "/"))
        ):
            await self.app(scope, receive, send)
            return
        base = root + self.prefix
        if path == f"{self.prefix}/login":
            await self._login(scope, receive, send, base)
            return
        headers = list(scope.get("headers", ()))
        if any(k.lower() == b"authorization" for k, _ in headers):
            await self.app(scope, receive, send)
            return
        token = _cookie(headers)
        if token is None:
            if scope["method"] in ("GET", "HEAD"):
                target = base + path[len(self.prefix) :]
                query = scope.get("query_string", b"").decode("latin-1")
                await _redirect(send, f"{base}/login?next={quote(target + ('?' + query if query else ''))}")
                return
            await self.app(scope, receive, send)  # the guard answers 401
            return
        granted = self.policy.scope_of(token)
        if granted == "read" and scope["method"] not in ("GET", "HEAD"):
            # a page saying why, with the sign-in to switch tokens, rather than the API's 403 problem
            await _page(send, 403, base, _next(_referer(headers), base), _READ_ONLY)
            return
        headers.append((b"authorization", f"Bearer {token}".encode("latin-1")))
        state = {**scope.get("state", {}), READ_ONLY: granted == "read"}  # the pages show their buttons disabled
        await self.app({**scope, "headers": headers, "state": state}, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send, base: str) -> None:
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if scope["method"] != "POST":
            await _page(send, 200, base, _next(query.get("next", ""), base), "")
            return
        form = dict(parse_qsl((await _body(receive)).decode("utf-8", "replace")))
        target = _next(form.get("next", ""), base)
        token = form.get("token", "").strip()
        if not token or self.policy.scope_of(token) is None:
            await _page(send, 401, base, target, '<p class="refusal" role="alert">That token is not accepted.</p>')
            return
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = f"{COOKIE}={quote(token, safe='')}; Path={base}; HttpOnly; SameSite=Strict{secure}"
        await _redirect(send, target, [(b"set-cookie", cookie.encode("latin-1"))])


def _cookie(headers: list[tuple[bytes, bytes]]) -> str | None:
    for key, value in headers:
        if key.lower() == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            jar.load(value.decode("latin-1"))
            if COOKIE in jar and jar[COOKIE].value:
                return jar[COOKIE].value
    return None


def _referer(headers: list[tuple[bytes, bytes]]) -> str:
    """The path of the page a form was sent from (where to return once signed in with another token)."""
    for key, value in headers:
        if key.lower() == b"referer":
            return urlsplit(value.decode("latin-1")).path
    return ""


def _next(target: str, base: str) -> str:
    """Where to go after signing in: a dashboard path only (never another site)."""
    return target if target.startswith(base + "/") and not target.startswith("//") else f"{base}/runs"


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False) or sum(map(len, chunks)) > 64 * 1024:
            return b"".join(chunks)


async def _page(send: Send, status: int, base: str, target: str, problem: str) -> None:
    body = _PAGE.format(problem=problem, action=html.escape(f"{base}/login"), next=html.escape(target)).encode()
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0"), *(extra or [])]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
