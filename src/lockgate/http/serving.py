"""Serving the API inside a running event loop (beside the workers of ``lockgate serve``)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI

__all__ = ["DEFAULT_BIND", "bind_socket", "parse_bind", "serve_http"]

DEFAULT_BIND = "127.0.0.1:8484"


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8484`` for IPv6) as ``(host, port)``; ``ValueError`` when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; ``OSError`` when the address is taken or not ours.

    Binding before uvicorn starts turns a taken port into an exception the caller can handle
    (uvicorn itself exits the process)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to its host process (``serve`` handles SIGINT/SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve_http(app: FastAPI, host: str, port: int, sock: socket.socket | None = None) -> None:
    """Serve ``app`` on ``host:port`` (or the bound ``sock``) in the current loop until cancelled."""
    sock = sock or bind_socket(host, port)
    config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning", access_log=False)
    server = _Server(config)
    try:
        await server.serve(sockets=[sock])
    finally:
        server.should_exit = True
        sock.close()
