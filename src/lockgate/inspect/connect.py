"""Opening a store for reading: ``connect(url)``, ``open_read_store`` (reads off a standby) and what a
store URL names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..app import App
from ..clock import Clock, SystemClock
from ..crypto import Keyring
from ..errors import ReadStoreRefused, StoreError
from ..store import Store, open_store
from ..store.workers import follow_database
from .inspector import Inspector
from .standby import check_read_store

__all__ = ["READ_STORE_FIELD", "StoreLocation", "connect", "locate", "open_read_store", "refuse_dialects"]

READ_STORE_FIELD = "read_store"
"""What ``ReadStoreRefused`` names by default: the Python option (the CLI names ``--read-store``)."""


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


def refuse_dialects(write_dialect: str, read_dialect: str, field: str = READ_STORE_FIELD) -> None:
    """Refuse (``ReadStoreRefused``) a read store on SQLite, or beside a write store on SQLite; needs no store."""
    if write_dialect != "postgres":
        raise ReadStoreRefused(field, f"a {write_dialect} store has no read store: reads off a standby need PostgreSQL")
    if read_dialect != "postgres":
        raise ReadStoreRefused(field, f"a read store is a PostgreSQL streaming standby, not a {read_dialect} database")


@asynccontextmanager
async def open_read_store(
    inspector: Inspector, store: str | Store, *, field: str = READ_STORE_FIELD
) -> AsyncIterator[Inspector]:
    """An ``Inspector`` that reads from ``store``, a streaming standby of ``inspector``'s open store (the
    write store), with its app, clock and keyring; opened read-only here, closed on exit.

    Refused at once (``ReadStoreRefused`` naming ``field``): a write store or a read store on SQLite,
    a read store that cannot be reached or holds no current lockgate schema, the primary itself,
    another primary, a standby of another server, another database or schema.
    """
    primary = inspector.store
    try:
        opened = open_store(store) if isinstance(store, str) else store
    except (ValueError, ImportError) as exc:
        raise ReadStoreRefused(field, str(exc)) from None
    refuse_dialects(primary.dialect, opened.dialect, field)
    opened.schema_mode = "read"  # every transaction read-only; nothing is created or migrated
    try:
        await opened.open()
    except StoreError as exc:
        raise ReadStoreRefused(field, f"cannot be read: {exc}") from None
    try:
        await check_read_store(primary, opened, field)
        yield Inspector(opened, inspector.app, inspector.clock, keyring=inspector.keyring, primary=primary)
    finally:
        await opened.close()
