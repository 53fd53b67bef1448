"""PostgreSQL transactions: each statement awaited (``PostgresTx``), or one repeatable write held back (``LoneTx``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import DictRow

from ..base import Row, Tx
from ..direct import DirectConnection, DirectStatement
from ..multirow import multirow
from ..sql_files import silent_queries, unprepared_queries

__all__ = ["IDLE", "PIPELINES", "Conn", "LoneTx", "NotLone", "PostgresTx", "WriterConn", "idle", "silent"]

Conn = psycopg.AsyncConnection[DictRow]
WriterConn = DirectConnection[DictRow]
_UNPREPARED = unprepared_queries("postgres")


class PostgresTx(Tx):
    """A transaction (or, for reads, an autocommit session) on one connection, each statement awaited."""

    dialect = "postgres"
    rows_in_one = True

    def __init__(self, conn: Conn, queries: dict[str, str]) -> None:
        self.conn = conn
        self._queries = queries
        self._sink: psycopg.AsyncCursor[DictRow] | None = None

    def _sql(self, name: str) -> str:
        try:
            return self._queries[name]
        except KeyError:
            raise KeyError(f"no PostgreSQL query named {name!r}") from None

    async def send(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run ``sql`` for its effect alone."""
        if self._sink is None:
            self._sink = self.conn.cursor()
        await self._sink.execute(sql, params)

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        prepare = False if name in _UNPREPARED else None  # None: the driver's own choice
        cursor = await self.conn.execute(self._sql(name), params or {}, prepare=prepare)
        result = cursor.pgresult
        if result is None or result.status != _TUPLES_OK:
            return []
        return await cursor.fetchall()

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        return await self.expect_rows(name, params, 1)

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        cursor = self.conn.cursor()
        await cursor.execute(self._sql(name), params)
        return cursor.rowcount >= n

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self.conn.cursor().executemany(self._sql(name), params)

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) < 2:
            return await self.execute(name, rows[0]) if rows else []
        out: list[Row] = []
        for sql, params in multirow(name, self._sql(name), "postgres").statements(rows):
            cursor = psycopg.AsyncRawCursor(self.conn)  # in the server's numbered form: sent unparsed
            await cursor.execute(sql, params)
            result = cursor.pgresult
            if result is not None and result.status == _TUPLES_OK:
                out += await cursor.fetchall()
        return out


class LoneTx(PostgresTx):
    """A lone op's transaction, held back: an op whose one write is a repeatable statement runs it in autocommit.

    Such a write is its own transaction: one round trip, as a bare INSERT costs. Should its
    answer be lost, the statement is run again (it is repeatable), so no transaction id is
    needed to learn its outcome. Anything else the op asks (a second statement, rows to
    read, a wake-up) raises ``NotLone`` before a byte is sent, and the batch goes the usual way.
    """

    def __init__(self, conn: Conn, queries: dict[str, str], writes: Mapping[str, DirectStatement]) -> None:
        super().__init__(conn, queries)
        self._writes = writes
        self.held: tuple[str, Mapping[str, Any], bool] | None = None  # (query, params, whether it is an expect)

    def _hold(self, name: str, params: Mapping[str, Any], expect: bool) -> None:
        if self.held is not None or name not in self._writes:
            raise NotLone()
        self.held = (name, params, expect)

    async def send(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        raise NotLone()

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self._hold(name, params or {}, False)
        return []

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        self._hold(name, params, True)
        return True  # checked once it has run: if it changed no row, the op runs again in a transaction

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        if n != 1:
            raise NotLone()
        return await self.expect(name, params)

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        raise NotLone()

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) != 1:
            raise NotLone()
        return await self.execute(name, rows[0])


class NotLone(BaseException):  # a signal between the store and its own Tx, never an error
    """The op asked more of its transaction than one repeatable write: it runs in a transaction after all."""


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
IDLE = psycopg.pq.TransactionStatus.IDLE
_PIPELINE_OFF = psycopg.pq.PipelineStatus.OFF
PIPELINES = psycopg.AsyncPipeline.is_supported()  # libpq 14 or later; else every batch runs guarded


def idle(conn: Conn) -> bool:
    """Whether ``conn`` is open, out of any transaction and statement, and out of pipeline mode."""
    pgconn = conn.pgconn
    return not conn.closed and pgconn.transaction_status == IDLE and pgconn.pipeline_status == _PIPELINE_OFF


def silent(queries: Mapping[str, str]) -> frozenset[str]:
    """The queries run for their effect alone: writes without ``RETURNING`` (no rows to wait for), and
    queries marked ``-- silent:`` (a key's lock: its row is never read)."""
    names = set(silent_queries("postgres"))
    for name, sql in queries.items():
        text = sql.upper()
        words = text.split(None, 1)
        if words and words[0] in ("INSERT", "UPDATE", "DELETE") and "RETURNING" not in text:
            names.add(name)
    return frozenset(names)
