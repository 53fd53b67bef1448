"""PostgreSQL databases for tests: one migrated template per session, one copy per test.

Copying a template (``CREATE DATABASE ... TEMPLATE``) is much cheaper than migrating a
fresh database for every test. Where no server answers, PostgreSQL tests are skipped,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

PG_ADMIN_URL = os.environ.get("LOCKGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

# Test databases are named after the session that made them (host and pid), so a later session
# can drop those of sessions that were killed before cleaning up after themselves.
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
_SESSION = f"{_HOST}_{os.getpid()}"
_OURS = re.compile(r"^lockgate_(?:t|tpl)_([0-9a-f]{6})_(\d+)_[0-9a-f]+$")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI (where PostgreSQL must be there)."""
    if in_ci():
        pytest.fail(f"{reason} (PostgreSQL is required under CI)")
    pytest.skip(reason)


def database_url(name: str) -> str:
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def admin(sql: str) -> None:
    """Run one statement on the admin database (autocommit: CREATE/DROP DATABASE need it)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def create_database(name: str, template: str | None = None) -> None:
    """Create the test database ``name`` (a copy of ``template``), its commits not waiting for the disk.

    ``synchronous_commit = off`` for its sessions: a commit returns before its WAL is flushed, which
    only a crash of the server could tell (a few commits lost), and the tests never crash this shared
    server (those that crash one start their own, tests/pgserver.py, which skips fsync altogether).
    What every session sees committed is the same; a commit costs a tenth of what it did on a busy disk.
    """
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


def run_in_thread(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion on a loop of its own (fixtures here are synchronous)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="lockgate-pg-template")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


class _Dropper:
    """Drops finished tests' databases on a thread of its own, several at once, so no test waits for it.

    PostgreSQL 15 forces a checkpoint for every DROP DATABASE and waits for it: one by one, each
    drop costs a checkpoint (most of a second on a busy server, which every other session then
    feels too). Drops sent together on connections of their own share one checkpoint, so the
    thread gathers ``BATCH`` names and drops them all at once. The session's end hands the rest to
    a process of their own (``detach``) rather than wait for their checkpoint (seconds; a minute and
    more on a loaded server), as every worker would at once at the very end of the suite.
    A session killed mid-run leaves at most a batch or two behind (the next one drops those,
    see ``drop_abandoned``).
    """

    BATCH = 8

    def __init__(self) -> None:
        self._names: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._batch: list[str] = []

    def drop(self, name: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="lockgate-pg-dropper", daemon=True)
            self._thread.start()
        self._names.put(name)

    def detach(self) -> None:
        """Drop every database not being dropped yet from a process of its own, without waiting for it."""
        names: list[str] = []
        with self._lock:
            names, self._batch = self._batch, []
            while not self._names.empty():
                if (name := self._names.get()) is not None:
                    names.append(name)
        if self._thread is not None:
            self._names.put(None)  # a batch being dropped goes on; the thread ends after it
            self._thread = None
        if names:  # the child forks and returns at once; its own child drops them, adopted by init
            subprocess.run(
                [sys.executable, "-c", _DROP_TOGETHER, PG_ADMIN_URL, *names],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # no signal to this process's group reaches it
                check=False,
            )

    def _work(self) -> None:
        while (name := self._names.get()) is not None:
            with self._lock:
                self._batch.append(name)
                if len(self._batch) < self.BATCH:
                    continue
                batch, self._batch = self._batch, []
            self._drop_together(batch)
        with self._lock:
            batch, self._batch = self._batch, []
        self._drop_together(batch)

    @staticmethod
    def _drop_together(names: list[str]) -> None:
        def drop(name: str) -> None:
            try:
                admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:  # a leftover database is no reason to fail a test run
                print(f"could not drop test database {name}: {exc}")

        if names:
            with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="lockgate-pg-drop") as pool:
                list(pool.map(drop, names))


# ``_Dropper._drop_together`` for a process of its own: python -c _DROP_TOGETHER <admin url> <name>...
_DROP_TOGETHER = """
import os
import sys

if os.fork():
    os._exit(0)

from concurrent.futures import ThreadPoolExecutor

import psycopg


