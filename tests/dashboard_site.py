"""A live lockgate site for browser tests: an engine on a SQLite file with the HTTP API and the
dashboard served on a free port, in an event loop of its own thread.

The test thread drives a real browser (Playwright, sync API) against ``site.url`` and reaches
the engine through ``site.call(coroutine)``.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import lockgate as lg
from lockgate.facades import Engine
from lockgate.http import bind_socket, create_app, serve_http

T = TypeVar("T")

__all__ = ["Site", "wait_until"]


class Site:
    """``with Site(app) as site``: the engine and its server run until the block ends."""

    def __init__(self, app: lg.App, **http_options: Any) -> None:
        self.app = app
        self.http_options = http_options  # more arguments of create_app (stream_origins=...)
        self._dir = tempfile.TemporaryDirectory(prefix="lockgate-dash-")
        self.store_url = f"sqlite:///{Path(self._dir.name) / 'lockgate.db'}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stop: asyncio.Event | None = None
        self._main: Future[None] | None = None
        self.engine: Engine | None = None
        self.url = ""

    def __enter__(self) -> Site:
        self._thread.start()
        ready: Future[None] = Future()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        ready.result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None and self._main is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._main.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._dir.cleanup()

    async def _serve(self, ready: Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            engine = Engine(self.app, self.store_url, poll_interval=0.05)
            await engine.open()
        except BaseException as exc:
            ready.set_exception(exc)
            raise
        self.engine = engine
        sock = bind_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        web = create_app(engine.client, **self.http_options)
        server = asyncio.create_task(serve_http(web, "127.0.0.1", port, sock))
        ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            server.cancel()
            try:
                await asyncio.wait_for(server, 10)
            except (asyncio.CancelledError, TimeoutError):
                pass
            await engine.close()

    @property
    def client(self) -> lg.Client:
        assert self.engine is not None
        return self.engine.client

    def call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30) -> T:
        """Run ``make()`` in the site's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)


def wait_until(site: Site, check: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    """Wait (in the site's loop) until ``check()`` holds; ``TimeoutError`` after ``timeout`` seconds."""

    async def poll() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await check():
            if loop.time() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            await asyncio.sleep(0.05)

    site.call(poll, timeout + 5)
