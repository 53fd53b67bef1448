"""A PostgreSQL server of the test's own, to stop, restart and kill at will.

The fault tests and the soak must not touch the machine's shared server, so they start
one here: ``initdb`` into a temporary directory, ``pg_ctl`` on a free port, everything
removed at the end. The binaries are found on ``LOCKGATE_PG_BIN``, under
``/usr/lib/postgresql/*/bin``, or on ``PATH``. ``initdb`` refuses to run as root: as root,
the server runs as the ``postgres`` OS user, in a directory that user owns.

Where no binaries are found the tests that need one are skipped, except under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import psycopg

from .pg import unavailable

__all__ = ["PrivatePostgres", "Replicas", "find_bin", "private_postgres", "replicas"]

ShutdownMode = Literal["smart", "fast", "immediate"]


def find_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (the newest version found), or ``None``."""
    if env := os.environ.get("LOCKGATE_PG_BIN"):
        return Path(env)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0
    )
    for candidate in reversed(found):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """One private server: ``start()``, ``stop(mode)``, ``restart(mode)``, ``kill()``, ``close()``.

    ``url(name)`` is the URL of database ``name`` (trust auth, user ``postgres``);
    ``create_database()`` makes a fresh one.
    """

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lockgate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._user: str | None = None
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            self._user = "postgres"
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._databases = 0

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout, cwd=self.root)

    def init(self) -> None:
        """A fresh cluster: a copy of this machine's pristine one (made by ``initdb`` once), configured."""
        template = self._template()
        if template is None:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        else:
            subprocess.run(["cp", "-a", str(template), str(self.data)], check=True, capture_output=True, timeout=120)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                "max_connections = 200\nfsync = off\nfull_page_writes = off\nshared_buffers = 32MB\n"
                "log_min_messages = warning\n"
            )

    def _template(self) -> Path | None:
        """The data directory ``initdb`` made once for these binaries (never started; copied by ``init``).

        Copying takes a fraction of a second where ``initdb`` took 2-10 s on a loaded machine, for
        every private server of the suite. Made in a directory of its own and renamed into place
        when complete, so processes making it at once never see half of one. ``None`` if none could
        be put in place (``init`` runs ``initdb`` itself then).
        """
        initdb = self.bindir / "initdb"
        key = f"{self.bindir}:{initdb.stat().st_mtime_ns}:{os.geteuid()}"
        final = Path(tempfile.gettempdir()) / f"lockgate-pg-template-{zlib.crc32(key.encode()):08x}"
        if (final / "data" / "PG_VERSION").exists():
            return final / "data"
        making = Path(tempfile.mkdtemp(prefix="lockgate-pg-making-"))
        try:
            if self._user:
                entry = pwd.getpwnam(self._user)
                os.chown(making, entry.pw_uid, entry.pw_gid)
            self._run("initdb", "-D", str(making / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            with contextlib.suppress(OSError):  # another process put one there first: that one is used
                making.rename(final)
        finally:
            shutil.rmtree(making, ignore_errors=True)
        return final / "data" if (final / "data" / "PG_VERSION").exists() else None

    def listen_also(self, address: str) -> None:
        """Listen on ``address`` too (trusting its /30), e.g. the host's end of a veth pair; before ``start``."""
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1,{address}'\n")
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {address}/30 trust\n")

    def init_standby(self, primary: PrivatePostgres, follow: PrivatePostgres | None = None) -> None:
        """Make this server a streaming standby of ``primary`` (``pg_basebackup -R``), or of its standby
        ``follow`` (a cascade: copied from the primary, streaming from ``follow``); ``start()`` it then."""
        self._run(
            "pg_basebackup", "-D", str(self.data), "-R", "-X", "stream", "-h", "127.0.0.1",
            "-p", str(primary.port), "-U", "postgres", "--no-sync", "--checkpoint=fast",
        )  # fmt: skip  # a spread checkpoint on an idle primary made this wait for minutes
        with (self.data / "postgresql.conf").open("a") as conf:  # the last setting wins over the primary's
            # A standby whose upstream was promoted reconnects in a moment (the default waits 5 s).
            conf.write(
                f"port = {self.port}\nunix_socket_directories = '{self.root}'\nhot_standby = on\n"
                "wal_retrieve_retry_interval = 200ms\n"
            )
        # The primary's ALTER SYSTEM settings came along: a standby promoted later must not wait for a
        # synchronous standby of its own, nor keep a feed cut by ``Replicas.cut``.
        auto = self.data / "postgresql.auto.conf"
        kept = [
            line
            for line in auto.read_text().splitlines()
            if not line.startswith("synchronous_standby_names") and line != "primary_conninfo = ''"
        ]
        if follow is not None:  # the last setting wins
            kept.append(f"primary_conninfo = 'host=127.0.0.1 port={follow.port} user=postgres'")
        auto.write_text("\n".join(kept) + "\n")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._postmaster()  # a stale pid file held by another process now would stop it from starting
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self.wait_ready()

    def promote(self) -> None:
        """Promote this standby to a primary; returns once it takes writes."""
        if self._postmaster() is None:
            raise RuntimeError(f"no server runs in {self.data} to promote")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def stop(self, mode: ShutdownMode = "fast") -> None:
        if self._postmaster() is None:
            raise RuntimeError(f"no server runs in {self.data} to stop")
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """Stop in ``mode`` (``immediate``: as a crash, recovery at the next start) and start again."""
        self.stop(mode)
        self.start()

    def kill(self) -> None:
        """``kill -9`` the postmaster (its backends end with it), if it still runs.

        A postmaster killed before leaves its pid file behind, and its pid may belong to another
        process by now (pids wrap at 32,768 here, and a test suite starts thousands of processes):
        only a process whose command line names this server's data directory is killed.
        """
        pid = self._postmaster()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def _postmaster(self) -> int | None:
        """The pid of this server's postmaster, if it runs. A postmaster killed before leaves its pid file,
        and ``pg_ctl`` (``status``, ``stop``, ``promote``) would take, then signal, whatever process holds
        that pid now: an xdist worker of this very suite died so. Such a stale file is removed here."""
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        try:
            if str(self.data).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                return pid
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        return None

    def running(self) -> bool:
        if self._postmaster() is None:
            return False
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def url(self, name: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def admin(self, sql: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # test SQL built from our own names

    def create_database(self, prefix: str = "lockgate") -> str:
        """A new empty database; its URL."""
        self._databases += 1
        name = f"{prefix}_{self._databases}"
        self.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and remove its directory."""
        try:
            if self.data.exists() and self.running():  # never a stale pid file's process: see ``_postmaster``
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(*, listen_also: str | None = None, start: bool = True) -> Iterator[PrivatePostgres]:
    """A running private server (``start=False``: its port chosen, ``init()`` and ``start()`` left to the
    caller), torn down on exit; skipped (failed under CI) without binaries."""
    bindir = find_bin()
    if bindir is None:
        unavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine; set LOCKGATE_PG_BIN")
    server = PrivatePostgres(bindir)
    try:
        try:
            if start:
                server.init()
                if listen_also:
                    server.listen_also(listen_also)
                server.start()
        except (subprocess.CalledProcessError, OSError, KeyError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            unavailable(f"cannot start a private PostgreSQL server from {bindir}: {exc} {detail}".strip())
        yield server
    finally:
        server.close()


class Replicas:
    """A primary and a streaming standby of it, on two private servers, for failover tests.

    ``url(name)`` lists both hosts with ``target_session_attrs=read-write``: libpq finds whichever is
    the primary. ``fail()`` kills the primary and promotes the standby; the two swap parts, and
    ``ensure_standby()`` rebuilds the dead one as a standby of the new primary. With ``cascade``
    a third server (the URL lists it too) streams from the standby: a failover makes it the new
    standby at once, and ``ensure_standby()`` rebuilds the dead one as the next spare.
    """

    def __init__(self, bindir: Path, *, listen_also: str | None = None, cascade: bool = False) -> None:
        self.listen_also = listen_also  # a standby copies the primary's settings: both listen there
        self.primary = PrivatePostgres(bindir)
        self.standby = PrivatePostgres(bindir)
        # ``cascade``: a third server, a standby of the standby, so that after a failover the next one has
        # its standby at once (it follows its upstream's promotion; never ahead of it) instead of a new base backup.
        self.spare = PrivatePostgres(bindir) if cascade else None
        # Fixed: the URL stays valid across failovers.
        self._ports = tuple(s.port for s in (self.primary, self.standby, self.spare) if s is not None)
        self.has_standby = False
        self.has_spare = False
        self._databases = 0

    def start(self, *, standby: bool = True) -> None:
        """Start the primary, and the standby unless told not to (``ensure_standby`` then, e.g. in a thread)."""
        self.primary.init()
        with (self.primary.data / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\nmax_wal_senders = 10\nwal_sender_timeout = 5s\n")
        if self.listen_also:
            self.primary.listen_also(self.listen_also)
        self.primary.start()
        if standby:
            self.ensure_standby()

    def ensure_standby(self) -> None:
        """A standby streaming from the current primary (a new base backup if the last one was used up),
        and with ``cascade`` a spare streaming from the standby."""
        if not self.has_standby:
            self._rebuild(self.standby)
            self.has_standby = True
            self.wait_streaming()
        if self.spare is not None and not self.has_spare:
            self._rebuild(self.spare, follow=self.standby)
            self.has_spare = True
            self.wait_streaming(server=self.standby)

    def _rebuild(self, server: PrivatePostgres, follow: PrivatePostgres | None = None) -> None:
        if server.data.exists():
            server.kill()  # killed already, or a standby left behind: nothing in it is kept
            shutil.rmtree(server.data)
        server.init_standby(self.primary, follow)
        for attempt in range(3):  # the killed server's last processes may still hold its port an instant
            try:
                server.start()
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
                time.sleep(1.0)

    def url(self, name: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self._ports)
        return f"postgresql://postgres@{hosts}/{name}?target_session_attrs=read-write"

    def create_database(self, prefix: str = "lockgate") -> str:
        """A new database on the primary (the standby gets it by replication); its multi-host URL."""
        self._databases += 1  # counted here: the servers swap parts, the names stay unique
        name = f"{prefix}_{self._databases}"
        self.primary.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def replicate(self, *, synchronous: bool) -> None:
        """Synchronous: a commit returns once the standby has flushed it; asynchronous: at once."""
        names = "*" if synchronous else ""
        self.primary.admin(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        self.primary.admin("SELECT pg_reload_conf()")
        self.wait_streaming("sync" if synchronous else "async")

    def wait_streaming(
        self, state: str | None = None, timeout: float = 30.0, *, server: PrivatePostgres | None = None
    ) -> None:
        """Until a standby of ``server`` (the primary) streams, in ``state`` if given (``sync``, ``async``)."""
        deadline = time.monotonic() + timeout
        query = "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
        while True:
            with psycopg.connect((server or self.primary).url(), autocommit=True, connect_timeout=5) as conn:
                states = [r[0] for r in conn.execute(query).fetchall()]
            if states and (state is None or state in states):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby is not streaming ({state or 'any'}) after {timeout}s: {states}")
            time.sleep(0.05)

    def cut(self) -> float:
        """Stop the standby receiving (its WAL receiver ends): from now on, commits reach the primary only.

        First the standby catches up: it streams (after a restart of the primary it reconnects only
        after a while) and has flushed all the primary had written at an instant, which is returned
        (``time.time()``): every commit acknowledged before then is on the standby; one acknowledged
        later may not be.
        """
        self.wait_streaming()
        deadline = time.monotonic() + 30
        with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=5) as conn:
            caught_up = time.time()
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            while not conn.execute(
                "SELECT 1 FROM pg_stat_replication WHERE flush_lsn >= %s::pg_lsn", (row[0],)
            ).fetchall():
                if time.monotonic() > deadline:
                    raise TimeoutError("the standby did not catch up")
                time.sleep(0.02)
        self.standby.admin("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.admin("SELECT pg_reload_conf()")
        while True:
            with psycopg.connect(self.standby.url(), autocommit=True, connect_timeout=5) as conn:
                if not conn.execute("SELECT 1 FROM pg_stat_wal_receiver").fetchall():
                    return caught_up
            if time.monotonic() > deadline:
                raise TimeoutError("the standby's WAL receiver did not stop")
            time.sleep(0.05)

    def fail(self) -> tuple[float, float]:
        """``kill -9`` the primary and promote the standby; when each was done (``time.time()``)."""
        killed = time.time()
        self.primary.kill()
        self.standby.promote()
        promoted = time.time()
        dead, self.primary = self.primary, self.standby
        if self.spare is not None and self.has_spare:  # the spare streams from the promoted server already
            self.standby, self.spare, self.has_spare = self.spare, dead, False
        else:
            self.standby, self.has_standby = dead, False
        return killed, promoted

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            try:
                self.standby.close()
            finally:
                if self.spare is not None:
                    self.spare.close()


@contextlib.contextmanager
def replicas(*, listen_also: str | None = None, standby: bool = True, cascade: bool = False) -> Iterator[Replicas]:
    """A running primary and standby (``standby=False``: the primary only, for now; ``cascade``: and a spare),
    torn down on exit; skipped (failed under CI) without binaries."""
    bindir = find_bin()
    if bindir is None:
        unavailable("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup); set LOCKGATE_PG_BIN")
    pair = Replicas(bindir, listen_also=listen_also, cascade=cascade)
    try:
        try:
            pair.start(standby=standby)
        except (subprocess.CalledProcessError, OSError, KeyError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            unavailable(f"cannot start a private primary and standby from {bindir}: {exc} {detail}".strip())
        yield pair
    finally:
        pair.close()
