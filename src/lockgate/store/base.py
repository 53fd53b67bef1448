"""The store seam: what the engine asks of a database, whatever the dialect.

The engine never writes SQL. It hands the store *operations*: small async functions
that take a ``Tx`` and run named queries on it (``store/runs.py``, ``journal.py``, ...). A dialect supplies
the SQL text for each name (``store/sql/<dialect>/*.sql``) and decides how operations
are grouped into transactions. Writes are group-committed: every operation submitted
while the previous commit was in flight goes into the next transaction; one refusal
does not undo its neighbours (the batch is then run again, each op under a savepoint).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from ..errors import ForeignTransaction
from ..observer import Observer

__all__ = [
    "CHANGED", "GROUP_FIRST", "GROUP_LIMIT", "LISTENING", "Joined", "Op", "Outcome", "Row", "Store", "Tx", "group_cut",
    "undo_all",
]

log = logging.getLogger("lockgate.store")

CHANGED = "changed"
"""The wake-up channel a store tells after any other process's commit (``Store.add_listener``)."""

LISTENING = "listening"
"""The wake-up a store that publishes them tells as it begins to hear them, and again after each
reconnection: what others published before may have been missed."""

GROUP_LIMIT = 256
"""The most writes one group commit takes. What a transaction locks it holds until its COMMIT
(SQLite's write lock, the whole file; a gate key's lock on PostgreSQL, taken by each start parked
under it): another process's claim or end waits for one slice of a burst, not for all of it."""

GROUP_FIRST = 64
"""A burst of more than ``GROUP_LIMIT`` writes queued at an idle writer (a client's thousands of
gathered starts) commits its first ``GROUP_FIRST`` alone: what they start runs while the rest are
written."""


def group_cut(queued: int, crowded: bool) -> int:
    """How many of ``queued`` writes the next group commit takes; ``crowded``: they queued while the
    last commit was in flight (a burst's head has gone)."""
    if queued <= GROUP_LIMIT:
        return queued
    return GROUP_LIMIT if crowded else GROUP_FIRST

T = TypeVar("T")
P = ParamSpec("P")
Row = dict[str, Any]


def undo_all(undone: Sequence[Callable[[], None]]) -> None:
    """Call the ``undone`` of each ``Tx.when_committing`` whose COMMIT went out and did not commit (or whose
    outcome cannot be learnt); one that fails is logged and the others still run."""
    for call in undone:
        try:
            call()
        except Exception:
            log.exception("undoing what a commit's sending began failed")


