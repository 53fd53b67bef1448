"""Opening a store for reading: ``connect(url)`` and what a store URL names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..app import App
from ..clock import Clock, SystemClock
from ..crypto import Keyring
from ..store import Store, open_store
from ..store.workers import follow_database
from .inspector import Inspector

__all__ = ["StoreLocation", "connect", "locate"]


@dataclass(frozen=True)
class StoreLocation:
    """What a store URL names: its dialect and, for a SQLite file, the file's path."""

    url: str
    dialect: str
    path: str | None  # None: a server, or an in-memory database


def locate(url: str) -> StoreLocation:
    """Parse and check ``url`` without connecting (``ValueError``: not a store URL; ``ImportError``:
    that store is not installed)."""
    store = open_store(url)
    path = getattr(store, "path", None) if store.dialect == "sqlite" else None
    return StoreLocation(url=url, dialect=store.dialect, path=None if path in (None, ":memory:") else str(path))


@asynccontextmanager
async def connect(
    store: str | Store, app: App | None = None, *, clock: Clock | None = None, keyring: Keyring | None = None
) -> AsyncIterator[Inspector]:
    """An ``Inspector`` on ``store`` (a URL or a store), opened (migrated) here and closed on exit.

    ``app``'s definitions are validated first, as an engine's are at boot. ``keyring`` opens the
    values of encrypted runs (default: ``LOCKGATE_ENCRYPTION_KEYS``).
    """
    app = app or App()
    app.definitions()
    opened = open_store(store) if isinstance(store, str) else store
    await opened.open()
    try:
        clock = clock or SystemClock()
        await follow_database(opened, clock)  # ages and leases read by the database's time (PostgreSQL)
        yield Inspector(opened, app, clock, keyring=keyring)
    finally:
        await opened.close()
