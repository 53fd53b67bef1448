"""Writing in the caller's own SQLite transaction: ``conn=`` on a start or a publish (``Store.join``).

The caller's ``sqlite3.Connection`` on the store's very file runs the ops in its open
transaction (under a savepoint, so one that raises undoes only itself); they commit or
roll back with the caller's rows. SQLite has one writer: while the caller's transaction
is open after the start, it holds the file's write lock, and every other writer, the
store's own included, waits for its COMMIT (up to its busy timeout). Keep it short.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..errors import ForeignTransaction, StoreError
from .base import Joined, Outcome, Tx
from .foreign import describe, driver_connection
from .ledger import ledger_for_ticket

__all__ = ["join_sqlite"]

_SAVEPOINT = "lockgate_join"
_LEGACY = getattr(sqlite3, "LEGACY_TRANSACTION_CONTROL", -1)  # the sqlite3 module's default mode (3.12's name)


class _JoinedSQLite(Joined):
    def __init__(self, conn: sqlite3.Connection, tx: Tx, read: Callable[..., Any]) -> None:
        self.tx = tx
        self._conn = conn
        self._read = read

    async def outcome(self, ticket: str) -> Outcome:
        if await self._read(ledger_for_ticket, ticket):
            return "committed"
        try:
            if not self._conn.in_transaction:
                # Ended; a COMMIT that raced the read above shows now.
                return "committed" if await self._read(ledger_for_ticket, ticket) else "rolled back"
            # A transaction is open on it: ours (it sees its own row), or a later one after ours rolled back.
            seen = self._conn.execute("SELECT 1 FROM lockgate_ledger WHERE ticket = ? LIMIT 1", (ticket,)).fetchone()
        except sqlite3.ProgrammingError:  # closed, or owned by another thread: known only by the store's reads
            return "committed" if await self._read(ledger_for_ticket, ticket) else "open"
        if seen is not None:
            return "open"
        return "committed" if await self._read(ledger_for_ticket, ticket) else "rolled back"


@contextlib.asynccontextmanager
async def join_sqlite(
    path: str, make_tx: Callable[[sqlite3.Connection], Tx], read: Callable[..., Any], conn: Any
) -> AsyncIterator[Joined]:
    """Run ops on ``conn``, a connection to ``path`` inside a transaction (the ``Store.join`` of SQLite)."""
    raw = await driver_connection(conn)
    if not isinstance(raw, sqlite3.Connection):
        raise ForeignTransaction(f"conn= is a {describe(raw)}, not a sqlite3 connection to this store's file ({path})")
    try:
        files = {row[1]: row[2] for row in raw.execute("PRAGMA database_list").fetchall()}
    except sqlite3.ProgrammingError as exc:
        raise ForeignTransaction(f"conn= cannot be used: {exc}") from None
    theirs = files.get("main") or ":memory:"
    if not _same_file(theirs, path):
        raise ForeignTransaction(
            f"conn= is connected to SQLite database {theirs}, not to this store's file {path}: the start would "
            "not be atomic with it. Use the idempotency key or an outbox (docs/transactions.md)"
        )
    if not raw.in_transaction:
        if raw.isolation_level is None or getattr(raw, "autocommit", _LEGACY) != _LEGACY:
            raise ForeignTransaction(
                f"conn= (SQLite {theirs}) is outside a transaction: open one first ('BEGIN' or a write "
                "in the sqlite3 module's default mode)"
            )
        # The sqlite3 module's default mode opens a transaction before the next write: that is this one.
        raw.execute(f"BEGIN {raw.isolation_level}")
    raw.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        yield _JoinedSQLite(raw, make_tx(raw), read)
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            raw.execute(f"ROLLBACK TO {_SAVEPOINT}")
            raw.execute(f"RELEASE {_SAVEPOINT}")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"writing in the caller's SQLite transaction failed: {exc}") from exc
        raise
    try:
        raw.execute(f"RELEASE {_SAVEPOINT}")
    except sqlite3.Error as exc:
        raise StoreError(f"leaving the caller's SQLite transaction failed: {exc}") from exc


def _same_file(theirs: str, ours: str) -> bool:
    if not theirs or theirs == ":memory:" or ours == ":memory:":
        return False
    try:
        return os.path.samefile(theirs, ours)
    except OSError:
        return False
