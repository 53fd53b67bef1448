"""The PostgreSQL store's write queue and group commit.

Writes are group-committed by one writer task on a connection of its own: every
operation queued while the previous commit was in flight runs in the next transaction
(``batches.py`` says how). When nothing is queued and the writer is idle, a lone write's
caller runs it itself, without waking the writer task. A lost connection never loses an
acknowledged write and never hangs a caller: while COMMIT has not been sent, the batch is
re-run on a fresh connection (a few times, with backoff); once it has been sent the
outcome is unknown, the transaction's id tells it, and failing that the writers are told so.
What an op began as its transaction's COMMIT went out (``Tx.when_committing``) is undone at the
first error, before the outcome is learnt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ParamSpec, TypeVar

import psycopg

from ...errors import StoreError
from ..base import Op, group_cut
from ..coalesce import Call, runs_lone
from ..direct import DirectStatement
from .batches import Attempt, Batches
from .connections import STARTED, TIMELINE
from .failures import RETRIES, StalePlan, backoff, disk_full, fail, first_line
from .tx import Conn, idle

__all__ = ["Writer"]

log = logging.getLogger("lockgate.store")
T = TypeVar("T")
P = ParamSpec("P")


class Writer(Batches):
    """The queue of writes and the task that commits them in groups."""

    _held: bool  # whether the writer's connection is spoken for: a batch is being committed, or a lone write runs on it
    _crowded: bool  # whether writes queued up while the last commit was in flight
    _finisher: asyncio.Task[None] | None  # reads a cancelled lone write's answer
    _lone_done: asyncio.Event  # clear while a caller runs a lone write on it
    _queue: list[tuple[Call, asyncio.Future[Any] | None]]
    _work: asyncio.Event | None
    commits: int

    async def write(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._require()
        call = Call(op, args, kwargs)
        if not self._queue and not self._held and not self._crowded and runs_lone(op):
            conn = self._conn
            if conn is not None and not self._down and idle(conn):
                outcome = await self._lone_here(conn, call)
                if outcome is not None:
                    return outcome[1]  # type: ignore[no-any-return]
        return await self._enqueue(call)  # type: ignore[no-any-return]

    async def _lone_here(self, conn: Conn, call: Call) -> tuple[bool, Any] | None:
        """Run a lone call on the idle writer's connection from its caller's own task; ``None``: queue it.

        The writer would take it alone anyway (nothing is queued), and this saves two hops
        through the event loop. Not while writes crowd in (some queued up during the last
        commit): the writer, woken a moment later, would have taken more than this one.
        Whatever goes wrong here, the call is queued and the writer, with its reconnection
        and retries, decides: a lone write is repeatable.
        """
        self._held = self._writing = True
        self._lone_done.clear()
        self._committing_since = time.monotonic()
        try:
            outcomes = await self._lone(conn, call)
        except asyncio.CancelledError:
            # The caller is gone with the statement out: its answer is read before anyone else uses the connection.
            self._finisher = asyncio.get_running_loop().create_task(self._finish_lone(conn))
            raise
        except Exception as exc:
            if isinstance(exc, psycopg.OperationalError) or not idle(conn):
                await self._drop_writer_connection()
            outcomes = None
        self._release_lone()
        if outcomes is None:
            return None
        self.commits += 1
        if self.observer is not None:
            self.observer.committed(1)
        return outcomes[0]

    async def _finish_lone(self, conn: Conn) -> None:
        try:
            if not idle(conn):
                await DirectStatement.finish(conn)
        except Exception:
            await self._drop_writer_connection()
        finally:
            self._release_lone()

    def _release_lone(self) -> None:
        self._committing_since = None
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

    def write_soon(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        self._require()
        return self._queued(Call(op, args, kwargs))

    async def _enqueue(self, bound: Call) -> Any:
        return await self._queued(bound)

    def _queued(self, bound: Call) -> asyncio.Future[Any]:
        assert self._work is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((bound, future))
        self._work.set()
        return future

    async def _write_loop(self) -> None:
        assert self._work is not None
        while True:
            await self._work.wait()
            self._work.clear()
            while self._queue and not self._held:  # a lone write running inline sets the event when it is done
                cut = group_cut(len(self._queue), self._crowded)
                batch, self._queue = self._queue[:cut], self._queue[cut:]
                self._held = True
                self._committing_since = time.monotonic()
                try:
                    await self._commit(batch)
                except asyncio.CancelledError:
                    fail(batch, StoreError("the PostgreSQL store was closed before this write was committed"))
                    raise
                except Exception as exc:  # the writer must outlive any one batch
                    log.exception("PostgreSQL group commit failed")
                    self._failed("commit")
                    fail(batch, StoreError(f"PostgreSQL commit failed: {exc}"))
                finally:
                    self._committing_since = None
                    self._held = False
                    self._crowded = bool(self._queue)

    async def _commit(self, batch: list[tuple[Call, asyncio.Future[Any] | None]]) -> None:
        """Run ``batch`` in one transaction and settle each future with its op's outcome."""
        state = Attempt()
        try:
            for attempt in range(RETRIES + 1):
                state, since = Attempt(), time.monotonic()
                try:
                    outcomes = await self._run_batch(batch, state)
                except (psycopg.OperationalError, StalePlan) as exc:
                    # Undone at once, not once the outcome is learnt: the server may have let go of what the
                    # transaction locked, and another process take it, long before this one learns anything.
                    # Should it have committed after all, its answer starts what was stopped again.
                    state.undo()
                    if disk_full(exc) and not state.committing:  # refused whole: nothing of it is kept
                        self._failed("commit")
                        fail(batch, self._full(exc))
                        return
                    await self._trouble(exc, state.conn, since)
                    if state.committing:
                        committed = await self._committed(state)
                        if committed is None:
                            self._failed("commit")
                            fail(
                                batch,
                                StoreError(
                                    "the PostgreSQL connection failed while committing; the write may or may not "
                                    f"have been applied: {first_line(exc)}"
                                ),
                            )
                            return
                        if committed:
                            self._settle(batch, state.outcomes)
                            return
                    if attempt == RETRIES:
                        self._failed("commit")
                        fail(batch, StoreError(f"PostgreSQL at {self._where} is unreachable: {first_line(exc)}"))
                        return
                    await asyncio.sleep(backoff(attempt))
                    continue
                except psycopg.Error as exc:  # BEGIN, SAVEPOINT or COMMIT refused: a retry would not mend it
                    state.undo()
                    self._failed("commit")
                    fail(batch, StoreError(f"PostgreSQL commit failed: {first_line(exc)}"))
                    return
                self._reachable(since)
                self._settle(batch, outcomes)
                return
        except BaseException:  # cancelled (the store closing), or a fault: nothing is known to be kept
            state.undo()
            raise

    def _settle(self, batch: list[tuple[Call, asyncio.Future[Any] | None]], outcomes: list[tuple[bool, Any]]) -> None:
        self.commits += 1
        if self.observer is not None:
            self.observer.committed(len(batch))
        for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future is None:
                if not ok:
                    log.warning("introspection write failed: %r", value)
            elif not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    async def _committed(self, state: Attempt) -> bool | None:
        """Whether the transaction whose COMMIT got no answer was committed; ``None`` if that cannot be learnt."""
        if state.xid is None:
            return True  # it wrote nothing: its results hold whichever way it ended
        assert self._pool is not None
        for attempt in range(RETRIES + 1):
            conn = None
            try:
                async with self._pool.connection() as conn:
                    cursor = await conn.execute(f"SELECT {TIMELINE} AS timeline, {STARTED} AS started")
                    server = await cursor.fetchone()
                    if server is not None and state.timeline is not None and server["timeline"] != state.timeline:
                        # A standby promoted since (a failover): transaction ids it had not received are
                        # handed out again there, so what it says of this one may be of another.
                        log.warning(
                            "could not learn the outcome of transaction %s: it ran on WAL timeline %s, the server "
                            "now answering is on %s (a failover)",
                            state.xid,
                            state.timeline,
                            server["timeline"],
                        )
                        return None
                    if server is not None and state.started is not None and server["started"] != state.started:
                        return await after_restart(conn, state.xid, server["started"])
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
                log.warning("could not learn the outcome of transaction %s: %s", state.xid, first_line(exc))
                return None
            if status == "committed":
                return True
            if status == "aborted":
                return False
            if status is None:  # too old for the server to remember
                return None
            await asyncio.sleep(backoff(attempt))
        return None


