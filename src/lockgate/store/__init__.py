"""Stores: where runs, journals and the ledger live. Chosen by URL."""

from __future__ import annotations

from .base import Op, Row, Store, Tx

__all__ = ["Op", "Row", "Store", "Tx", "open_store"]


def open_store(url: str) -> Store:
    """The store for ``url``: ``sqlite:///file.db`` or ``postgresql://...``."""
    if url.startswith("sqlite:"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url)
    if url.startswith(("postgresql:", "postgres:")):
        from .postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]

        store: Store = PostgresStore(url)
        return store
    raise ValueError(f"unsupported store URL {url!r}: use sqlite:///path.db or postgresql://...")