class Tx(abc.ABC):
    """One transaction (or a read-only view) on which named queries run."""

    dialect: str
    single_writer = False  # True where the store runs one write transaction at a time (SQLite)
    # True where one statement for many rows costs less than one per row: a server's, each statement
    # its share of a round trip, a parse and a plan. In-process (SQLite), a statement per row is cheaper.
    rows_in_one = False

    @abc.abstractmethod
    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run the named query with ``params``; rows as dicts (empty for statements)."""

    @abc.abstractmethod
    async def execute_many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        """Run the named statement once per parameter set."""

    async def execute_all(self, queries: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[list[Row]]:
        """Run the named queries in order, each with its parameters; their rows, query by query.

        A store that pipelines its statements reads them all in one round trip.
        """
        return [await self.execute(name, params) for name, params in queries]

    async def execute_values(self, name: str, rows: Sequence[Mapping[str, Any]]) -> list[Row]:
        """Run a one-row ``INSERT ... VALUES`` query for every row of ``rows``, in order.

        Dialects that can send many rows in one statement do (the query's ``VALUES``
        group is repeated); what ``RETURNING`` gives comes back for all rows together.
        """
        out: list[Row] = []
        for row in rows:
            out += await self.execute(name, row)
        return out

    def when_committing(self, sent: Callable[[], None], undone: Callable[[], None]) -> bool:
        """Call ``sent`` as this transaction's COMMIT goes out, and ``undone`` if it then does not commit.

        ``sent`` is called once every statement before the COMMIT is on its way, ``undone``
        when the transaction is rolled back or fails, and when whether it committed cannot be
        learnt, before the writes are tried again; a commit calls neither again. ``False``:
        this transaction does not tell (its commit's answer is the caller's only news).
        """
        return False

    async def expect(self, name: str, params: Mapping[str, Any]) -> bool:
        """Run a write that should change a row; whether it did (here: whether it returned one).

        Stores count the rows the write changed where they can, so the query needs no
        ``RETURNING``. A store that pipelines its statements may answer ``True`` at once
        and check at commit: if no row changed after all, it runs the batch again,
        unpipelined, and here the op learns ``False``. So a write whose ``False`` leads
        elsewhere (a refusal, a slower path) must change nothing when it changes no row.
        """
        return bool(await self.execute(name, params))

    async def expect_rows(self, name: str, params: Mapping[str, Any], n: int) -> bool:
        """``expect`` for a write meant to change ``n`` rows: whether it changed them all (at least ``n``).

        On ``False`` the op refuses (raises), and its attempt is rolled back: a write that
        changed some of its rows leaves nothing behind. Here, by the rows it returned.
        """
        return len(await self.execute(name, params)) >= n

    async def insert(self, name: str, params: Mapping[str, Any]) -> int:
        """Run a one-row ``INSERT`` that always adds its row, and give that row's id.

        Here the query's ``RETURNING id`` gives it. A store that knows the id of the row it
        just inserted (SQLite's ``lastrowid``) reads it there instead, and its query need not
        return it: ``RETURNING`` costs SQLite more than the insert itself.
        """
        return int(await self.scalar(name, params))

    async def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = await self.execute(name, params)
        return rows[0] if rows else None

    async def scalar(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        row = await self.one(name, params)
        return None if row is None else next(iter(row.values()))


Op = Callable[Concatenate[Tx, P], Awaitable[T]]
"""An operation: an async function whose first argument is the transaction."""

Outcome = Literal["open", "committed", "rolled back"]


class Joined(abc.ABC):
    """The caller's own open transaction, joined: ops run on ``tx`` and commit or roll back with it."""

    tx: Tx

    @abc.abstractmethod
    async def outcome(self, ticket: str) -> Outcome:
        """What became of the caller's transaction, told by the ledger row ``ticket`` it wrote.

        ``committed`` once the row is visible to the store; ``rolled back`` once the
        transaction ended without it (rolled back, or its savepoint was); else ``open``.
        """


class Store(abc.ABC):
    """A database holding lockgate's tables."""

    dialect: str
    url: str
    observer: Observer | None = None  # told of each group commit's size and of each failure (observer.py)
    schema_mode = "migrate"
    """What ``open`` does with the schema, set before it: ``migrate`` applies pending migrations;
    ``check`` refuses a database whose schema is not current (``StoreError``) and writes no DDL;
    ``read`` checks too and opens the database read-only (every write is refused)."""
    own_clock = False
    """Whether its processes keep the database's time rather than their own (PostgreSQL: many
    hosts, each clock its own); SQLite's processes share one machine's clock."""
    created = False
    """Set by ``open`` in ``migrate`` mode: whether it made the lockgate tables (a new database)."""
    share_file = True
    """SQLite: whether lockgate may add its tables to a file that holds an application's tables.
    Code may (a transactional start shares the application's file, docs/transactions.md); the
    CLI sets it false, so that a mistyped ``--store`` never writes into another application's file."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and, as ``schema`` says, apply pending migrations or check that none is pending."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush queued writes and disconnect."""

    def fit_lease(self, lease: float) -> None:  # noqa: B027
        """An engine's lease (seconds), told before ``open``: a store on the network finds a dead link
        well within it, so a partitioned database is noticed within about one lease."""

    @abc.abstractmethod
    async def write(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``op(tx, *args, **kwargs)`` in the next group commit; resolves once it is durable."""

    @abc.abstractmethod
    def write_nowait(self, op: Op[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue ``op`` for the next group commit without waiting (introspection rows)."""

    def write_soon(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        """Queue ``op`` now, in order with ``write_nowait``; a future resolved with its answer once it is durable."""
        return asyncio.ensure_future(self.write(op, *args, **kwargs))

    @abc.abstractmethod
    async def read(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a read-only ``op(tx, *args, **kwargs)`` on committed data."""

    def join(self, conn: Any) -> AbstractAsyncContextManager[Joined]:
        """Run ops inside the caller's open transaction on ``conn``, a connection to this very database.

        Inside, the ops' writes stand or fall with the caller's transaction (a savepoint
        undoes only them if one raises). ``ForeignTransaction`` (nothing written) when
        ``conn`` is not in a transaction, or is connected elsewhere.
        """
        raise ForeignTransaction(f"a {self.dialect} store cannot join the caller's transaction")

    def add_listener(self, callback: Callable[[str, str], None]) -> None:  # noqa: B027
        """Be told of wake-ups other processes publish (``channel``, ``payload``): ``runs`` (a run became
        claimable; its payload, where the store gives one, a token the workers rank themselves by:
        ``engine/claim_order.py``), ``gate`` (gate work appeared), ``events`` (a domain event was published),
        ``workers`` (a worker started or stopped), ``LISTENING`` (see there), and, from a store that can tell,
        ``CHANGED`` after any other process's commit."""

    def hear_ends(self) -> None:  # noqa: B027
        """Have the listeners told ``ended`` when another process ends runs (where the store can tell; a
        process awaiting no other process's run is spared the news of every end)."""

    def executing_nothing(self, idle: bool) -> None:  # noqa: B027
        """Whether this process executes no run now: a store that looks for other processes' commits
        may look more often while it does (``sqlite_wakeups.ChangeWatch.eager``)."""

    def awaiting_others(self, waiting: bool) -> None:  # noqa: B027
        """Whether this process awaits the end of a run another process executes: a store that looks for
        other processes' commits may look more often while it does, as while it executes nothing."""

    async def notify(self, tx: Tx, channel: str, payload: str) -> None:  # noqa: B027
        """Publish a wake-up to other processes when ``tx`` commits (no-op where unsupported)."""

    @property
    def cross_process_wakeups(self) -> bool:
        """Whether other processes' writes arrive as notifications (else: poll)."""
        return False

    @property
    def ranked_wakeups(self) -> bool:
        """Whether a ``runs`` wake-up carries a token the workers rank themselves by (``engine/claim_order.py``);
        else every worker that hears it claims, and knowing the live workers is of no use."""
        return False

    @property
    def tells_commits(self) -> bool:
        """Whether the listeners also hear ``CHANGED`` after any other process's commit."""
        return False
