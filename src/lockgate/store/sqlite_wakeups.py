"""Wake-ups between processes sharing an SQLite file, heard as PostgreSQL's notifications are.

SQLite has no LISTEN/NOTIFY. Triggers (migration 0024) count, per channel, the changes that
PostgreSQL's triggers notify: a run became claimable (``runs``), gate work appeared (``gate``),
a domain event was published (``events``). The store asks its idle connection for
``PRAGMA data_version``, which moves only when another connection committed: a look at the
WAL index in shared memory that takes no lock a writer waits for and writes nothing. When it
moved, one small read of the counters tells which channels did; each is told to the
listeners, then ``CHANGED`` (waiters for a run's end or an update's answer read again).

When to check: on Linux, inotify tells of each write to the WAL file by another process
(this store's own commits drain what they caused and check once). A commit becomes visible
only once its frames are written and synced, so a write starts a series of checks, the
first ``CHECK_EVERY`` seconds later, each wait doubling, until ``HOT_FOR`` seconds have
passed without a write; each write starts the series again. An idle worker wakes for
nothing. Where inotify is missing, the checks run every ``CHECK_EVERY`` seconds for good.
Every wait is jittered (0.5x to 1.5x) so that processes do not check in step. The engine's
timed polls stay as they were: the fallback for a change a check missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import random
import sqlite3
import struct
import sys
import time
from collections.abc import Callable

from .base import CHANGED

__all__ = ["CHECK_EVERY", "HOT_FOR", "ChangeWatch"]

log = logging.getLogger("lockgate.store")

CHECK_EVERY = 0.002
"""Seconds from a write to the first check after it, on average; between checks where there is no inotify."""
HOT_FOR = 0.15
"""Seconds the checks go on after the last write to the WAL file (their waits doubling meanwhile)."""

_IN_MODIFY, _IN_DELETE_SELF, _IN_MOVE_SELF, _IN_IGNORED = 0x2, 0x400, 0x800, 0x8000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)


class ChangeWatch:
    """Checks ``conn`` for other connections' commits on the running loop and tells ``listeners``."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        wal: str,
        counts_sql: str,
        listeners: list[Callable[[str, str], None]],
    ) -> None:
        self._conn = conn
        self._wal = wal
        self._counts_sql = counts_sql
        self._listeners = listeners
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._inotify: int | None = None
        self._hot_until = 0.0
        self._wait = CHECK_EVERY
        self._version: int | None = None
        self._counts: dict[str, int] = {}
        self.checks = 0

    @property
    def watching_writes(self) -> bool:
        """Whether writes to the WAL file start the checks (else they never stop)."""
        return self._inotify is not None

    def start(self) -> None:
        self._version, self._counts = self._read()  # what is already there wakes nobody
        self._inotify = _inotify(self._wal)
        if self._inotify is not None:
            try:
                self._loop.add_reader(self._inotify, self._written)
            except (NotImplementedError, RuntimeError):  # a loop without readers (Windows' proactor)
                os.close(self._inotify)
                self._inotify = None
        self._heat()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inotify is not None:
            self._loop.remove_reader(self._inotify)
            os.close(self._inotify)
            self._inotify = None

    def _written(self) -> None:
        """Another connection wrote to the WAL file: check until its commit shows and settles."""
        if self._drain():
            self._heat()

    def committed(self) -> None:
        """This connection committed. The writes to the WAL file told since are its own, or those of
        commits that ended before it took the write lock, which one check now sees: no need to heat."""
        if self._inotify is not None and self._drain() and self._timer is None:
            self.check()

    def _drain(self) -> bool:
        """Read the writes told so far; whether there were any."""
        fd = self._inotify
        assert fd is not None
        told = gone = False
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while data := os.read(fd, 4096):
                told = True
                offset = 0
                while offset + _EVENT.size <= len(data):
                    _, mask, _, size = _EVENT.unpack_from(data, offset)
                    gone = gone or bool(mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED))
                    offset += _EVENT.size + size
        if gone:  # the file watched is no longer the WAL: check on the timer alone, for good
            self._loop.remove_reader(fd)
            os.close(fd)
            self._inotify = None
            self._heat()
        return told

    def _heat(self) -> None:
        self._hot_until = time.monotonic() + HOT_FOR
        self._wait = CHECK_EVERY
        if self._timer is not None and self._timer.when() > self._loop.time() + 1.5 * CHECK_EVERY:
            self._timer.cancel()  # a long wait of the last series: check soon instead
            self._timer = None
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        self._timer = self._loop.call_later(self._wait * (0.5 + random.random()), self._tick)

    def _tick(self) -> None:
        self.check()
        if self._inotify is None:
            self._arm()
            return
        left = self._hot_until - time.monotonic()
        if left > 0:
            self._wait = min(self._wait * 2, left)
            self._arm()
        else:
            self._timer = None  # cold: the next write to the WAL file starts the checks again

    def check(self) -> list[str]:
        """Tell the listeners what other connections committed since the last check; the channels told."""
        self.checks += 1
        try:
            (version,) = self._conn.execute("PRAGMA data_version").fetchone()
            if version == self._version:
                return []
            counts = dict(self._conn.execute(self._counts_sql).fetchall())
        except sqlite3.Error as exc:  # busy (a recovery under way) or gone: the next check or the poll sees it
            log.debug("change check failed: %s", exc)
            return []
        self._version = version
        moved = [channel for channel, seq in counts.items() if self._counts.get(channel) != seq]
        self._counts = counts
        told = [*moved, CHANGED]
        for channel in told:
            for callback in list(self._listeners):
                try:
                    callback(channel, "")
                except Exception:
                    log.exception("wake-up listener %r failed", callback)
        return told

    def _read(self) -> tuple[int | None, dict[str, int]]:
        try:
            (version,) = self._conn.execute("PRAGMA data_version").fetchone()
            return version, dict(self._conn.execute(self._counts_sql).fetchall())
        except sqlite3.Error:
            return None, {}


def _inotify(path: str) -> int | None:
    """A non-blocking inotify descriptor told of each write to ``path`` (Linux); ``None`` where there is none."""
    if not sys.platform.startswith("linux") or not os.path.exists(path):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY | _IN_DELETE_SELF | _IN_MOVE_SELF) < 0:
        os.close(fd)
        return None
    return fd