async def after_restart(conn: Conn, xid: str, started: str) -> bool | None:
    """Whether transaction ``xid``, whose COMMIT got no answer before the server restarted, was committed.

    A commit that was durable when the server went down is replayed by its recovery, and the
    ids handed out after it come after its id: its status reads ``committed``. One that was
    not is gone, and its id may have been handed out again after the restart (an id whose
    transaction logged nothing before the crash is not remembered): whatever the status says
    then is another transaction's. So anything but ``committed`` means not committed, and
    ``committed`` is the outcome only if the commit is older than the restart (commit
    timestamps, where ``track_commit_timestamp`` is on); else it cannot be learnt.
    """
    try:
        cursor = await conn.execute(
            "SELECT pg_xact_status(%s::xid8) AS status, current_setting('track_commit_timestamp') = 'on' AS stamped",
            (xid,),
        )
        row = await cursor.fetchone()
    except psycopg.errors.InvalidParameterValue:  # "in the future": never logged, and not handed out again yet
        return False
    if row is None or row["status"] is None:
        return None
    if row["status"] != "committed":
        return False
    if row["stamped"]:
        cursor = await conn.execute(
            "SELECT pg_xact_commit_timestamp((%s::bigint %% 4294967296)::text::xid) < %s::timestamptz AS before",
            (xid, started),
        )
        stamp = await cursor.fetchone()
        if stamp is not None and stamp["before"] is not None:
            return bool(stamp["before"])
    log.warning(
        "could not learn the outcome of transaction %s: its COMMIT got no answer and the server restarted since, "
        "so its id may have been handed out again",
        xid,
    )
    return None
