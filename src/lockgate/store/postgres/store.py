"""The PostgreSQL store: its configuration, lifecycle and reads; the writer, outages and wake-ups are mixed in.

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

Where each part lives: the write queue and group commit in ``writer.py``, the ways one
batch runs in ``batches.py``, the connections and outage handling in ``connections.py``
(telling failures apart: ``failures.py``), wake-ups in ``notify.py``, migrations in
``migrate.py``, the transactions ops run on in ``tx.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ...clock import stop_tasks
from ...errors import StoreError
from ..base import Op, Tx
from ..coalesce import Call
from ..direct import DirectStatement
from ..sql_files import load_queries, repeatable_queries
from .failures import RETRIES, StalePlan, backoff, discarding_stale_plans, disk_full, fail, first_line, redact
from .joined import Joining
from .migrate import check, migrate
from .notify import Wakeups
from .stalls import STALLED, Stalls
from .tx import Conn, PostgresTx, WriterConn, silent
from .writer import Writer

__all__ = ["PostgresStore"]

T = TypeVar("T")
P = ParamSpec("P")
_RETURNS_ROWS = re.compile(r"\bRETURNING\b[^()]*;?\s*$", re.IGNORECASE)  # outside any WITH's parentheses
_CONNECT_TIMEOUT = "5"  # libpq connect_timeout unless the URL sets one
_OPTIONS = frozenset({"pool_size", "pool_timeout", "schema", "statement_timeout"})  # lockgate's; the rest: libpq
# A dead peer is found by the kernel, whatever the connection is doing: idle (keepalives: 5 s, then
# 3 probes 2 s apart) or with data unacknowledged (tcp_user_timeout, ms). Without them a query on a cut
# link waits for TCP's retransmissions (minutes). Each is the URL's own when it sets one.
_WIRE = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
# Of an engine's lease (fit_lease): the longest its data may wait unacknowledged. A run's lease is
# renewed every third of it; a cut that breaks a renewal in flight is then found before the lease ends,
# and a connection the cut left waiting is given up (and made again) within a second or two of healing.
_UNACKNOWLEDGED = 0.5
_FLOOR = 2.0  # seconds: a healthy peer's kernel acknowledges in milliseconds, even on a loaded host
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


async def _noop(tx: Tx) -> None:
    return None


def _positive(url: str, option: str, raw: str, *, integer: bool) -> float:
    try:
        value = float(int(raw)) if integer else float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        kind = "a positive integer" if integer else "a positive number of seconds"
        raise ValueError(f"store URL {redact(url)!r}: {option} must be {kind}, not {raw!r}")
    return value


def _with_search_path(libpq: list[str], schema: str) -> list[str]:
    """libpq's ``options`` with ``-c search_path=<schema>`` added (to the caller's own options, if any)."""
    setting = quote(f"-c search_path={schema}", safe="")
    for i, item in enumerate(libpq):
        key, _, value = item.partition("=")
        if unquote(key) == "options":
            libpq[i] = f"{key}={value}%20{setting}"
            return libpq
    return [*libpq, f"options={setting}"]


class PostgresStore(Writer, Wakeups, Joining, Stalls):
    """``postgresql://user@host/db``; any option but these three is passed to libpq.

    ``pool_size`` (default 4) bounds the connections held; ``pool_timeout`` (seconds,
    default 5) is the longest one attempt waits for a connection while the server is away;
    ``statement_timeout`` (seconds, default 30) bounds each read, and how long any session
    of lockgate's may sit idle inside a transaction (a commit is watched instead: ``stalls.py``);
    ``schema`` (default: the connection's own ``search_path``) is the schema lockgate's
    tables live in, created at boot (every connection lockgate opens uses it).
    """

    dialect = "postgres"
    own_clock = True

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError(f"store URL {redact(url)!r} is not a postgresql:// URL")
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
        self.schema: str | None = mine.get("schema")
        if self.schema is not None:
            if not _SCHEMA.match(self.schema):
                raise ValueError(
                    f"store URL {redact(url)!r}: schema must be a lower-case identifier "
                    f"(letters, digits, '_'), not {self.schema!r}"
                )
            libpq = _with_search_path(libpq, self.schema)
        self._identity: tuple[str, str] | None = None
        given = {unquote(item.partition("=")[0]) for item in libpq}
        if "connect_timeout" not in given:
            libpq.append(f"connect_timeout={_CONNECT_TIMEOUT}")
        self.statement_timeout = _positive(url, "statement_timeout", mine.get("statement_timeout", "30"), integer=False)
        self._libpq, self._given = libpq, given
        self.conninfo = self._conninfo(_WIRE)
        self._where = redact(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
        self._queries = load_queries("postgres")
        self._silent = silent(self._queries)
        self._lone_writes = {
            name: DirectStatement(name, self._queries[name])
            for name in repeatable_queries("postgres")
            if not _RETURNS_ROWS.search(self._queries[name])  # a statement whose own rows come back
        }
        self._conn: WriterConn | None = None  # the writer's own
        self._timeline: str | None = None  # the WAL timeline its server was on when it connected
        self._started: str | None = None  # when its server had started, then
        self._writing = False  # whether a batch is using it
        self._held = False  # whether it is spoken for: a batch is being committed, or a lone write runs on it
        self._crowded = False  # whether writes queued up while the last commit was in flight
        self._finisher: asyncio.Task[None] | None = None  # reads a cancelled lone write's answer
        self._lone_done = asyncio.Event()  # clear while a caller runs a lone write on it
        self._lone_done.set()
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._queue: list[tuple[Call, asyncio.Future[Any] | None]] = []
        self._work: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._listeners: list[Callable[[str, str], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._hearing_ends = False
        self._origin = uuid.uuid4().hex  # tells our own notifications from other stores'
        self._down = False
        self._disk_full = False  # said once per spell of full disk (connections.py)
        self._outages = 0  # outages logged so far: a connection born before the last one is one of its casualties
        self._born: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.commits = 0
        self._committing_since: float | None = None  # the commit in flight, watched for stalls (stalls.py)
        self._stalled_at: float | None = None
        self._watcher: asyncio.Task[None] | None = None

    def _conninfo(self, wire: dict[str, str]) -> str:
        """libpq's URL: the caller's options, and ``wire``'s where the URL sets none of its own."""
        parts = urlsplit(self.url)
        libpq = self._libpq + [f"{key}={value}" for key, value in wire.items() if key not in self._given]
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(libpq), parts.fragment))

    def fit_lease(self, lease: float) -> None:
        """Find a dead link within about half of ``lease`` (10 s at most), not after the defaults' 10-11 s.

        Half the lease of unacknowledged data (2 s at least) breaks a query or a commit on a cut
        link, and keepalives at a third of it (1 s at least) an idle connection; the URL's own
        settings are kept. Connections opened from now on use them. A commit that waits longer
        than the lease is reported then (``stalls.py``), not after 10 s.
        """
        unacked = min(10.0, max(_FLOOR, lease * _UNACKNOWLEDGED))
        idle = min(5, max(1, round(lease / 3)))
        wire = {**_WIRE, "tcp_user_timeout": str(round(unacked * 1000)), "keepalives_idle": str(idle)}
        wire["keepalives_interval"] = str(min(2, max(1, round(lease / 10))))
        self.conninfo = self._conninfo(wire)
        self.stalled_after = min(STALLED, lease)

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        if self.schema_mode == "migrate":
            self.created = await migrate(self.conninfo, self._where, self.schema)
        else:
            await check(self.conninfo, self._where, redact(self.url))
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
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
        self._watch_commits()
        if self._listeners:
            self._start_listener()

    async def close(self) -> None:
        if self._pool is None or self._closing:
            return
        with contextlib.suppress(Exception):
            await self._enqueue(Call(_noop, (), {}))  # resolves once everything queued before it is committed
        self._closing = True
        await self._stop_watching()
        await self._lone_done.wait()  # a lone write its caller started after the last queued one
        await stop_tasks([task for task in (self._writer, self._listener) if task is not None])
        self._writer = self._listener = None
        fail(self._queue, StoreError("the PostgreSQL store was closed before this write was committed"))
        self._queue = []
        await self._drop_writer_connection()
        pool, self._pool = self._pool, None
        await pool.close()

    # -- reads --------------------------------------------------------------------------

    async def read(self, op: Op[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        pool = self._require()
        for attempt in range(RETRIES + 1):
            conn, since = None, time.monotonic()
            try:
                async with pool.connection() as conn, discarding_stale_plans(conn):
                    value = await op(PostgresTx(conn, self._queries), *args, **kwargs)
            except (psycopg.OperationalError, StalePlan) as exc:
                if disk_full(exc):  # a read spilling to disk: no retry mends it
                    self._failed("read")
                    raise self._full(exc) from exc
                await self._trouble(exc, conn, since)
                if attempt == RETRIES:
                    self._failed("read")
                    raise StoreError(f"PostgreSQL at {self._where} is unreachable: {first_line(exc)}") from exc
                await asyncio.sleep(backoff(attempt))
                continue
            except psycopg.Error as exc:
                self._failed("read")
                raise StoreError(f"PostgreSQL read failed: {first_line(exc)}") from exc
            self._reachable(since)
            return value
        raise AssertionError("unreachable")
