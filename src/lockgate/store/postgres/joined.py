"""Writing in the caller's own transaction: ``conn=`` on a start or a publish (``Store.join``).

The caller's psycopg 3 connection (async or sync), inside its own transaction on this
store's database, runs the ops itself: they commit or roll back with the caller's data,
and the wake-ups their rows raise (the triggers of migration 0003) are delivered by
PostgreSQL at that COMMIT, to every process. The ops run under a savepoint, so one that
raises undoes only itself, and with ``search_path`` set to the store's schema for their
span (``SET LOCAL``-like, restored before the savepoint is released). The gate's key
locks (``pg_advisory_xact_lock``) are the transaction's: held until the caller ends it.

One round trip on entry (savepoint, search path, and what tells the database and the
transaction apart), one on exit, plus the ops' own statements, each awaited.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ...errors import ForeignTransaction, StoreError
from ..base import Joined, Outcome, Row, Tx
from ..foreign import describe, driver_connection
from ..ledger import ledger_for_ticket
from ..multirow import multirow
from .connections import Connections
from .failures import first_line
from .tx import PostgresTx

__all__ = ["Joining"]

_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_INTRANS = psycopg.pq.TransactionStatus.INTRANS
_IDLE = psycopg.pq.TransactionStatus.IDLE
_SAVEPOINT = "lockgate_join"
# Where the database is, and the transaction (its id, assigned now: the ops write anyway).
_ENTER = (
    f"SAVEPOINT {_SAVEPOINT}; SELECT current_setting('search_path') AS old_path, "
    "set_config('search_path', {path}, true) AS path, current_database() AS db, "
    "extract(epoch FROM pg_postmaster_start_time())::text AS started, pg_current_xact_id()::text AS xid"
)
_UNDO = f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; RELEASE SAVEPOINT {_SAVEPOINT}"
_IDENTITY = "SELECT current_database() AS db, extract(epoch FROM pg_postmaster_start_time())::text AS started"


class _Driver:
    """The caller's connection, async or sync, behind one awaitable face."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sync = isinstance(conn, psycopg.Connection)

    async def rows(self, query: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> list[Row]:
        cursor = self.conn.cursor(row_factory=dict_row)
        if self.sync:
            cursor.execute(query, params)
        else:
            await cursor.execute(query, params)
        return await self._fetch(cursor)

    async def raw_rows(self, query: str, params: Sequence[Any]) -> list[Row]:
        """A statement in the server's numbered form (``multirow``): sent as written."""
        if self.sync:
            cursor: Any = psycopg.RawCursor(self.conn, row_factory=dict_row)
            cursor.execute(query, params)
        else:
            cursor = psycopg.AsyncRawCursor(self.conn, row_factory=dict_row)
            await cursor.execute(query, params)
        return await self._fetch(cursor)

    async def count(self, query: str, params: Mapping[str, Any]) -> int:
        cursor = self.conn.cursor()
        if self.sync:
            cursor.execute(query, params)
        else:
            await cursor.execute(query, params)
        return int(cursor.rowcount)

    async def many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        cursor = self.conn.cursor()
        if self.sync:
            cursor.executemany(query, params)
        else:
            await cursor.executemany(query, params)

    async def script(self, text: str) -> list[Row]:
        """Several statements without parameters; the rows of the last one."""
        cursor = self.conn.cursor(row_factory=dict_row)
        if self.sync:
            cursor.execute(text)
        else:
            await cursor.execute(text)
        while cursor.nextset():
            pass
        return await self._fetch(cursor)

    async def _fetch(self, cursor: Any) -> list[Row]:
        result = cursor.pgresult
        if result is None or result.status != _TUPLES_OK:
            return []
        fetched = cursor.fetchall()
        return list(fetched if self.sync else await fetched)


class _CallerTx(Tx):
    """The caller's transaction as the ops see it: named queries, each statement awaited."""

    dialect = "postgres"
    rows_in_one = True

    def __init__(self, driver: _Driver, queries: dict[str, str]) -> None:
        self._driver = driver
        self._queries = queries

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return await self._driver.rows(self._queries[name], params or {})

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        return await self.expect_rows(name, params, 1)

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        return await self._driver.count(self._queries[name], params) >= n

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self._driver.many(self._queries[name], params)

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) < 2:
            return await self.execute(name, rows[0]) if rows else []
        out: list[Row] = []
        for text, params in multirow(name, self._queries[name], "postgres").statements(rows):
            out += await self._driver.raw_rows(text, params)
        return out


