"""The embedded SQLite store.

One connection, used from the engine's event loop. Writes are queued and flushed
together at the next turn of the loop: a single ``BEGIN IMMEDIATE`` … ``COMMIT``
carries every operation queued since the last commit (group commit), so a thousand
concurrent runs finishing steps pay for one fsync, not a thousand. Reads run on the
same connection between flushes and see committed data only. Other processes may
open the same file (WAL lets their readers run beside our writer); their commits are
heard by a cheap change check (``sqlite_wakeups.py``), and while one of them holds the
write lock a batch waits for it on a timer, never on the loop's thread. A commit that
wrote ledger rows folds them into the counts ``flow()`` reads once ``FOLD_AT`` or more
are left out (``_SQLiteTx.count_ledger``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from types import CoroutineType
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qs, urlsplit

from ..errors import StoreCorrupt, StoreError, StoreFull
from .base import Joined, Op, Row, Store, Tx, group_cut, undo_all
from .coalesce import Call, all_volatile, run_calls
from .multirow import multirow
from .sql_files import check_schema, load_queries, migrations, refuse_newer
from .sqlite_joined import join_sqlite
from .sqlite_wakeups import ChangeWatch

__all__ = ["SQLiteStore"]

# Jitter from a generator of our own: the process's shared ``random`` state is its code's, not ours.
_JITTER = random.Random()

log = logging.getLogger("lockgate.store")
T = TypeVar("T")
P = ParamSpec("P")


FOLD_AT = 1000
"""Ledger rows left out of flow()'s counts at most after a commit (a read adds them up itself)."""
BUSY_WAIT = (0.0005, 0.001)
"""Seconds between two tries for a write lock another connection holds: the first, and at most (doubling)."""
_LEDGER_INSERT = re.compile(r"\bINSERT\s+INTO\s+lockgate_ledger\b", re.IGNORECASE)


class _SQLiteTx(Tx):
    dialect = "sqlite"
    single_writer = True

    def __init__(self, conn: sqlite3.Connection, queries: dict[str, str]) -> None:
        self._conn = conn
        self._queries = queries
        # The queries that add ledger rows: a commit after one of them may fold the rows into flow()'s counts.
        self._ledger_writers = frozenset(name for name, sql in queries.items() if _LEDGER_INSERT.search(sql))
        self.ledger_grew = False
        # What starts as this batch's COMMIT goes out (``when_committing``); ``None`` where an op's refusal
        # is rolled back to its savepoint alone, which would leave what it asked for behind.
        self.committing: list[tuple[Callable[[], None], Callable[[], None]]] | None = None

    def when_committing(self, sent: Callable[[], None], undone: Callable[[], None]) -> bool:
        if self.committing is None:
            return False
        self.committing.append((sent, undone))
        return True

    def count_ledger(self) -> None:
        """Fold the ledger rows past the mark into flow()'s counts once they are ``FOLD_AT`` or more:
        one aggregate for many commits' rows, not a counter update per row."""
        self.ledger_grew = False
        (unfolded,) = self._conn.execute(self._queries["ledger_unfolded"]).fetchone()
        if unfolded >= FOLD_AT:
            self._conn.execute(self._queries["count_ledger"])
            self._conn.execute(self._queries["ledger_counted"])

    def _note(self, name: str) -> None:
        if name in self._ledger_writers:
            self.ledger_grew = True

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        self._note(name)
        cursor = self._conn.execute(self._queries[name], params or {})
        rows = cursor.fetchall()
        if not rows:
            return []
        # Column names once per statement, not once per row (a row factory reads them per row).
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def insert(self, name: str, params: Mapping[str, Any]) -> int:
        self._note(name)
        cursor = self._conn.execute(self._queries[name], params)
        if cursor.rowcount != 1 or cursor.lastrowid is None:  # lastrowid alone would name an older row
            raise RuntimeError(f"query {name!r} inserted {cursor.rowcount} rows, not one")
        return cursor.lastrowid

    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        self._note(name)
        self._conn.executemany(self._queries[name], params)

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        self._note(name)
        # The rows changed, not rows returned: RETURNING costs SQLite more than the fenced write itself.
        cursor = self._conn.execute(self._queries[name], params)
        return bool(cursor.fetchall()) or cursor.rowcount > 0  # rowcount counts RETURNING rows once fetched

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        self._note(name)
        return self._conn.execute(self._queries[name], params).rowcount >= n

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        if len(rows) < 2:
            return await self.execute(name, rows[0]) if rows else []
        self._note(name)
        out: list[Row] = []
        for sql, params in multirow(name, self._queries[name], "sqlite").statements(rows):
            cursor = self._conn.execute(sql, params)
            fetched = cursor.fetchall()
            if fetched:
                names = [d[0] for d in cursor.description]
                out += [dict(zip(names, r, strict=True)) for r in fetched]
        return out


