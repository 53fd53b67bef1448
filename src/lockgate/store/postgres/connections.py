"""The PostgreSQL store's connections and outages: the writer's own connection; the server leaving and returning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ...errors import StoreError, StoreFull
from ..base import Store
from .failures import StalePlan, connection_lost, disk_full, first_line
from .tx import Conn, WriterConn, idle

__all__ = ["PLANNER", "Connections"]

PLANNER = (
    "(SELECT COUNT(set_config(name, 'off', false)) FROM pg_settings "
    "WHERE name IN ('enable_seqscan', 'jit') AND source IN ('default', 'configuration file'))"
)
"""Every session plans without sequential scans where an index serves, and without JIT, unless its role,
database or client chose otherwise. Prepared statements keep the generic plan made at their first uses:
made while a table was empty (a fresh store, or a queue drained and analyzed since), that plan reads the
table through, and keeps doing so as the table grows, until the next ANALYZE (a minute or more: a burst
of starts parked meanwhile pays a scan of the backlog on every statement). With sequential scans priced
out, the plan made on an empty table is the one made on a full one. JIT would otherwise compile any
statement whose only path is priced out (a handful of small tables without a useful index)."""

_SESSION = (
    f"SELECT {PLANNER}, set_config('lockgate.origin', %s, false), "
    "set_config('statement_timeout', CASE current_setting('statement_timeout') WHEN '0' THEN %s "
    "ELSE current_setting('statement_timeout') END, false), "
    "set_config('idle_in_transaction_session_timeout', CASE current_setting('idle_in_transaction_session_timeout') "
    "WHEN '0' THEN %s ELSE current_setting('idle_in_transaction_session_timeout') END, false)"
)
_SESSION_WRITER = (
    f"SELECT {PLANNER}, set_config('lockgate.origin', %s, false), "
    "set_config('idle_in_transaction_session_timeout', CASE current_setting('idle_in_transaction_session_timeout') "
    "WHEN '0' THEN %s ELSE current_setting('idle_in_transaction_session_timeout') END, false)"
)

# The server's WAL timeline (the WAL file name's first 8 hex digits): a promoted standby starts a new one.
TIMELINE = "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"
# When the server (its postmaster) started: a restart since a transaction ran may have handed its id out again.
STARTED = "pg_postmaster_start_time()::text"

log = logging.getLogger("lockgate.store")


class Connections(Store):
    """What the writer, the reader and the listener share: the pool, the writer's connection, outage state."""

    conninfo: str
    pool_timeout: float
    statement_timeout: float  # seconds
    _where: str
    _origin: str  # tells our own notifications from other stores'
    _pool: AsyncConnectionPool[Conn] | None
    _conn: WriterConn | None  # the writer's own
    _timeline: str | None  # the WAL timeline the writer's server was on when it connected
    _started: str | None  # when the writer's server had started, as it said when the writer connected
    _writing: bool  # whether a batch is using it
    _closing: bool
    _down: bool
    _back_at: float | None = None  # monotonic time the last outage ended
    _down_at: float | None = None  # monotonic time the last outage was said
    _disk_full: bool  # said once per spell of full disk
    _outages: int  # outages logged so far: a connection born before the last one is one of its casualties
    _born: weakref.WeakKeyDictionary[Any, int]
    _committing_since: float | None  # monotonic time the writer's commit in flight began (stalls.py)

    async def _configure(self, conn: Conn, *, writer: bool = False) -> None:
        """Tag each session with this store's origin: the database's own wake-ups then name who caused them."""
        self._born[conn] = self._outages
        # Where the session has none of its own (libpq options, role or database settings): a read
        # that blocks is cut off, a session idle in a transaction too. The writer's statements are
        # not (a COMMIT cancelled while it waits on a synchronous standby would be acknowledged
        # unreplicated): stalls.py reports them instead.
        limit = f"{round(self.statement_timeout * 1000)}"
        if writer:
            await conn.execute(_SESSION_WRITER, (self._origin, limit))
        else:
            await conn.execute(_SESSION, (self._origin, limit, limit))
        if self.schema_mode == "read":  # every transaction read-only: the server refuses any write
            await conn.execute("SET default_transaction_read_only = on")

    async def _writer_connection(self) -> WriterConn:
        """The writer's connection, connected again when the last one broke."""
        conn = self._conn
        if conn is not None and not conn.closed:
            if idle(conn):
                return conn
            await self._drop_writer_connection()  # left mid-transaction by a failure: start afresh
        self._conn = None
        try:
            async with asyncio.timeout(self.pool_timeout):
                conn = await WriterConn.connect(self.conninfo, autocommit=True, row_factory=dict_row)
        except TimeoutError:
            raise psycopg.OperationalError(f"no connection within {self.pool_timeout:g}s") from None
        try:
            await self._configure(conn, writer=True)
            cursor = await conn.execute(f"SELECT {TIMELINE} AS timeline, {STARTED} AS started")
            row = await cursor.fetchone()
        except BaseException:
            await conn.close()
            raise
        self._timeline = None if row is None else row["timeline"]
        self._started = None if row is None else row["started"]
        self._conn = conn
        return conn

    async def _drop_writer_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _trouble(
        self, exc: psycopg.OperationalError | StalePlan, conn: Any = None, since: float | None = None
    ) -> None:
        """A query failed for want of the server: say so once per outage and drop dead connections.

        A connection that was open before the last outage began and fails only now (it sat
        idle, or busy, while the others recovered) is that outage's, not a new one; so is an
        attempt begun (``since``, monotonic) before the last outage ended, such as a wait for a
        connection that timed out just after the server answered again.
        """
        if disk_full(exc):
            return  # said once by _full
        if isinstance(exc, StalePlan) or not connection_lost(exc):
            log.info("PostgreSQL transient failure (will retry): %s", first_line(exc))
            return
        if self._down or (conn is not None and self._born.get(conn, self._outages) < self._outages):
            return
        if since is not None and self._back_at is not None and since < self._back_at:
            return
        self._down = True
        self._down_at = time.monotonic()
        self._outages += 1
        log.warning("database unreachable at %s: %s (will retry)", self._where, first_line(exc))
        if not self._writing:
            await self._drop_writer_connection()  # likely dead too: found out now, not as a second outage later
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await self._pool.check()  # discard every idle connection the outage killed, not one per query

    def _failed(self, where: str) -> None:
        """A read or a commit failed for good: the store's observer counts it."""
        if self.observer is not None:
            self.observer.store_error(where)

    def _full(self, exc: BaseException) -> StoreFull:
        """The typed error of a write refused for want of disk; said once until a write goes through again."""
        if not self._disk_full:
            self._disk_full = True
            log.warning("PostgreSQL at %s is out of disk: writes are refused until space is freed", self._where)
        error = StoreFull(
            f"PostgreSQL at {self._where} refused the write: its disk is full ({first_line(exc)}); free space to resume"
        )
        error.__cause__ = exc
        return error

    def _reachable(self, since: float | None = None) -> None:
        """A query was answered (``since``: when its attempt began, monotonic)."""
        if self._disk_full:
            self._disk_full = False
            log.warning("PostgreSQL at %s accepts writes again", self._where)
        if not self._down or (since is not None and self._down_at is not None and since < self._down_at):
            return  # up already, or begun before the outage was said and answered as the server went
        self._down = False
        self._back_at = time.monotonic()
        log.warning("database reachable again at %s", self._where)

    def _require(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None or self._closing:
            raise StoreError("the PostgreSQL store is not open (use the engine as 'async with')")
        return self._pool
