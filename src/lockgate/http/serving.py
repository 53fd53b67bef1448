"""Serving the API inside a running event loop (beside the workers of ``lockgate serve``)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI

__all__ = ["DEFAULT_BIND", "parse_bind", "serve_http"]

DEFAULT_BIND = "127.0.0.1:8484"


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8484`` for IPv6) as ``(host, port)``; ``ValueError`` when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to its host process (``serve`` handles SIGINT/SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve_http(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` in the current loop until cancelled."""
    config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning", access_log=False)
    server = _Server(config)
    try:
        await server.serve()
    finally:
        server.should_exit = True
