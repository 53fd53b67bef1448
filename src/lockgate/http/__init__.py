"""The HTTP surface: ``create_app(client)`` serves the inspect API, the verbs and ``/metrics``.

It reads only through ``lockgate.inspect`` and acts only through the ``Client``'s verbs.
See docs/http.md and docs/observability.md.
"""

from __future__ import annotations

from .app import API_PREFIX, create_app
from .security import DEFAULT_MAX_BODY, READ_TOKEN_ENV, TOKEN_ENV, AccessPolicy, bind_refusal, is_loopback
from .serving import DEFAULT_BIND, bind_socket, parse_bind, serve_http

__all__ = [
    "API_PREFIX",
    "DEFAULT_BIND",
    "DEFAULT_MAX_BODY",
    "READ_TOKEN_ENV",
    "TOKEN_ENV",
    "AccessPolicy",
    "bind_refusal",
    "bind_socket",
    "create_app",
    "is_loopback",
    "parse_bind",
    "serve_http",
]
