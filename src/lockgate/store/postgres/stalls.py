"""Commits that do not return: a blocked server, or one waiting on a synchronous standby that is gone.

A commit on a server whose ``synchronous_standby_names`` names a standby that is not
connected waits until one connects; a stopped server keeps its sockets open and answers
nothing. Neither is an error the connection sees, so the writer would wait in silence. The
writer stamps the start of each commit (a clock read, nothing more on its path); a watcher
looks once a second, and a commit older than ``STALLED`` is reported once: a warning that
says what the server says of its standbys (read on a connection of the pool), and
``Observer.commit_stalled`` (the ``lockgate_store_stalled_commits`` metric). Its end is said too.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ...clock import stop_tasks
from .connections import Connections
from .failures import first_line

__all__ = ["STALLED", "Stalls"]

log = logging.getLogger("lockgate.store")
STALLED = 10.0  # seconds a commit may take before it is reported (a loaded server takes seconds)


class Stalls(Connections):
    """The watcher of the writer's commits (started with the store, stopped with it)."""

    _committing_since: float | None  # monotonic time the commit in flight began (None: none is)
    _stalled_at: float | None  # the commit reported as stalled, by its start
    _watcher: asyncio.Task[None] | None
    stalled_after = STALLED
    """Seconds a commit may wait before it is reported: ``STALLED``, or an engine's lease if shorter
    (``fit_lease``): by then the leases it renews are lapsing."""

    def _watch_commits(self) -> None:
        self._committing_since = self._stalled_at = None
        self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="lockgate-pg-commit-watch")

    async def _stop_watching(self) -> None:
        task, self._watcher = self._watcher, None
        if task is not None:
            await stop_tasks([task])

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            since = self._committing_since
            if since is None or since == self._stalled_at:
                if since is None and self._stalled_at is not None:
                    log.warning("PostgreSQL at %s: commits return again", self._where)
                    self._stalled_at = None
                continue
            waited = time.monotonic() - since
            if waited < self.stalled_after:
                continue
            self._stalled_at = since
            if self.observer is not None:
                self.observer.commit_stalled()
            log.warning(
                "PostgreSQL at %s: a commit has waited %.1fs and is still waiting: %s",
                self._where,
                waited,
                await self._why(),
            )

    async def _why(self) -> str:
        """What the server says of its synchronous standbys, asked on another connection (2 s at most)."""
        try:
            async with asyncio.timeout(2.0), self._require().connection(timeout=2.0) as conn:
                cursor = await conn.execute(
                    "SELECT current_setting('synchronous_standby_names') AS names, (SELECT count(*) "
                    "FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')) AS connected"
                )
                row = await cursor.fetchone()
        except Exception as exc:  # a timeout, a refused or a lost connection: all mean no answer
            return f"the server does not answer ({first_line(exc)}): it is blocked or cut off"
        if row is None:
            return "the server is slow to commit"
        names, connected = str(row["names"]), int(row["connected"])
        if names and not connected:
            return (
                f"synchronous_standby_names is {names!r} but no synchronous standby is connected, "
                "so every commit waits for one (connect it, or clear the setting)"
            )
        return f"the server is slow to commit ({connected} synchronous standby(s) connected)"
