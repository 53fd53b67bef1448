"""The PostgreSQL store.

Writes are group-committed by one writer task on a connection of its own: every
operation queued while the previous commit was in flight runs in the next transaction.
The batch is pipelined (``store/wire.py``, libpq's pipeline mode driven by hand):
statements whose rows nobody reads (and fenced writes, ``Tx.expect``, whose changed rows
are counted later) are queued without waiting, so a batch costs a round trip for its
statements and one for its COMMIT, plus one per statement whose rows an op reads. If
any op refuses or any statement fails, the attempt is rolled back and the batch runs
again op by op, each under its own savepoint, so one refusal undoes only itself. A
batch of one op marked ``lone`` whose one write is a repeatable statement (a step's
journal entry) skips the transaction: the statement runs in autocommit, in one
round trip, straight through libpq (``store/direct.py``). When nothing is queued and the
writer is idle, its caller runs it so itself, without waking the writer task. Reads run
in autocommit on a small pool of connections and see committed data.

A lost connection never loses an acknowledged write and never hangs a caller: while
COMMIT has not been sent, the batch is re-run on a fresh connection (a few times, with
backoff); once it has been sent the outcome is unknown, and the writers are told so.
Wake-ups between processes travel by LISTEN/NOTIFY over a dedicated connection that
reconnects by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StoreError
from .base import Op, Row, Store, Tx
from .coalesce import Call, run_calls, runs_lone
from .direct import DirectConnection, DirectStatement, Unsupported
from .multirow import multirow
from .sql_files import load_queries, migrations, repeatable_queries, silent_queries
from .wire import XID, Unmet, WireTx

__all__ = ["PostgresStore", "PostgresTx"]

log = logging.getLogger("lockgate.store")
T = TypeVar("T")
P = ParamSpec("P")
_Conn = psycopg.AsyncConnection[DictRow]
_WriterConn = DirectConnection[DictRow]

CHANNEL = "lockgate"
"""The one PostgreSQL channel every wake-up travels on (the logical channel is in the payload)."""

_MIGRATION_LOCK = 0x6C6F636B67617465  # "lockgate": serialises the migrations of processes booting together
_RETRIES = 5  # re-runs of a batch (or read) whose connection failed before COMMIT
_CONNECT_TIMEOUT = "5"  # libpq connect_timeout unless the URL sets one
_NOTIFY_LIMIT = 8000  # PostgreSQL refuses NOTIFY payloads of 8000 bytes or more
_OPTIONS = frozenset({"pool_size", "pool_timeout"})  # lockgate's own URL options; every other one goes to libpq


class PostgresTx(Tx):
    """A transaction (or, for reads, an autocommit session) on one connection, each statement awaited."""

    dialect = "postgres"
    rows_in_one = True

    def __init__(self, conn: _Conn, queries: dict[str, str]) -> None:
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
        cursor = await self.conn.execute(self._sql(name), params or {})
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


class _LoneTx(PostgresTx):
    """A lone op's transaction, held back: an op whose one write is a repeatable statement runs it in autocommit.

    Such a write is its own transaction: one round trip, as a bare INSERT costs. Should its
    answer be lost, the statement is run again (it is repeatable), so no transaction id is
    needed to learn its outcome. Anything else the op asks (a second statement, rows to
    read, a wake-up) raises ``_NotLone`` before a byte is sent, and the batch goes the usual way.
    """

    def __init__(self, conn: _Conn, queries: dict[str, str], writes: Mapping[str, DirectStatement]) -> None:
        super().__init__(conn, queries)
        self._writes = writes
        self.held: tuple[str, Mapping[str, Any], bool] | None = None  # (query, params, whether it is an expect)

    def _hold(self, name: str, params: Mapping[str, Any], expect: bool) -> None:
        if self.held is not None or name not in self._writes:
            raise _NotLone()
        self.held = (name, params, expect)

    async def send(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        raise _NotLone()

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self._hold(name, params or {}, False)
        return []

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        self._hold(name, params, True)
        return True  # checked once it has run: if it changed no row, the op runs again in a transaction

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        if n != 1:
            raise _NotLone()
        return await self.expect(name, params)

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        raise _NotLone()

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) != 1:
            raise _NotLone()
        return await self.execute(name, rows[0])


class _NotLone(BaseException):  # a signal between the store and its own Tx, never an error
    """The op asked more of its transaction than one repeatable write: it runs in a transaction after all."""


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_IDLE = psycopg.pq.TransactionStatus.IDLE
_PIPELINE_OFF = psycopg.pq.PipelineStatus.OFF
_PIPELINES = psycopg.AsyncPipeline.is_supported()  # libpq 14 or later; else every batch runs guarded


def _idle(conn: _Conn) -> bool:
    """Whether ``conn`` is open, out of any transaction and statement, and out of pipeline mode."""
    pgconn = conn.pgconn
    return not conn.closed and pgconn.transaction_status == _IDLE and pgconn.pipeline_status == _PIPELINE_OFF


def _silent(queries: Mapping[str, str]) -> frozenset[str]:
    """The queries run for their effect alone: writes without ``RETURNING`` (no rows to wait for), and
    queries marked ``-- silent:`` (a key's lock: its row is never read)."""
    names = set(silent_queries("postgres"))
    for name, sql in queries.items():
        text = sql.upper()
        words = text.split(None, 1)
        if words and words[0] in ("INSERT", "UPDATE", "DELETE") and "RETURNING" not in text:
            names.add(name)
    return frozenset(names)


async def _noop(tx: Tx) -> None:
    return None


class _Attempt:
    """How far one attempt at a batch got: once COMMIT is sent, its outcome is the server's to tell."""

    def __init__(self) -> None:
        self.committing = False
        self.xid: str | None = None  # the transaction's id, if it wrote anything
        self.pid: int | None = None  # the server process that ran it
        self.conn: Any = None  # the connection it ran on
        self.outcomes: list[tuple[bool, Any]] = []


class PostgresStore(Store):
    """``postgresql://user@host/db``; any option but these two is passed to libpq.

    ``pool_size`` (default 4) bounds the connections held; ``pool_timeout`` (seconds,
    default 5) is the longest one attempt waits for a connection while the server is away.
    """

    dialect = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError(f"store URL {_redact(url)!r} is not a postgresql:// URL")
        mine: dict[str, str] = {}
        libpq: list[str] = []  # kept verbatim: libpq decodes its own URLs ('+' is not a space there)
        for item in filter(None, parts.query.split("&")):
            key, _, value = item.partition("=")
            if unquote(key) in _OPTIONS:
                mine[unquote(key)] = unquote(value)
            else:
                libpq.append(item)
        self.pool_size = int(_positive(url, "pool_size", mine.get("pool_size", "4"), integer=True))
        self.pool_timeout = _positive(url, "pool_timeout", mine.get("pool_timeout", "5"), integer=False)
        if not any(unquote(item.partition("=")[0]) == "connect_timeout" for item in libpq):
            libpq.append(f"connect_timeout={_CONNECT_TIMEOUT}")
        self.conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(libpq), parts.fragment))
        self._where = _redact(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
        self._queries = load_queries("postgres")
        self._silent = _silent(self._queries)
        self._lone_writes = {
            name: DirectStatement(name, self._queries[name])
            for name in repeatable_queries("postgres")
            if "RETURNING" not in self._queries[name].upper()
        }
        self._conn: _WriterConn | None = None  # the writer's own
        self._writing = False  # whether a batch is using it
        self._held = False  # whether it is spoken for: a batch is being committed, or a lone write runs on it
        self._crowded = False  # whether writes queued up while the last commit was in flight
        self._finisher: asyncio.Task[None] | None = None  # reads a cancelled lone write's answer
        self._lone_done = asyncio.Event()  # clear while a caller runs a lone write on it
        self._lone_done.set()
        self._pool: AsyncConnectionPool[_Conn] | None = None
        self._queue: list[tuple[Call, asyncio.Future[Any] | None]] = []
        self._work: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._listeners: list[Callable[[str, str], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._origin = uuid.uuid4().hex  # tells our own notifications from other stores'
        self._down = False
        self._outages = 0  # outages logged so far: a connection born before the last one is one of its casualties
        self._born: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.commits = 0

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        await self._migrate()
        pool: AsyncConnectionPool[_Conn] = AsyncConnectionPool(
            self.conninfo,
            connection_class=psycopg.AsyncConnection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=self._configure,
            min_size=1,
            max_size=self.pool_size,
            timeout=self.pool_timeout,
            # The pool's reconnect backoff doubles until this; kept short, a chain of failed attempts
            # ends soon and the next request starts a fresh one, so a returning server is found in seconds.
            reconnect_timeout=max(5.0, self.pool_timeout),
            name="lockgate",
            open=False,
        )
        await pool.open()
        self._pool = pool
        self._closing = False
        self._work = asyncio.Event()
        self._writer = asyncio.create_task(self._write_loop(), name="lockgate-pg-writer")
        if self._listeners:
            self._start_listener()

    async def _configure(self, conn: _Conn) -> None:
        """Tag each session with this store's origin: the database's own wake-ups then name who caused them."""
        self._born[conn] = self._outages
        await conn.execute("SELECT set_config('lockgate.origin', %s, false)", (self._origin,))

    async def _migrate(self) -> None:
        """Apply pending migrations in one transaction, one process at a time."""
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, row_factory=dict_row)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self._where}: {_first_line(exc)}") from None
        try:
            async with conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS lockgate_migrations "
                    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
                )
                cursor = await conn.execute("SELECT version FROM lockgate_migrations")
                done = {row["version"] for row in await cursor.fetchall()}
                for version, name, sql in migrations("postgres"):
                    if version in done:
                        continue
                    await conn.execute(sql)  # several statements: sent without parameters
                    await conn.execute(
                        "INSERT INTO lockgate_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                        (version, name, time.time()),
                    )
                    log.info("applied postgres migration %04d_%s", version, name)
        except psycopg.Error as exc:
            raise StoreError(f"migrating PostgreSQL at {self._where} failed: {_first_line(exc)}") from exc

    async def close(self) -> None:
        if self._pool is None or self._closing:
            return
        with contextlib.suppress(Exception):
            await self._enqueue(Call(_noop, (), {}))  # resolves once everything queued before it is committed
        self._closing = True
        await self._lone_done.wait()  # a lone write its caller started after the last queued one
        for task in (self._writer, self._listener):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._writer = self._listener = None
        _fail(self._queue, StoreError("the PostgreSQL store was closed before this write was committed"))
        self._queue = []
        await self._drop_writer_connection()
        pool, self._pool = self._pool, None
        await pool.close()

    def _require(self) -> AsyncConnectionPool[_Conn]:
        if self._pool is None or self._closing:
            raise StoreError("the PostgreSQL store is not open (use the engine as 'async with')")
        return self._pool

    # -- writes -------------------------------------------------------------------------

    async def write(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._require()
        call = Call(op, args, kwargs)
        if not self._queue and not self._held and not self._crowded and runs_lone(op):
            conn = self._conn
            if conn is not None and not self._down and _idle(conn):
                outcome = await self._lone_here(conn, call)
                if outcome is not None:
                    return outcome[1]  # type: ignore[no-any-return]
        return await self._enqueue(call)  # type: ignore[no-any-return]

    async def _lone_here(self, conn: _Conn, call: Call) -> tuple[bool, Any] | None:
        """Run a lone call on the idle writer's connection from its caller's own task; ``None``: queue it.

        The writer would take it alone anyway (nothing is queued), and this saves two hops
        through the event loop. Not while writes crowd in (some queued up during the last
        commit): the writer, woken a moment later, would have taken more than this one.
        Whatever goes wrong here, the call is queued and the writer, with its reconnection
        and retries, decides: a lone write is repeatable.
        """
        self._held = self._writing = True
        self._lone_done.clear()
        try:
            outcomes = await self._lone(conn, call)
        except asyncio.CancelledError:
            # The caller is gone with the statement out: its answer is read before anyone else uses the connection.
            self._finisher = asyncio.get_running_loop().create_task(self._finish_lone(conn))
            raise
        except Exception as exc:
            if isinstance(exc, psycopg.OperationalError) or not _idle(conn):
                await self._drop_writer_connection()
            outcomes = None
        self._release_lone()
        if outcomes is None:
            return None
        self.commits += 1
        return outcomes[0]

    async def _finish_lone(self, conn: _Conn) -> None:
        try:
            if not _idle(conn):
                await DirectStatement.finish(conn)
        except Exception:
            await self._drop_writer_connection()
        finally:
            self._release_lone()

    def _release_lone(self) -> None:
        self._held = self._writing = False
        self._crowded = bool(self._queue)
        self._lone_done.set()
        if self._queue and self._work is not None:
            self._work.set()

    def write_nowait(self, op: Op[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> None:
        if self._pool is None or self._closing or self._work is None:
            return
        self._queue.append((Call(op, args, kwargs), None))
        self._work.set()

    async def _enqueue(self, bound: Call) -> Any:
        assert self._work is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((bound, future))
        self._work.set()
        return await future

    async def _write_loop(self) -> None:
        assert self._work is not None
        while True:
            await self._work.wait()
            self._work.clear()
            while self._queue and not self._held:  # a lone write running inline sets the event when it is done
                batch, self._queue = self._queue, []
                self._held = True
                try:
                    await self._commit(batch)
                except asyncio.CancelledError:
                    _fail(batch, StoreError("the PostgreSQL store was closed before this write was committed"))
                    raise
                except Exception as exc:  # the writer must outlive any one batch
                    log.exception("PostgreSQL group commit failed")
                    _fail(batch, StoreError(f"PostgreSQL commit failed: {exc}"))
                finally:
                    self._held = False
                    self._crowded = bool(self._queue)

    async def _commit(self, batch: list[tuple[Call, asyncio.Future[Any] | None]]) -> None:
        """Run ``batch`` in one transaction and settle each future with its op's outcome."""
        for attempt in range(_RETRIES + 1):
            state = _Attempt()
            try:
                outcomes = await self._run_batch(batch, state)
            except (psycopg.OperationalError, _StalePlan) as exc:
                await self._trouble(exc, state.conn)
                if state.committing:
                    committed = await self._committed(state)
                    if committed is None:
                        _fail(
                            batch,
                            StoreError(
                                "the PostgreSQL connection failed while committing; the write may or may not "
                                f"have been applied: {_first_line(exc)}"
                            ),
                        )
                        return
                    if committed:
                        self._settle(batch, state.outcomes)
                        return
                if attempt == _RETRIES:
                    _fail(batch, StoreError(f"PostgreSQL at {self._where} is unreachable: {_first_line(exc)}"))
                    return
                await asyncio.sleep(_backoff(attempt))
                continue
            except psycopg.Error as exc:  # BEGIN, SAVEPOINT or COMMIT refused: a retry would not mend it
                _fail(batch, StoreError(f"PostgreSQL commit failed: {_first_line(exc)}"))
                return
            self._reachable()
            self._settle(batch, outcomes)
            return

    def _settle(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], outcomes: list[tuple[bool, Any]]) -> None:
        self.commits += 1
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future is None:
                if not ok:
                    log.warning("introspection write failed: %r", value)
            elif not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    async def _committed(self, state: _Attempt) -> bool | None:
        """Whether the transaction whose COMMIT got no answer was committed; ``None`` if that cannot be learnt."""
        if state.xid is None:
            return True  # it wrote nothing: its results hold whichever way it ended
        assert self._pool is not None
        for attempt in range(_RETRIES + 1):
            conn = None
            try:
                async with self._pool.connection() as conn:
                    cursor = await conn.execute("SELECT pg_xact_status(%s::xid8) AS status", (state.xid,))
                    row = await cursor.fetchone()
                    status = None if row is None else row["status"]
                    if status == "in progress":
                        # Its session outlived our connection and holds the transaction open, waiting for a
                        # COMMIT that never reached it: end that session (if it is still idle in this very
                        # transaction; one busy committing is left to finish), then look again.
                        await conn.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE pid = %s AND state = 'idle in transaction' "
                            "AND backend_xid::text = (%s::bigint %% 4294967296)::text",
                            (state.pid, state.xid),
                        )
            except psycopg.OperationalError as exc:
                await self._trouble(exc, conn)
                status = "unknown"
            except psycopg.Error as exc:
                log.warning("could not learn the outcome of transaction %s: %s", state.xid, _first_line(exc))
                return None
            if status == "committed":
                return True
            if status == "aborted":
                return False
            if status is None:  # too old for the server to remember
                return None
            await asyncio.sleep(_backoff(attempt))
        return None

    async def _writer_connection(self) -> _WriterConn:
        """The writer's connection, connected again when the last one broke."""
        conn = self._conn
        if conn is not None and not conn.closed:
            if _idle(conn):
                return conn
            await self._drop_writer_connection()  # left mid-transaction by a failure: start afresh
        self._conn = None
        try:
            async with asyncio.timeout(self.pool_timeout):
                conn = await _WriterConn.connect(self.conninfo, autocommit=True, row_factory=dict_row)
        except TimeoutError:
            raise psycopg.OperationalError(f"no connection within {self.pool_timeout:g}s") from None
        try:
            await self._configure(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def _drop_writer_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _run_batch(
        self, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: _Attempt
    ) -> list[tuple[bool, Any]]:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        conn = await self._writer_connection()
        state.conn = conn
        self._writing = True
        try:
            async with _discarding_stale_plans(conn):
                outcomes = None
                if len(batch) == 1 and runs_lone(batch[0][0].op):
                    outcomes = await self._lone(conn, batch[0][0])
                if outcomes is None and _PIPELINES:
                    outcomes = await self._optimistic(conn, batch, state)
                if outcomes is None:
                    outcomes = await self._guarded(conn, batch, state)
                return outcomes
        except BaseException:
            if conn.closed or conn.broken or state.committing:
                await self._drop_writer_connection()
            elif conn.info.transaction_status != _IDLE:
                try:
                    await conn.execute("ROLLBACK")
                except BaseException:
                    await self._drop_writer_connection()
                    raise
            raise
        finally:
            self._writing = False

    async def _lone(self, conn: _Conn, call: Call) -> list[tuple[bool, Any]] | None:
        """Run a lone call whose one write is repeatable in autocommit; ``None`` when it must run in a transaction.

        That includes an ``expect`` that changed no row (nothing was written): in a transaction
        the op learns ``False``. A lost answer leaves the attempt uncommitted in the writer's
        eyes, so the batch runs again; the write being repeatable, that is safe.
        """
        tx = _LoneTx(conn, self._queries, self._lone_writes)
        try:
            value = await call(tx)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # not lone, or refused before writing (Fenced is a BaseException): the usual way decides
            return None
        if tx.held is not None:
            name, params, expect = tx.held
            statement = self._lone_writes[name]
            try:
                try:
                    changed = await statement.run(conn, params)
                except Unsupported:
                    changed = (await conn.execute(self._queries[name], params)).rowcount
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                if _is_stale_plan(exc):
                    raise
                return None  # refused by the server, in its own transaction: nothing was written
            if expect and changed < 1:
                return None
        return [(True, value)]

    async def _optimistic(
        self, conn: _WriterConn, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: _Attempt
    ) -> list[tuple[bool, Any]] | None:
        """Run the batch pipelined, without savepoints; ``None`` when it must run again guarded.

        COMMIT is sent only once the transaction's id is known (what resolves a COMMIT whose
        answer is lost) and every ``expect`` changed its row. When an op's own sync brought the id back,
        COMMIT travels with the batch's last statements: should one of them fail, the server
        skips it. Else the last statements travel with the question for the id, and COMMIT
        follows. A lone op's own refusal is final at once (it is the whole batch); any other
        refusal, failed statement or unmet ``expect`` rolls the attempt back. A run of
        consecutive calls of an op with a many-at-once form runs as one call of that form.
        """
        try:
            async with WireTx(conn, self._queries, self._silent) as tx:
                await tx.send("BEGIN")
                try:
                    values = await run_calls(tx, [call for call, _ in batch])
                    if tx.xid is None or not tx.settled:
                        await tx.sync()
                    if tx.unmet:
                        raise Unmet()
                except (psycopg.OperationalError, asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # a refusal (Fenced is a BaseException), a failed statement, Unmet
                    if _is_stale_plan(exc):
                        raise
                    return await self._abandon(tx, exc if len(batch) == 1 else None)
                state.xid, state.pid = tx.xid, conn.info.backend_pid
                state.outcomes = [(True, value) for value in values]
                state.committing = True
                await tx.commit()
        except psycopg.Error as exc:
            if not state.committing or conn.closed or conn.broken or _is_stale_plan(exc):
                raise  # if COMMIT got no answer, whether it committed is learnt from the transaction's id
            state.committing = False  # the server answered: it did not commit
            await conn.execute("ROLLBACK")
            if isinstance(exc, psycopg.OperationalError):
                raise
            return None
        return state.outcomes

    async def _abandon(self, tx: WireTx, refusal: BaseException | None) -> list[tuple[bool, Any]] | None:
        """Roll the optimistic attempt back: a lone op's refusal is its outcome, else ``None`` (run guarded)."""
        failed = False
        try:
            await tx.drain()  # what is still in flight must be answered before the ROLLBACK
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            if _is_stale_plan(exc):
                raise
            failed = True
        await tx.rollback()
        if refusal is None or failed or isinstance(refusal, (psycopg.Error, Unmet)):
            return None
        return [(False, _refusal(refusal))]

    async def _guarded(
        self, conn: _Conn, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: _Attempt
    ) -> list[tuple[bool, Any]]:
        """Run the batch op by op, each under a savepoint, waiting for every statement."""
        single = len(batch) == 1  # a lone op needs no savepoint: its refusal rolls back the transaction
        outcomes: list[tuple[bool, Any]] = []
        tx = PostgresTx(conn, self._queries)
        await conn.execute("BEGIN")
        for op, _ in batch:
            if not single:
                await conn.execute("SAVEPOINT op")
            try:
                value = await op(tx)
            except (psycopg.OperationalError, asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # the op's refusal (Fenced is a BaseException)
                if _is_stale_plan(exc):
                    raise
                if not single:
                    await conn.execute("ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op")
                outcomes.append((False, _refusal(exc)))
                continue
            if not single:
                await conn.execute("RELEASE SAVEPOINT op")
            outcomes.append((True, value))
        if single and not outcomes[0][0]:
            await conn.execute("ROLLBACK")
            return outcomes
        cursor = await conn.execute(XID)
        row = await cursor.fetchone()
        state.xid = None if row is None else row["xid"]
        state.pid, state.outcomes = conn.info.backend_pid, outcomes
        state.committing = True
        await conn.execute("COMMIT")
        return outcomes

    # -- reads --------------------------------------------------------------------------

    async def read(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        pool = self._require()
        for attempt in range(_RETRIES + 1):
            conn = None
            try:
                async with pool.connection() as conn, _discarding_stale_plans(conn):
                    value = await op(PostgresTx(conn, self._queries), *args, **kwargs)
            except (psycopg.OperationalError, _StalePlan) as exc:
                await self._trouble(exc, conn)
                if attempt == _RETRIES:
                    raise StoreError(f"PostgreSQL at {self._where} is unreachable: {_first_line(exc)}") from exc
                await asyncio.sleep(_backoff(attempt))
                continue
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL read failed: {_first_line(exc)}") from exc
            self._reachable()
            return value
        raise AssertionError("unreachable")

    # -- outages ------------------------------------------------------------------------

    async def _trouble(self, exc: psycopg.OperationalError | _StalePlan, conn: Any = None) -> None:
        """A query failed for want of the server: say so once per outage and drop dead connections.

        A connection that was open before the last outage began and fails only now (it sat
        idle, or busy, while the others recovered) is that outage's, not a new one.
        """
        if isinstance(exc, _StalePlan) or not _connection_lost(exc):
            log.info("PostgreSQL transient failure (will retry): %s", _first_line(exc))
            return
        if self._down or (conn is not None and self._born.get(conn, self._outages) < self._outages):
            return
        self._down = True
        self._outages += 1
        log.warning("database unreachable at %s: %s (will retry)", self._where, _first_line(exc))
        if not self._writing:
            await self._drop_writer_connection()  # likely dead too: found out now, not as a second outage later
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await self._pool.check()  # discard every idle connection the outage killed, not one per query

    def _reachable(self) -> None:
        if self._down:
            self._down = False
            log.warning("database reachable again at %s", self._where)

    # -- wake-ups -----------------------------------------------------------------------

    @property
    def cross_process_wakeups(self) -> bool:
        return True

    async def notify(self, tx: Tx, channel: str, payload: str) -> None:
        if not isinstance(tx, (PostgresTx, WireTx)):
            raise TypeError("notify() takes a transaction of this PostgreSQL store")
        message = json.dumps([self._origin, channel, payload])
        size = len(message.encode())
        if size >= _NOTIFY_LIMIT:
            raise ValueError(f"wake-up on {channel!r} is {size} bytes; PostgreSQL allows under {_NOTIFY_LIMIT}")
        await tx.send("SELECT pg_notify(%(channel)s, %(message)s)", {"channel": CHANNEL, "message": message})

    def add_listener(self, callback: Callable[[str, str], None]) -> None:
        self._listeners.append(callback)
        if self._pool is not None and not self._closing:
            self._start_listener()

    def _start_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="lockgate-pg-listener")

    async def _listen(self) -> None:
        """LISTEN on a connection of its own; reconnect when it drops (missed wake-ups are polled)."""
        delay = 0.1
        while True:
            conn = None
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                self._born[conn] = self._outages
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._reachable()
                    delay = 0.1
                    async for note in conn.notifies():
                        self._deliver(note.payload)
            except psycopg.OperationalError as exc:
                await self._trouble(exc, conn)
            except psycopg.Error as exc:
                log.warning("PostgreSQL listener failed (will reconnect): %s", _first_line(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _deliver(self, raw: str) -> None:
        try:
            origin, channel, payload = json.loads(raw)
        except (ValueError, TypeError):
            log.debug("ignored a foreign notification on %s: %r", CHANNEL, raw)
            return
        if origin == self._origin:
            return
        for callback in list(self._listeners):
            try:
                callback(channel, payload)
            except Exception:
                log.exception("wake-up listener %r failed", callback)


class _StalePlan(Exception):
    """A statement prepared on this connection no longer fits its table (another process migrated)."""


def _is_stale_plan(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan must not change" in str(exc)


@contextlib.asynccontextmanager
async def _discarding_stale_plans(conn: _Conn) -> AsyncIterator[None]:
    """Close ``conn`` (the pool then replaces it) when its prepared statements went stale; raise ``_StalePlan``."""
    try:
        yield
    except psycopg.Error as exc:
        if not _is_stale_plan(exc):
            raise
        with contextlib.suppress(psycopg.Error):
            await conn.close()
        raise _StalePlan(_first_line(exc)) from exc


def _refusal(exc: BaseException) -> BaseException:
    """What the writer of a refused op is told: its own exception, or a ``StoreError`` for SQL errors."""
    if isinstance(exc, psycopg.Error):
        error = StoreError(f"PostgreSQL refused the write: {_first_line(exc)}")
        error.__cause__ = exc
        return error
    return exc


def _fail(batch: list[tuple[Call, asyncio.Future[Any] | None]], error: StoreError) -> None:
    lost = 0
    for _, future in batch:
        if future is None:
            lost += 1
        elif not future.done():
            future.set_exception(error)
    if lost:
        log.warning("%d introspection write(s) lost: %s", lost, error)


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` means the server (or the way to it) is gone, rather than a transient conflict."""
    if isinstance(exc, PoolTimeout):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def _positive(url: str, option: str, raw: str, *, integer: bool) -> float:
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        kind = "a positive integer" if integer else "a positive number of seconds"
        raise ValueError(f"store URL {_redact(url)!r}: {option} must be {kind}, not {raw!r}")
    return value


def _backoff(attempt: int) -> float:
    return float(min(2.0, 0.1 * 2**attempt))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _redact(url: str) -> str:
    """``url`` without its password, fit for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
