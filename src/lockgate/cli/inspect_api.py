"""``lockgate inspect --store URL``: serve the HTTP inspect API without running any workflow.

For an operator's machine against a shared database: reads and verbs only, no workers and
no sweeps. ``--app`` lends the declared models (payload validation, concurrency limits).
``--read-store`` serves the reads from a streaming standby (docs/postgres.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import click

from ..app import App
from ..http import AccessPolicy, create_app, serve_http
from .common import (
    app_option,
    file_replaced,
    load_app,
    open_client,
    open_reads,
    read_store_beside,
    read_store_option,
    run_async,
    sqlite_path,
    store_option,
)
from .groups import cli
from .output import display_url
from .serve import access_policy, check_http_bind, http_options

__all__: list[str] = []

log = logging.getLogger("lockgate.inspect")


async def _serve(
    app: App, store: str, host: str, port: int, policy: AccessPolicy, read_store: str | None = None
) -> bool:
    """Serve until SIGINT/SIGTERM (``False``) or until the SQLite file is replaced (``True``)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    replaced = await _serve_file(app, store, host, port, policy, stop, sqlite_path(store), read_store)
    log.info("HTTP API stopped")
    return replaced


async def _serve_file(
    app: App,
    store: str,
    host: str,
    port: int,
    policy: AccessPolicy,
    stop: asyncio.Event,
    path: str | None,
    read_store: str | None = None,
) -> bool:
    """Serve until ``stop`` (``False``) or, on SQLite, until the file is replaced (``True``).

    A connection keeps reading the file it opened, deleted or not: a re-run demo would otherwise
    leave this process showing the runs of a database that no longer exists.
    """
    async with open_client(app, store) as client, open_reads(client, read_store) as reads:
        client.source = "http"
        if read_store is not None:
            log.info("reads served from the standby %s", display_url(read_store))
        log.info(
            "HTTP API for %s on http://%s:%d/api/v1, dashboard on http://%s:%d/ui (no workers)",
            display_url(store),
            host,
            port,
            host,
            port,
        )
        server = asyncio.create_task(serve_http(create_app(client, policy=policy, reads=reads), host, port))
        stopper = asyncio.create_task(stop.wait())
        tasks = {server, stopper}
        replaced = None
        if path is not None:
            replaced = asyncio.create_task(file_replaced(path))
            tasks.add(replaced)
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if server in done and server.exception() is not None:
            raise click.ClickException(f"the HTTP server stopped: {server.exception()!r}")
    return replaced is not None and replaced in done and not stop.is_set()


@cli.command("inspect")
@store_option
@read_store_option
@app_option(required=False, purpose="payload models and concurrency limits")
@http_options
def inspect_api(
    store: str,
    read_store: str | None,
    app_ref: str | None,
    http_bind: str,
    no_http: bool,
    token_file: str | None,
    read_token_file: str | None,
) -> None:
    """Serve the HTTP inspect API over STORE without running workers, until SIGINT or SIGTERM."""
    if no_http:
        raise click.UsageError("inspect only serves the HTTP API: drop --no-http")
    read_store_beside(store, read_store)
    policy = access_policy(token_file, read_token_file)
    bind = check_http_bind(http_bind, policy)
    assert bind is not None
    app = load_app(app_ref)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if run_async(_serve(app, store, *bind, policy, read_store)):
        # start afresh on the new file: nothing of the old one's connections, caches or server is kept
        log.info("the database file %s was replaced: serving the new one", sqlite_path(store))
        os.execv(sys.executable, [sys.executable, "-m", "lockgate.cli", *sys.argv[1:]])
