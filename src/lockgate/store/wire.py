"""A group commit's transaction sent through libpq's pipeline mode by hand.

psycopg's pipeline object spends, on each statement, a cursor, the query's conversion and
two waits on the socket around a send of its own: about three times the CPU of the whole
transaction sent this way (``python -m bench.wire``). Here every statement is queued in
libpq's output buffer, its parameters adapted by psycopg's own ``Transformer`` (so every
type travels as psycopg would send it), each distinct text prepared on first use under a
name of this connection's own; the buffer goes out, and the answers come back, only when
an op reads rows, when the transaction must learn whether its checks held, and at COMMIT.

A statement's failure aborts the rest of its pipeline segment, as in psycopg's
pipeline: the first error is raised at the next exchange. A failure of the connection,
or a cancellation with answers still unread, closes the connection: its state is no
longer known.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .base import Row, Tx
from .direct import DirectConnection, numbered
from .multirow import multirow

__all__ = ["XID", "Unmet", "WireTx"]

_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_BAD = pq.ConnStatus.BAD
XID = "SELECT pg_current_xact_id_if_assigned()::text AS xid"
"""The transaction's id, once it has one: what resolves a COMMIT whose answer was lost."""
_XID = XID.encode()
_MOST_PLANS = 400  # statements prepared on one connection at most; past this they are sent unnamed

# What each statement sent is waiting for: its answer's use.
_SILENT, _CHECK, _ROWS, _PREPARE, _PROBE = range(5)


class Unmet(Exception):
    """A check (``Tx.expect``) changed fewer rows than it needed: the batch runs again, guarded."""