class _JoinedPostgres(Joined):
    def __init__(self, store: Joining, tx: _CallerTx, xid: str) -> None:
        self.tx = tx
        self._store = store
        self._xid = xid

    async def outcome(self, ticket: str) -> Outcome:
        return await self._store.read(_outcome, ticket, self._xid)


async def _outcome(tx: Tx, ticket: str, xid: str) -> Outcome:
    if await ledger_for_ticket(tx, ticket):
        return "committed"
    assert isinstance(tx, PostgresTx)
    cursor = await tx.conn.execute("SELECT pg_xact_status(%s::xid8) AS status", (xid,))
    row = await cursor.fetchone()
    status = None if row is None else row["status"]
    if status == "in progress":
        return "open"
    # Committed without the row (the caller rolled its savepoint back), aborted, or long forgotten.
    return "committed" if await ledger_for_ticket(tx, ticket) else "rolled back"


class Joining(Connections):
    """``Store.join`` for PostgreSQL: the ops run on the caller's connection, in its transaction."""

    schema: str | None  # the store's own schema (``?schema=``); else learnt from its connections
    _queries: dict[str, str]
    _identity: tuple[str, str] | None  # (database, server start) as the store's own connections see them

    @contextlib.asynccontextmanager
    async def join(self, conn: Any) -> AsyncIterator[Joined]:
        raw = await driver_connection(conn)
        if not isinstance(raw, (psycopg.AsyncConnection, psycopg.Connection)):
            raise ForeignTransaction(
                f"conn= is a {describe(raw)}, not a psycopg 3 connection to this store's database ({self._where})"
            )
        status = raw.info.transaction_status
        if raw.closed or not (status == _INTRANS or (status == _IDLE and not raw.autocommit)):
            what = "in autocommit outside a transaction" if status == _IDLE else "not in a usable transaction"
            raise ForeignTransaction(
                f"conn= ({_where(raw)}) is {'closed' if raw.closed else what}: begin a transaction on it first "
                "(e.g. 'async with conn.transaction():')"
            )
        driver = _Driver(raw)
        schema = await self._schema()
        try:
            enter = sql.SQL(_ENTER).format(path=sql.Literal(_quoted(schema))).as_string(raw)
            (state,) = await driver.script(enter)
        except psycopg.Error as exc:
            raise StoreError(f"joining the caller's transaction failed: {first_line(exc)}") from exc
        try:
            if (state["db"], state["started"]) != await self._own_identity(fresh=False) and (
                state["db"],
                state["started"],
            ) != await self._own_identity(fresh=True):
                raise ForeignTransaction(
                    f"conn= is connected to database {state['db']!r} at {_where(raw)}, not to this store's "
                    f"database ({self._where}): the start would not be atomic with it. Use the idempotency key "
                    "or an outbox (docs/transactions.md)"
                )
            yield _JoinedPostgres(self, _CallerTx(driver, self._queries), state["xid"])
        except BaseException as exc:
            with contextlib.suppress(psycopg.Error):
                await driver.script(_UNDO)  # the search path and the ops' writes with it
            if isinstance(exc, psycopg.Error):
                raise StoreError(f"writing in the caller's transaction failed: {first_line(exc)}") from exc
            raise
        restore = sql.SQL("SELECT set_config('search_path', {old}, true); RELEASE SAVEPOINT {name}").format(
            old=sql.Literal(state["old_path"]), name=sql.Identifier(_SAVEPOINT)
        )
        try:
            await driver.script(restore.as_string(raw))
        except psycopg.Error as exc:
            raise StoreError(f"leaving the caller's transaction failed: {first_line(exc)}") from exc

    async def _schema(self) -> str:
        if self.schema is None:
            self.schema = str(await self.read(_current_schema))
        return self.schema

    async def _own_identity(self, *, fresh: bool) -> tuple[str, str]:
        """The store's database and its server's start time (read again when ``fresh``: a restart changes it)."""
        if self._identity is None or fresh:
            row = await self.read(_identity)
            self._identity = (row["db"], row["started"])
        return self._identity


async def _current_schema(tx: Tx) -> str:
    assert isinstance(tx, PostgresTx)
    cursor = await tx.conn.execute("SELECT current_schema() AS schema")
    found = await cursor.fetchone()
    assert found is not None
    return str(found["schema"])


async def _identity(tx: Tx) -> Row:
    assert isinstance(tx, PostgresTx)
    cursor = await tx.conn.execute(_IDENTITY)
    found = await cursor.fetchone()
    assert found is not None
    return dict(found)


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def _where(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> str:
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"
