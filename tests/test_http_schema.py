"""A bounded schemathesis run over the OpenAPI document: no 5xx, and every answer matches its schema."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, settings

import lockgate as lg
from lockgate.facades import Client
from lockgate.http import AccessPolicy, bind_socket, create_app, serve_http

from .test_http import make_app

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance  # noqa: E402

# the document as the app builds it; its client is never opened
schema = schemathesis.openapi.from_dict(create_app(Client(lg.App(), "sqlite:///unopened.db")).openapi())


@contextlib.contextmanager
def serving(path: Path) -> Iterator[str]:
    """The API over a new SQLite store at ``path``, served by uvicorn from a thread of its own; its URL."""
    store = f"sqlite:///{path}"
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop = threading.Event()

    async def main() -> None:
        async with Client(make_app(), store) as client:
            await client.start("plain", {"n": 1})
            task = asyncio.create_task(serve_http(create_app(client, policy=AccessPolicy()), "127.0.0.1", port, sock))
            while not stop.is_set():
                await asyncio.sleep(0.02)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        stop.set()
        thread.join(timeout=20)


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API over a SQLite store, for the whole module."""
    with serving(tmp_path_factory.mktemp("schema") / "lockgate.db") as url:
        yield url


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_honours_its_schema(case: schemathesis.Case, live_url: str) -> None:
    case.call_and_validate(
        base_url=live_url,
        checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        timeout=30,
    )
