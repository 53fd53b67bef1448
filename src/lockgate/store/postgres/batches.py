"""How the PostgreSQL writer runs one batch: a lone repeatable write in autocommit, pipelined, or guarded.

A batch of one op marked ``lone`` whose one write is a repeatable statement skips the
transaction (``_lone``). Else the batch is pipelined without savepoints (``_optimistic``,
``store/wire.py``); if any op refuses or any statement fails, it runs again op by op, each
under its own savepoint (``_guarded``), so one refusal undoes only itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from ...errors import StoreError
from ..base import undo_all
from ..coalesce import Call, lock_first, run_calls, runs_lone
from ..direct import DirectStatement, Unsupported
from ..wire import XID, Unmet, WireTx
from .connections import Connections
from .failures import discarding_stale_plans, is_stale_plan, refusal_error
from .tx import IDLE, PIPELINES, Conn, LoneTx, PostgresTx, WriterConn

__all__ = ["Attempt", "Batches"]


class Attempt:
    """How far one attempt at a batch got: once COMMIT is sent, its outcome is the server's to tell."""

    def __init__(self) -> None:
        self.committing = False
        self.xid: str | None = None  # the transaction's id, if it wrote anything
        self.pid: int | None = None  # the server process that ran it
        self.conn: Any = None  # the connection it ran on
        self.timeline: str | None = None  # the WAL timeline of that connection's server
        self.started: str | None = None  # when that server had started
        self.outcomes: list[tuple[bool, Any]] = []
        self.sent_commit: list[Callable[[], None]] = []  # what undoes what was done as COMMIT went out

    def undo(self) -> None:
        """The attempt did not commit, or whether it did cannot be learnt: undo what its COMMIT's sending began."""
        undone, self.sent_commit = self.sent_commit, []
        undo_all(undone)


class Batches(Connections):
    """The writer's ways of running a batch of queued calls on its connection."""

    _queries: dict[str, str]
    _silent: frozenset[str]
    _lone_writes: Mapping[str, DirectStatement]

    async def _run_batch(
        self, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: Attempt
    ) -> list[tuple[bool, Any]]:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        conn = await self._writer_connection()
        state.conn, state.timeline, state.started = conn, self._timeline, self._started
        self._writing = True
        try:
            async with discarding_stale_plans(conn):
                outcomes = None
                if len(batch) == 1 and runs_lone(batch[0][0].op):
                    outcomes = await self._lone(conn, batch[0][0])
                if outcomes is None and PIPELINES:
                    outcomes = await self._optimistic(conn, batch, state)
                if outcomes is None:
                    outcomes = await self._guarded(conn, batch, state)
                return outcomes
        except BaseException:
            if conn.closed or conn.broken or state.committing:
                await self._drop_writer_connection()
            elif conn.info.transaction_status != IDLE:
                try:
                    await conn.execute("ROLLBACK")
                except BaseException:
                    await self._drop_writer_connection()
                    raise
            raise
        finally:
            self._writing = False

    async def _lone(self, conn: Conn, call: Call) -> list[tuple[bool, Any]] | None:
        """Run a lone call whose one write is repeatable in autocommit; ``None`` when it must run in a transaction.

        That includes an ``expect`` that changed no row (nothing was written): in a transaction
        the op learns ``False``. A lost answer leaves the attempt uncommitted in the writer's
        eyes, so the batch runs again; the write being repeatable, that is safe.
        """
        tx = LoneTx(conn, self._queries, self._lone_writes)
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
                if is_stale_plan(exc):
                    raise
                return None  # refused by the server, in its own transaction: nothing was written
            if expect and changed < 1:
                return None
        return [(True, value)]

    async def _optimistic(
        self, conn: WriterConn, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: Attempt
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
                    if is_stale_plan(exc):
                        raise
                    return await self._abandon(tx, exc if len(batch) == 1 else None)
                state.xid, state.pid = tx.xid, conn.info.backend_pid
                state.outcomes = [(True, value) for value in values]
                state.committing = True
                state.sent_commit = tx.sent_commit
                await tx.commit()
        except psycopg.Error as exc:
            if not state.committing or conn.closed or conn.broken or is_stale_plan(exc):
                raise  # if COMMIT got no answer, whether it committed is learnt from the transaction's id
            state.committing = False  # the server answered: it did not commit
            state.undo()
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
            if is_stale_plan(exc):
                raise
            failed = True
        await tx.rollback()
        if refusal is None or failed or isinstance(refusal, (psycopg.Error, Unmet)):
            return None
        return [(False, refusal_error(refusal))]

    async def _guarded(
        self, conn: Conn, batch: list[tuple[Call, asyncio.Future[Any] | None]], state: Attempt
    ) -> list[tuple[bool, Any]]:
        """Run the batch op by op, each under a savepoint, waiting for every statement."""
        single = len(batch) == 1  # a lone op needs no savepoint: its refusal rolls back the transaction
        outcomes: list[tuple[bool, Any]] = []
        tx = PostgresTx(conn, self._queries)
        await conn.execute("BEGIN")
        await lock_first(tx, [op for op, _ in batch])  # outside any savepoint: held to the end
        for op, _ in batch:
            if not single:
                await conn.execute("SAVEPOINT op")
            try:
                value = await op(tx)
            except (psycopg.OperationalError, asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # the op's refusal (Fenced is a BaseException)
                if is_stale_plan(exc):
                    raise
                if not single:
                    await conn.execute("ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op")
                outcomes.append((False, refusal_error(exc)))
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
