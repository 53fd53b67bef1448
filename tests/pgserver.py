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
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import psycopg

from .pg import unavailable

__all__ = ["PrivatePostgres", "find_bin", "private_postgres"]

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
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                "max_connections = 200\nfsync = off\nfull_page_writes = off\nshared_buffers = 32MB\n"
                "log_min_messages = warning\n"
            )

    def init_standby(self, primary: PrivatePostgres) -> None:
        """Make this server a streaming standby of ``primary`` (``pg_basebackup -R``); ``start()`` it then."""
        self._run(
            "pg_basebackup", "-D", str(self.data), "-R", "-X", "stream", "-h", "127.0.0.1",
            "-p", str(primary.port), "-U", "postgres", "--no-sync",
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:  # the last setting wins over the primary's
            conf.write(f"port = {self.port}\nunix_socket_directories = '{self.root}'\nhot_standby = on\n")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self.wait_ready()

    def stop(self, mode: ShutdownMode = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """Stop in ``mode`` (``immediate``: as a crash, recovery at the next start) and start again."""
        self.stop(mode)
        self.start()

    def kill(self) -> None:
        """``kill -9`` the postmaster (its backends end with it)."""
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().splitlines()[0]), 9)

    def running(self) -> bool:
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
            if self.data.exists() and self.running():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private server, torn down on exit; skipped (failed under CI) without binaries."""
    bindir = find_bin()
    if bindir is None:
        unavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine; set LOCKGATE_PG_BIN")
    server = PrivatePostgres(bindir)
    try:
        try:
            server.init()
            server.start()
        except (subprocess.CalledProcessError, OSError, KeyError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            unavailable(f"cannot start a private PostgreSQL server from {bindir}: {exc} {detail}".strip())
        yield server
    finally:
        server.close()