@functools.lru_cache(maxsize=1024)
def _parsed(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` in the server's ``$n`` form and its parameters' names in order (see ``direct.numbered``)."""
    text, names = numbered(sql)
    return text, tuple(names)


@functools.lru_cache(maxsize=64)
def _auto(n: int) -> list[PyFormat]:
    return [PyFormat.AUTO] * n


class _Plan:
    """A statement prepared (or being prepared) on one connection; forgotten if the server refuses it."""

    __slots__ = ("key", "name")

    def __init__(self, key: tuple[bytes, tuple[int, ...]], name: bytes) -> None:
        self.key, self.name = key, name


class WireTx(Tx):
    """The writer's optimistic attempt at a batch: one transaction whose statements are pipelined.

    Use as ``async with``: it enters pipeline mode and leaves it, or closes the connection
    when it cannot know what is left on it. Statements whose rows nobody reads and checks
    are only queued; ``execute`` of a query with rows, ``sync`` and ``commit`` send what is
    queued and read every answer. Until the transaction's id is known, each ``sync`` also
    asks for it: a COMMIT whose answer is lost is resolved from it.
    """

    dialect = "postgres"
    rows_in_one = True

    def __init__(self, conn: DirectConnection[Any], queries: Mapping[str, str], silent: frozenset[str]) -> None:
        self.conn = conn
        self._pgconn = conn.pgconn
        self._queries = queries
        self._silent = silent
        self._encoding = conn.info.encoding
        self._dumper = Transformer(conn)
        self._plans: dict[tuple[bytes, tuple[int, ...]], _Plan] = conn.plans
        self._sent: list[tuple[int, Any]] = []  # (what the answer is for, its holder), in the order sent
        self.xid: str | None = None  # the transaction's id, once it has one and an exchange brought it back
        self.unmet = False  # whether a check changed fewer rows than it needed
        self._committing: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self.sent_commit: list[Callable[[], None]] = []  # the ``undone`` of each ``sent`` called: the writer's to call

    async def __aenter__(self) -> WireTx:
        self._pgconn.enter_pipeline_mode()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sent or self._pgconn.status == _BAD:
            await self.conn.close()  # answers left unread, or no connection: nothing more can be said of it
            return
        try:
            self._pgconn.exit_pipeline_mode()
        except psycopg.Error:
            await self.conn.close()
            if exc is None:
                raise

    # -- sending ------------------------------------------------------------------------

    def _sql(self, name: str) -> str:
        try:
            return self._queries[name]
        except KeyError:
            raise KeyError(f"no PostgreSQL query named {name!r}") from None

    def _queue(self, sql: str, params: Mapping[str, Any] | None, use: int, holder: Any = None) -> None:
        text, names = _parsed(sql)
        if not names:
            self._pgconn.send_query_params(text.encode(self._encoding), None)
            self._sent.append((use, holder))
            return
        if params is None:
            raise KeyError(f"query needs parameters {', '.join(names)}")
        self._queue_values(text, [params[name] for name in names], use, holder)

    def _queue_values(self, text: str, values: Sequence[Any], use: int, holder: Any = None) -> None:
        """Queue ``text`` (in ``$n`` form) with ``values``; prepared on this connection on its first use."""
        dumper = self._dumper
        buffers = dumper.dump_sequence(values, _auto(len(values)))
        types: tuple[int, ...] = dumper.types or ()
        formats = dumper.formats
        sql = text.encode(self._encoding)
        key = (sql, types)
        plan = self._plans.get(key)
        pgconn = self._pgconn
        if plan is None and len(self._plans) < _MOST_PLANS:
            plan = self._plans[key] = _Plan(key, b"lockgate_w%d" % self.conn.next_plan())
            pgconn.send_prepare(plan.name, sql, param_types=types)
            self._sent.append((_PREPARE, plan))
        if plan is None:
            pgconn.send_query_params(sql, buffers, param_types=types, param_formats=formats)
        else:
            pgconn.send_query_prepared(plan.name, buffers, param_formats=formats)
        self._sent.append((use, holder))

    async def send(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Queue ``sql`` (``%(name)s`` parameters) for its effect alone."""
        self._queue(sql, params, _SILENT)

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        if name in self._silent:
            self._queue(self._sql(name), params, _SILENT)
            return []
        holder: list[pq.abc.PGresult] = []
        self._queue(self._sql(name), params, _ROWS, holder)
        await self.sync()  # its rows are read now: one round trip, carrying all queued before it
        return self._rows(holder[0]) if holder else []

    async def execute_all(self, queries: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[list[Row]]:
        holders: list[list[pq.abc.PGresult] | None] = []
        for name, params in queries:
            if name in self._silent:
                self._queue(self._sql(name), params, _SILENT)
                holders.append(None)
            else:
                holders.append([])
                self._queue(self._sql(name), params, _ROWS, holders[-1])
        await self.sync()  # every query's rows in one round trip
        return [self._rows(holder[0]) if holder else [] for holder in holders]

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        return await self.expect_rows(name, params, 1)

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        self._queue(self._sql(name), params, _CHECK, n)
        return True  # checked at the next exchange

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        sql = self._sql(name)
        for one in params:
            self._queue(sql, one, _SILENT)

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) < 2:
            return await self.execute(name, rows[0]) if rows else []
        silent = name in self._silent
        holders: list[list[pq.abc.PGresult]] = []
        for text, values in multirow(name, self._sql(name), "postgres").statements(rows):
            holders.append([])  # each chunk is already in the server's numbered form
            self._queue_values(text, values, _SILENT if silent else _ROWS, holders[-1])
        if silent:
            return []
        await self.sync()  # every chunk's rows in one round trip
        return [row for holder in holders if holder for row in self._rows(holder[0])]

    def _rows(self, result: pq.abc.PGresult) -> list[Row]:
        if result.status != _TUPLES_OK:
            return []
        loader = Transformer(self.conn)
        loader.set_pgresult(result)
        fields = [(result.fname(i) or b"").decode(self._encoding) for i in range(result.nfields)]
        return loader.load_rows(0, result.ntuples, lambda values: dict(zip(fields, values, strict=True)))

    # -- exchanging ---------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Whether every check sent has been answered."""
        return all(use != _CHECK for use, _ in self._sent)

    async def sync(self) -> None:
        """Have everything queued answered (asking for the transaction's id until known); ``Unmet``: a check failed."""
        await self._exchange(probe=self.xid is None)
        if self.unmet:
            raise Unmet()  # kept: an op catching the exception must not let the attempt commit

    def when_committing(self, sent: Callable[[], None], undone: Callable[[], None]) -> bool:
        self._committing.append((sent, undone))
        return True

    async def commit(self) -> None:
        """Send COMMIT with whatever is still queued, and read every answer."""
        await self.send("COMMIT")
        committing, self._committing = self._committing, []
        for sent, undone in committing:
            self.sent_commit.append(undone)
            sent()
        await self._exchange(probe=False)

    async def rollback(self) -> None:
        """Read what is in flight (its errors are moot now), then roll back."""
        try:
            await self._exchange(probe=False)
        except psycopg.OperationalError:
            raise
        except psycopg.Error:
            pass
        await self.send("ROLLBACK")
        await self._exchange(probe=False)

    async def drain(self) -> None:
        """Read what is in flight, raising the first statement's failure among it."""
        await self._exchange(probe=False)

    async def _exchange(self, *, probe: bool) -> None:
        """Send a sync point with everything queued, then read every answer up to it."""
        pgconn = self._pgconn
        if probe:
            pgconn.send_query_params(_XID, None)
            self._sent.append((_PROBE, None))
        if not self._sent:
            return
        pgconn.pipeline_sync()
        await self.conn.flushed()
        failure: pq.abc.PGresult | None = None
        sent, self._sent = self._sent, []
        try:
            for use, holder in sent:
                result = await self._next()
                status = result.status
                if status == _COMMAND_OK or status == _TUPLES_OK:
                    if use == _CHECK:
                        if result.command_tuples is None or result.command_tuples < holder:
                            self.unmet = True
                    elif use == _ROWS:
                        holder.append(result)
                    elif use == _PROBE:
                        value = result.get_value(0, 0) if result.ntuples else None
                        if value is not None:
                            self.xid = bytes(value).decode()
                elif status == _FATAL_ERROR or status == _ABORTED:
                    if use == _PREPARE:
                        self._forget(holder)
                    if failure is None and status == _FATAL_ERROR:
                        failure = result
                else:
                    raise psycopg.OperationalError(f"unexpected answer in a pipeline: {pq.ExecStatus(status).name}")
            result = await self._next()
            if result.status != _SYNC:
                raise psycopg.OperationalError(
                    f"the pipeline's sync point got {pq.ExecStatus(result.status).name} instead"
                )
        except BaseException:
            # Answers left unread: the connection is closed as the attempt ends, and its plans with it.
            self._sent = [(_SILENT, None)]
            raise
        if failure is not None:
            if pgconn.status == _BAD:
                raise psycopg.OperationalError(failure.get_error_message(self._encoding))
            raise psycopg.errors.error_from_result(failure, encoding=self._encoding)

    def _forget(self, plan: _Plan) -> None:
        if self._plans.get(plan.key) is plan:
            del self._plans[plan.key]

    async def _next(self) -> pq.abc.PGresult:
        """The next answer: each statement's is followed by a null that ends it, a sync point's is not."""
        pgconn = self._pgconn
        ended = False
        while True:
            if pgconn.is_busy():
                await self.conn.answered()
            result = pgconn.get_result()
            if result is not None:
                return result
            if ended or pgconn.status == _BAD:  # two ends in a row: nothing more is coming
                raise psycopg.OperationalError("the server sent no answer to a pipelined statement")
            ended = True