def drop(name):
    try:
        with psycopg.connect(sys.argv[1], autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception:
        pass  # the next session drops what is left (drop_abandoned)


with ThreadPoolExecutor(max_workers=len(sys.argv) - 2) as pool:
    list(pool.map(drop, sys.argv[2:]))
"""


_dropper = _Dropper()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_abandoned_lock: IO[str] | None = None


def drop_abandoned() -> None:
    """Drop the test databases of sessions on this host whose process is gone, on the dropper's thread.

    Not one by one here: each drop waits for a checkpoint, and a worker that crashed (or a session
    killed) leaves dozens behind; dropped in the foreground they held up the session's first test
    for minutes on a busy server, past its timeout. One session on this host at a time does it (it holds
    a lock file until it ends): the others, the xdist workers started with it above all, would only drop
    the same databases again, on connections of their own.
    """
    import psycopg

    global _abandoned_lock
    if _abandoned_lock is None:
        lock = open(Path(tempfile.gettempdir()) / "lockgate-test-abandoned.lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return
        _abandoned_lock = lock
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        names = [row[0] for row in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'lockgate%'")]
    for name in names:
        match = _OURS.match(name)
        if match and match.group(1) == _HOST and not _alive(int(match.group(2))):
            _dropper.drop(name)


async def _migrate(url: str) -> None:
    from lockgate.store.postgres import PostgresStore

    store = PostgresStore(url)
    await store.open()
    await store.close()


class _Copies:
    """Copies of the template made ahead, on a thread of their own: a test takes the copy made
    while the test before it ran, instead of waiting for one (a copy writes the whole database,
    catalogues included, to the write-ahead log: a fifth of a second, more on a busy server).

    At most ``AHEAD`` wait ready; a session killed mid-run leaves those behind for the next
    one to drop (``drop_abandoned``).
    """

    AHEAD = 2

    def __init__(self, template: str) -> None:
        self._template = template
        self._ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=self.AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="lockgate-pg-copies", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """A new copy of the template, this caller's to drop."""
        made = self._ready.get(timeout=120)
        if isinstance(made, BaseException):
            self._ready.put(made)  # every later test meets it too
            unavailable(f"cannot create a test database on {PG_ADMIN_URL}: {made}")
        return made

    def close(self) -> None:
        """Stop making copies and drop those nobody took."""
        self._stop.set()
        self._thread.join()
        while not self._ready.empty():
            made = self._ready.get()
            if isinstance(made, str):
                _dropper.drop(made)

    def _work(self) -> None:
        while not self._stop.is_set():
            name = _test_database_name()
            try:
                create_database(name, self._template)
            except Exception as exc:
                self._offer(exc)
                return
            if not self._offer(name):
                _dropper.drop(name)
                return

    def _offer(self, made: str | BaseException) -> bool:
        """Queue ``made`` once there is room; ``False`` when the session ends first."""
        while not self._stop.is_set():
            try:
                self._ready.put(made, timeout=0.2)
                return True
            except queue.Full:
                pass
        return False


def _test_database_name() -> str:
    return f"lockgate_t_{_SESSION}_{uuid.uuid4().hex[:12]}"


_copies: _Copies | None = None


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """The name of this session's migrated template database (``pg_database_url`` hands out copies)."""
    global _copies
    try:
        import lockgate.store.postgres  # noqa: F401
    except ImportError as exc:
        unavailable(f"the PostgreSQL store is not importable: {exc}")
    name = f"lockgate_tpl_{_SESSION}_{uuid.uuid4().hex[:8]}"
    try:
        drop_abandoned()
        create_database(name)
    except Exception as exc:
        unavailable(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")
    try:
        run_in_thread(_migrate(database_url(name)))
        _copies = _Copies(name)
        yield name
    finally:
        if _copies is not None:
            _copies.close()
            _copies = None
        _dropper.drop(name)  # dropped with the last copies, in one go
        _dropper.detach()


def pg_database_url(request: pytest.FixtureRequest, *, migrated: bool = True) -> Iterator[str]:
    """A database of this test's own, dropped afterwards: a copy of the session template, or empty."""
    request.getfixturevalue("pg_template")
    if migrated:
        assert _copies is not None
        name = _copies.take()
    else:
        name = _test_database_name()
        try:
            create_database(name)
        except Exception as exc:
            unavailable(f"cannot create a test database on {PG_ADMIN_URL}: {exc}")
    try:
        yield database_url(name)
    finally:
        _dropper.drop(name)


@dataclass
class _Cut:
    pattern: bytes
    deliver: bool
    then_refuse: bool
    leave_server_waiting: bool


class PgProxy:
    """A TCP relay in front of PostgreSQL that a test can cut, restore, or cut at a chosen message.

    ``stop()`` drops every relayed connection and refuses new ones (a server gone away);
    ``start()`` serves again on the same port (the server is back). ``cut_when(b"COMMIT")``
    drops the connection whose next client message contains those bytes instead of
    forwarding it: the server never sees that message. ``delay`` (seconds) holds every
    relayed chunk that long, both ways (a slow network). ``server``: the URL of the server
    to relay to (default: the shared test server).
    """

    def __init__(self, server: str = PG_ADMIN_URL) -> None:
        from urllib.parse import urlsplit

        target = urlsplit(server)
        self.target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.port = 0
        self.cuts = 0
        self.delay = 0.0
        self._server: asyncio.Server | None = None
        self._cut: _Cut | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def url(self, database_url: str) -> str:
        """``database_url`` routed through this relay (unencrypted, so messages can be matched)."""
        name = database_url.rsplit("/", 1)[1].split("?", 1)[0]
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}?sslmode=disable"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._refuse()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    def cut_when(
        self, pattern: bytes, *, deliver: bool = False, then_refuse: bool = False, leave_server_waiting: bool = False
    ) -> None:
        """Cut the connection that next sends ``pattern``, once.

        ``deliver``: the message reaches the server and its answer is lost instead.
        ``then_refuse``: the server is away from then on: every relayed connection drops and no
        new one is accepted (until ``start()``).
        ``leave_server_waiting``: only the client's side is cut; the server's session stays
        open, as in a partition the server has not noticed (``stop()`` ends it).
        """
        self._cut = _Cut(pattern, deliver, then_refuse, leave_server_waiting)

    def _refuse(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._relay(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        drop_reply = False

        async def to_server() -> None:
            nonlocal drop_reply
            while data := await reader.read(65536):
                cut = self._cut
                if cut is not None and cut.pattern in data:
                    self._cut = None
                    self.cuts += 1
                    if cut.then_refuse:
                        self._refuse()
                        for other in list(self._writers):
                            other.transport.abort()
                    if cut.deliver:
                        drop_reply = True
                    elif cut.leave_server_waiting:
                        writer.transport.abort()
                        return
                    else:
                        break
                if self.delay:
                    await asyncio.sleep(self.delay)
                up_writer.write(data)
                await up_writer.drain()
            up_writer.transport.abort()
            writer.transport.abort()

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                if drop_reply:
                    break
                if self.delay:
                    await asyncio.sleep(self.delay)
                if not writer.transport.is_closing():
                    writer.write(data)
                    await writer.drain()
            up_writer.transport.abort()
            writer.transport.abort()

        try:
            await asyncio.gather(to_server(), to_client(), return_exceptions=True)
        finally:
            self._writers -= {writer, up_writer}
