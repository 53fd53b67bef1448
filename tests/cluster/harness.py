"""Worker processes for the cluster tests: ``lockgate serve tests.cluster.app:app`` on one database.

The benchmarks start their workers here too (``bench.failover``, and ``bench.core`` with an app of its own).

Each worker gets the store URL with an ``application_name`` of its own, so a test can tell
its PostgreSQL sessions from the others' (``pg_stat_activity``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from .app import DB_ENV, SCHEMA

__all__ = ["ROOT", "Cluster", "Worker", "until"]

ROOT = Path(__file__).resolve().parents[2]
APP_REF = "tests.cluster.app:app"
T = TypeVar("T")


async def until(probe: Callable[[], Awaitable[T | None]], *, timeout: float = 20.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; that value (``TimeoutError`` at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s (last: {value!r})")
        await asyncio.sleep(0.02)


class Worker:
    """One ``lockgate serve`` process; its stderr goes to a file the test can read."""

    def __init__(
        self,
        name: str,
        url: str,
        log_dir: Path,
        *,
        lease: str,
        max_runs: int,
        store: str,
        app: str = APP_REF,
        args: Sequence[str] = (),
        wrap: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        sep = "&" if "?" in store else "?"
        self.url = f"{store}{sep}application_name={name}"
        env = {**os.environ, DB_ENV: url, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    *wrap,
                    sys.executable,
                    "-m",
                    "lockgate.cli",
                    "serve",
                    app,
                    "--store",
                    self.url,
                    "--lease",
                    lease,
                    "--max-concurrent-runs",
                    str(max_runs),
                    *args,
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> float:
        """``kill -9``; the instant it was sent (``time.time()``)."""
        at = time.time()
        self.proc.kill()
        self.proc.wait()
        return at

    def stop(self) -> None:
        """Ask for a clean shutdown (a frozen worker is thawed first); see ``wait``."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
                self.proc.terminate()  # once: a second SIGTERM interrupts the shutdown itself

    async def wait(self, timeout: float = 15.0) -> None:
        """Wait for the process to end; ``kill -9`` it past ``timeout``.

        The event loop keeps turning meanwhile: a relay in the test's loop may carry its last writes.
        """
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                return
            await asyncio.sleep(0.02)


class Cluster:
    """N workers on one PostgreSQL database, plus direct SQL on it for the test's probes."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.workers: list[Worker] = []

    async def setup(self) -> None:
        await self.execute(SCHEMA)

    def spawn(
        self,
        count: int,
        *,
        lease: str = "2s",
        max_runs: int = 10,
        store: str | None = None,
        app: str = APP_REF,
        args: Sequence[str] = (),
        wrap: Sequence[str] = (),
    ) -> list[Worker]:
        """Start ``count`` workers serving ``app``; ``store``: the URL lockgate uses (default: the database).

        ``args``: more options for ``lockgate serve``; ``wrap``: a command the worker runs under
        (``faketime -f +30s``: a worker whose clock is wrong).
        """
        started = [
            Worker(
                f"w{len(self.workers) + i + 1}",
                self.url,
                self.log_dir,
                lease=lease,
                max_runs=max_runs,
                store=store or self.url,
                app=app,
                args=args,
                wrap=wrap,
            )
            for i in range(count)
        ]
        self.workers += started
        return started

    async def ready(self, workers: list[Worker] | None = None, timeout: float = 90.0) -> None:
        """Wait until each worker has registered in the store.

        A worker's boot is mostly imports: on a loaded 2-core machine one takes 7-10 s, and three booting
        together took over 30 s. A worker that exits early fails at once, whatever the deadline."""
        pids = {w.pid for w in workers or self.workers}

        async def registered() -> bool:
            for worker in workers or self.workers:
                if not worker.alive():
                    raise AssertionError(f"worker {worker.name} exited early:\n{worker.log()}")
            rows = await self.fetch("SELECT pid FROM lockgate_workers WHERE stopped_at IS NULL")
            return pids <= {r[0] for r in rows}

        await until(registered, timeout=timeout, what="workers registered")

    async def guard(self, work: Awaitable[T], *, every: float = 0.1) -> T:
        """Await ``work`` unless a worker exits first: then ``AssertionError`` with the logs (no long timeout)."""
        task = asyncio.ensure_future(work)
        try:
            while not (await asyncio.wait({task}, timeout=every))[0]:
                dead = [w.name for w in self.workers if not w.alive()]
                if dead:
                    raise AssertionError(f"worker(s) {', '.join(dead)} exited:\n{self.logs()}")
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    def by_pid(self, pid: int) -> Worker:
        return next(w for w in self.workers if w.pid == pid)

    async def close(self) -> None:
        """Stop every worker; whatever still runs when this is itself interrupted is killed (no stray process)."""
        try:
            for worker in self.workers:  # all at once: each shutdown releases its own runs
                worker.stop()
            for worker in self.workers:
                await worker.wait()
        finally:
            for worker in self.workers:
                if worker.alive():
                    worker.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {w.name} (pid {w.pid}) ---\n{w.log()}" for w in self.workers)

    # -- SQL on the test database ---------------------------------------------------------

    async def execute(self, query: str, *params: Any) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(query, params or None)

    async def fetch(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cursor = await conn.execute(query, params or None)
            return await cursor.fetchall()

    async def effects(self, step: str | None = None) -> list[tuple[str, str, int]]:
        """``(run_id, step, pid)`` of every side effect so far (of ``step`` only, if given)."""
        rows = await self.fetch("SELECT run_id, step, pid FROM cluster_effects ORDER BY id")
        return [(r[0], r[1], r[2]) for r in rows if step is None or r[1] == step]

    async def statuses(self, workflow: str) -> dict[str, str]:
        rows = await self.fetch("SELECT id, status FROM lockgate_runs WHERE workflow = %s", workflow)
        return {r[0]: r[1] for r in rows}

    async def all_succeeded(self, workflow: str, count: int) -> bool:
        statuses = await self.statuses(workflow)
        bad = {rid: s for rid, s in statuses.items() if s in ("failed", "cancelled", "suspended")}
        if bad:
            raise AssertionError(f"runs ended badly: {bad}\n{self.logs()}")
        return len(statuses) == count and all(s == "succeeded" for s in statuses.values())

    async def freeze(self, worker: Worker, attempts: int = 20) -> None:
        """SIGSTOP ``worker`` at a moment it holds no transaction open (a frozen open one would hold row locks)."""
        for _ in range(attempts):
            worker.signal(signal.SIGSTOP)
            clean = False
            for _ in range(10):
                rows = await self.fetch(
                    "SELECT state FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'", worker.name
                )
                if not rows:
                    clean = True
                    break
                await asyncio.sleep(0.01)
            if clean:
                return
            worker.signal(signal.SIGCONT)
            await asyncio.sleep(0.05)
        raise AssertionError(f"could not freeze {worker.name} outside a transaction")

    async def terminate_backends(self) -> int:
        """``pg_terminate_backend`` on every session of this database but the caller's; how many."""
        rows = await self.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return sum(1 for r in rows if r[0])