def run_sync(awaitable: Awaitable[T]) -> T:
    """Drive a coroutine that never suspends (every SQLite op) to its result, in place."""
    coro = awaitable if type(awaitable) is CoroutineType or isinstance(awaitable, Coroutine) else None
    if coro is None:
        raise TypeError("a store operation must be an async function")
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a SQLite store operation awaited something other than the store")


class SQLiteStore(Store):
    """``sqlite:///path.db`` (``?synchronous=normal`` trades power-loss safety for speed)."""

    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        path = parts.path
        if parts.netloc:  # sqlite://relative/path.db
            path = parts.netloc + path
        elif path.startswith("/") and not path.startswith("//"):
            path = path[1:]  # sqlite:///x.db is relative; sqlite:////abs/x.db is absolute
        elif path.startswith("//"):
            path = path[1:]
        if not path:
            raise ValueError(f"store URL {url!r} names no database file")
        self.path = path if path == ":memory:" else os.path.abspath(path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        sync = query.pop("synchronous", "full").lower()
        if sync not in ("full", "normal", "extra"):
            raise ValueError(f"store URL {url!r}: synchronous must be full, normal or extra, not {sync!r}")
        self.synchronous = sync
        try:
            self.busy_timeout_ms = int(query.pop("busy_timeout_ms", "5000"))
        except ValueError:
            raise ValueError(f"store URL {url!r}: busy_timeout_ms must be an integer") from None
        if query:
            raise ValueError(f"store URL {url!r}: unknown option(s) {', '.join(sorted(query))}")
        self._conn: sqlite3.Connection | None = None
        self._tx: _SQLiteTx | None = None
        self._queries = load_queries("sqlite")
        self._pending: list[tuple[Call, asyncio.Future[Any] | None]] = []
        self._crowded = False  # whether the last flush left writes for the next
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.commits = 0
        self._busy_since: float | None = None  # when the write lock was first found held by another connection
        self._busy_wait = BUSY_WAIT[0]
        self._guarded = False  # the next batch runs op by op (its optimistic try refused, then the lock was lost)
        self._listeners: list[Callable[[str, str], None]] = []
        self._watch: ChangeWatch | None = None
        self._idle = False  # whether this process executes no run (``executing_nothing``)
        self._awaiting = False  # whether it awaits a run another process executes (``awaiting_others``)
        self._committing: asyncio.Future[None] | None = None  # a COMMIT on its thread (``_commit_aside``)

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._loop = asyncio.get_running_loop()
        memory = self.path == ":memory:"
        if not memory and self.schema_mode != "migrate" and not os.path.isfile(self.path):
            check_schema("sqlite", None, self.path, self.url)
        if not memory and self.schema_mode == "migrate":
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder of SQLite database {self.path}: {exc.strerror}") from None
        try:
            if self.schema_mode == "read" and not memory:  # refuses every write, creates nothing
                conn = sqlite3.connect(
                    f"{Path(self.path).as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
                )
            else:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from None
        self._conn = conn
        self._tx = _SQLiteTx(conn, self._queries)
        try:  # a file that is not a database fails here, at its first statement
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            applied = self._applied(conn)  # before any write: another application's file is left as it is
            if applied is None and not self.share_file and not self._is_empty(conn):
                raise StoreError(f"{self.path} is not a lockgate database (it holds other tables); nothing was written")
            if self.schema_mode != "migrate":
                check_schema("sqlite", applied, self.path, self.url)
            elif applied is not None:
                refuse_newer("sqlite", applied, self.path)
            self.created = applied is None
            if self.schema_mode != "read":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = OFF")
            if self.schema_mode == "migrate":
                self._migrate()
            # From here on a lock another connection holds is waited for on a timer (``_begin``, ``read``).
            conn.execute("PRAGMA busy_timeout = 0")
        except (sqlite3.Error, StoreError) as exc:
            self._conn = None
            conn.close()
            if isinstance(exc, StoreError):
                raise
            if getattr(exc, "sqlite_errorname", None) == "SQLITE_CORRUPT":  # not merely another kind of file
                raise _failed("open", self.path, exc) from None
            raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from None
        if self._listeners:
            self._watch_changes()

    # -- wake-ups -----------------------------------------------------------------------

    @property
    def cross_process_wakeups(self) -> bool:
        return self.path != ":memory:"

    @property
    def tells_commits(self) -> bool:
        return self.cross_process_wakeups

    def add_listener(self, callback: Callable[[str, str], None]) -> None:
        """Be told of other connections' commits, on the channels PostgreSQL notifies (``sqlite_wakeups.py``)."""
        self._listeners.append(callback)
        if self._conn is not None and self.cross_process_wakeups:
            self._watch_changes()

    def _watch_changes(self) -> None:
        if self._watch is None:
            wal = f"{self.path}-wal"
            self._watch = ChangeWatch(self._require(), wal, self._queries["wakeup_counts"], self._listeners)
            self._look_eagerly()
            self._watch.start()

    def executing_nothing(self, idle: bool) -> None:
        self._idle = idle
        self._look_eagerly()

    def awaiting_others(self, waiting: bool) -> None:
        self._awaiting = waiting
        self._look_eagerly()

    def _look_eagerly(self) -> None:
        """Others' commits are what this process waits for while it executes nothing or awaits their runs."""
        if self._watch is not None:
            self._watch.eager(self._idle or self._awaiting)

    @staticmethod
    def _applied(conn: sqlite3.Connection) -> set[int] | None:
        """The migration versions applied to ``conn``'s database; ``None`` where it has no lockgate tables."""
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lockgate_migrations'")
        if found.fetchone() is None:
            return None
        return {row[0] for row in conn.execute("SELECT version FROM lockgate_migrations")}

    @staticmethod
    def _is_empty(conn: sqlite3.Connection) -> bool:
        """Whether the database holds no schema at all (a new file: lockgate may make it its own)."""
        return bool(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0)

    def _migrate(self) -> None:
        conn = self._require()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS lockgate_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM lockgate_migrations").fetchall()}
            refuse_newer("sqlite", done, self.path)  # another process may have migrated since open read it
            for version, name, sql in migrations("sqlite"):
                if version in done:
                    continue
                for statement in _split_statements(sql):
                    if not _adds_an_existing_column(conn, statement):
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO lockgate_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, time.time()),
                )
                log.info("applied sqlite migration %04d_%s", version, name)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        if self._conn is None:
            return
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        self._flush()
        while self._pending or self._committing is not None:
            if self._committing is not None:  # a COMMIT on its thread
                await asyncio.shield(self._committing)
            else:  # another connection holds the write lock: wait for it (or for the busy timeout)
                await asyncio.sleep(self._busy_wait)
            self._flush()
        self._conn.close()
        self._conn = None

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the SQLite store is not open (use the engine as 'async with')")
        return self._conn

    # -- writes -------------------------------------------------------------------------

    async def write(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.write_soon(op, *args, **kwargs)

    def write_soon(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        self._require()
        assert self._loop is not None
        future: asyncio.Future[T] = self._loop.create_future()
        self._pending.append((Call(op, args, kwargs), future))
        self._schedule()
        return future

    def write_nowait(self, op: Op[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> None:
        if self._conn is None:
            return
        self._pending.append((Call(op, args, kwargs), None))
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self._conn is None or self._committing is not None:
            return  # a COMMIT on its thread flushes again as it ends
        cut = group_cut(len(self._pending), self._crowded)
        batch, self._pending = self._pending[:cut], self._pending[cut:]
        self._crowded = bool(self._pending)
        try:
            self._flush_batch(batch)
        finally:
            if self._pending:
                self._schedule()  # the rest goes in the next commit (a requeue has scheduled its own)

    def _flush_batch(self, batch: list[tuple[Call, asyncio.Future[Any] | None]]) -> None:
        conn, tx = self._conn, self._tx
        assert conn is not None and tx is not None
        outcomes: list[tuple[bool, Any]] = []
        single = len(batch) == 1
        tx.ledger_grew = False
        guarded, self._guarded = self._guarded, False
        tx.committing = [] if single or not guarded else None  # a refusal then undoes the whole attempt
        # A batch of nothing but claims is committed unsynced (coalesce.volatile); SQLite takes the setting
        # only outside a transaction.
        relaxed = self.synchronous != "normal" and all_volatile([call for call, _ in batch])
        if relaxed:
            tx.committing = None  # its COMMIT is not sent from a thread: the setting is put back right after it
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            if not self._begin(batch, guarded):
                return
            if not single and not guarded:
                outcomes = self._optimistic(batch, tx)
            for op, _ in batch if not outcomes else ():
                if not single:
                    conn.execute("SAVEPOINT op")
                try:
                    outcomes.append((True, run_sync(op(tx))))
                    if not single:
                        conn.execute("RELEASE op")
                except BaseException as exc:  # Fenced is a BaseException: a refusal all the same
                    if single:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append(
                        (False, _failed("write", self.path, exc) if isinstance(exc, sqlite3.Error) else exc)
                    )
            if tx.ledger_grew:
                tx.count_ledger()
            committing, tx.committing = tx.committing or [], None
            if committing:
                self._commit_aside(batch, outcomes, committing)
                return
            conn.execute("COMMIT")
            self.commits += 1
        except _LockLost:
            self._requeue(batch, guarded=True)
            return
        except BaseException as exc:
            tx.committing = None
            self._failed_batch(batch, exc)
            return
        finally:
            if relaxed:
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        self._settle(batch, outcomes)

    def _failed_batch(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], exc: BaseException) -> None:
        """The batch did not commit: roll back what is open, and fail every call's future with ``exc``."""
        conn, single = self._require(), len(batch) == 1
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if self.observer is not None and (not single or isinstance(exc, sqlite3.Error)):
            self.observer.store_error("commit")
        error = exc if single and not isinstance(exc, sqlite3.Error) else _failed("commit", self.path, exc)
        for _, fut in batch:
            if fut is not None and not fut.done():
                fut.set_exception(error)
            elif fut is None:
                log.warning("introspection write lost: %s", exc)

    def _commit_aside(
        self,
        batch: list[tuple[Call, asyncio.Future[Any] | None]],
        outcomes: list[tuple[bool, Any]],
        committing: list[tuple[Callable[[], None], Callable[[], None]]],
    ) -> None:
        """COMMIT on a thread of its own, with what the batch asked to start as it goes out started first.

        The loop runs what was so started (a run handed a slot, a step handed a flow slot) while the file
        syncs, instead of waiting on its thread: the slot is not idle for the sync. Nothing else uses the
        connection until the COMMIT ends (writes queue, reads wait), and should it fail, what was started
        is undone before anything else is decided."""
        assert self._loop is not None
        self._committing = self._loop.create_future()
        for sent, _ in committing:
            sent()
        self._loop.create_task(self._commit_thread(batch, outcomes, committing))

    async def _commit_thread(
        self,
        batch: list[tuple[Call, asyncio.Future[Any] | None]],
        outcomes: list[tuple[bool, Any]],
        committing: list[tuple[Callable[[], None], Callable[[], None]]],
    ) -> None:
        conn = self._require()
        try:
            await asyncio.to_thread(_commit, conn)
        except BaseException as exc:
            undo_all([undone for _, undone in committing])
            self._failed_batch(batch, exc)
        else:
            self.commits += 1
            self._settle(batch, outcomes)
        finally:
            done, self._committing = self._committing, None
            if done is not None and not done.done():
                done.set_result(None)
            self._crowded = bool(self._pending)  # queued while the COMMIT was on its way: no burst at rest
            if self._pending:
                self._schedule()

    def _settle(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], outcomes: list[tuple[bool, Any]]) -> None:
        if self.observer is not None:
            self.observer.committed(len(batch))
        for (_, fut), (ok, value) in zip(batch, outcomes, strict=True):
            if fut is None:
                if not ok:
                    log.warning("introspection write failed: %r", value)
                continue
            if fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    def _begin(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], guarded: bool) -> bool:
        """``BEGIN IMMEDIATE``; ``False`` when another connection holds the write lock: the batch is queued
        again and tried on a timer, so the loop goes on running everything else meanwhile (a busy handler
        would sleep on the loop's thread). Past ``busy_timeout_ms`` of trying, the lock error is raised."""
        try:
            self._require().execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            now = time.monotonic()
            if self._busy_since is None:
                self._busy_since = now
            elif now - self._busy_since >= self.busy_timeout_ms / 1000:
                self._busy_since, self._busy_wait = None, BUSY_WAIT[0]
                raise
            self._requeue(batch, guarded)
            return False
        self._busy_since, self._busy_wait = None, BUSY_WAIT[0]
        return True

    def _requeue(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], guarded: bool) -> None:
        """Put ``batch`` back ahead of what was queued since, and flush again after a jittered wait."""
        assert self._loop is not None
        self._pending = batch + self._pending
        self._guarded = self._guarded or guarded
        wait = self._busy_wait * (0.5 + _JITTER.random())
        self._busy_wait = min(self._busy_wait * 2, BUSY_WAIT[1])
        self._flush_scheduled = True
        self._loop.call_later(wait, self._flush)

    def _optimistic(
        self, batch: list[tuple[Call, asyncio.Future[Any] | None]], tx: _SQLiteTx
    ) -> list[tuple[bool, Any]]:
        """Run every op of a batch without savepoints (the common case: none refuses); ``[]`` when one
        did, after rolling back to a fresh transaction in which the batch runs again op by op, guarded.

        A run of consecutive calls of an op with a many-at-once form runs as one call of that form.
        """
        assert self._conn is not None
        conn = self._conn
        try:
            return [(True, value) for value in run_sync(run_calls(tx, [call for call, _ in batch]))]
        except BaseException:  # a refusal: nothing of this attempt is kept
            tx.committing = None  # op by op now, each under its savepoint
            conn.execute("ROLLBACK")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _busy(exc):  # another connection took the lock in between: the batch is tried again, guarded
                    raise _LockLost from exc
                raise
            return []

    def join(self, conn: Any) -> contextlib.AbstractAsyncContextManager[Joined]:
        """Run ops in the caller's open transaction on ``conn``, a ``sqlite3`` connection to this file."""
        self._require()
        return join_sqlite(self.path, lambda raw: _SQLiteTx(raw, self._queries), self.read, conn)

    # -- reads --------------------------------------------------------------------------

    async def read(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._require()
        assert self._tx is not None
        if self._committing is not None:  # the connection is the COMMIT's until it ends
            await asyncio.shield(self._committing)
        waited, wait = 0.0, BUSY_WAIT[0]
        while True:
            try:
                return run_sync(op(self._tx, *args, **kwargs))
            except sqlite3.Error as exc:
                # Busy (a recovery or checkpoint another connection runs): try again on a timer, not on the thread.
                if _busy(exc) and waited < self.busy_timeout_ms / 1000:
                    await asyncio.sleep(wait)
                    waited, wait = waited + wait, min(wait * 2, BUSY_WAIT[1])
                    continue
                if self.observer is not None:
                    self.observer.store_error("read")
                raise _failed("read", self.path, exc) from exc


def _commit(conn: sqlite3.Connection) -> None:
    """COMMIT, on the thread ``_commit_aside`` gives it."""
    conn.execute("COMMIT")


class _LockLost(Exception):
    """Between a refused optimistic try and its guarded rerun, another connection took the write lock."""


def _busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` (any extended code): a lock another connection holds."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


def _failed(what: str, path: str, exc: BaseException) -> StoreError:
    """The error a failed commit or read raises: ``StoreCorrupt`` where the file itself is damaged,
    ``StoreFull`` where its disk is full."""
    if getattr(exc, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return StoreCorrupt(f"the SQLite database {path} is corrupt ({exc}); restore it from a backup")
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StoreFull(f"SQLite {what} failed: the disk holding {path} is full ({exc}); free space to resume")
    return StoreError(f"SQLite {what} failed: {exc}")


_ADD_COLUMN = re.compile(r"^\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", re.IGNORECASE)


def _adds_an_existing_column(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` adds a column its table already has (a migration that repairs older stores)."""
    match = _ADD_COLUMN.match(statement)
    if match is None:
        return False
    table, column = match.groups()
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


def _split_statements(sql: str) -> list[str]:
    statements, buf = [], []
    for line in sql.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        if line.rstrip().endswith(";") and sqlite3.complete_statement("\n".join(buf)):
            statements.append("\n".join(buf))
            buf = []
    if "".join(buf).strip():
        statements.append("\n".join(buf))
    return statements
