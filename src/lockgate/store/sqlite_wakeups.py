"""Wake-ups between processes sharing an SQLite file, heard as PostgreSQL's notifications are.

SQLite has no LISTEN/NOTIFY. Triggers (migration 0024) count, per channel, the changes that
PostgreSQL's triggers notify: a run became claimable (``runs``), gate work appeared (``gate``),
a domain event was published (``events``). The store asks its idle connection for
``PRAGMA data_version``, which moves only when another connection committed: a look at the
WAL index in shared memory that takes no lock a writer waits for and writes nothing. When it
moved, one small read of the counters tells which channels did; each is told to the
listeners, then ``CHANGED`` (waiters for a run's end or an update's answer read again).

When to check. While the file is quiet, on Linux, an inotify watch on the WAL file waits
for the next write (anyone's), at no cost. A write starts a series of checks: the watch is
dropped (a watch costs every write to the file, in every process, some kernel work) and the
checks come on a timer every ``CHECK_EVERY`` seconds for ``SYNC_FOR`` (a commit shows only
once its frames are written and synced), then each wait doubling up to ``LONGEST_WAIT``, back
to the first after each change seen (``EAGER_EVERY`` apart instead while the process executes
nothing or awaits another process's run: ``eager``). ``HOT_FOR`` seconds after the last change the watch is set again,
then one more check covers what came meanwhile. An idle worker wakes for nothing; a busy one
pays a check every few milliseconds, not a cost per commit. Where inotify is missing, the
checks run every ``CHECK_EVERY`` seconds for good. Every wait is jittered (0.5x to 1.5x) so
that processes do not check in step. The engine's timed polls stay as they were: the
fallback for a change a check missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable

from .base import CHANGED

__all__ = ["CHECK_EVERY", "EAGER_EVERY", "HOT_FOR", "LONGEST_WAIT", "SYNC_FOR", "ChangeWatch"]

# Jitter from a generator of our own: the process's shared ``random`` state is its code's, not ours.
_JITTER = random.Random()

log = logging.getLogger("lockgate.store")

CHECK_EVERY = 0.002
"""Seconds from a write to the first check after it, on average; between checks where there is no inotify."""
EAGER_EVERY = 0.0005
"""``CHECK_EVERY`` of a process that executes nothing or awaits another process's run (``ChangeWatch.eager``):
a start or an end from another process is what it waits for, and found a millisecond sooner on average. A
busy process keeps ``CHECK_EVERY``: each check costs the loop some 15 microseconds, which checks four times
as often would take from its runs."""
LONGEST_WAIT = 0.016
"""Seconds between two checks of a series at most (the waits double up to it)."""
SYNC_FOR = 0.02
"""Seconds after a write or a change that the checks stay ``CHECK_EVERY`` apart (a commit's sync)."""
HOT_FOR = 0.15
"""Seconds a series of checks goes on after the last change it saw (or the write that started it)."""

_IN_MODIFY = 0x2


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
        self._inotify: _Inotify | None = None
        self._hot_until = 0.0
        self._first = CHECK_EVERY  # a series' first wait (``eager``)
        self._wait = CHECK_EVERY
        self._version: int | None = None
        self._counts: dict[str, int] = {}
        self.checks = 0

    @property
    def watching_writes(self) -> bool:
        """Whether a write to the WAL file starts the checks (else they never stop)."""
        return self._inotify is not None

    def start(self) -> None:
        self._version, self._counts = self._read()  # what is already there wakes nobody
        self._inotify = _Inotify.open()
        if self._inotify is not None:
            try:
                self._loop.add_reader(self._inotify.fd, self._written)
            except (NotImplementedError, RuntimeError):  # a loop without readers (Windows' proactor)
                self._inotify.close()
                self._inotify = None
        self._heat()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inotify is not None:
            self._loop.remove_reader(self._inotify.fd)
            self._inotify.close()
            self._inotify = None

    def eager(self, on: bool) -> None:
        """Check ``EAGER_EVERY`` apart (``on``: the process waits for others' commits), else ``CHECK_EVERY``."""
        self._first = EAGER_EVERY if on else CHECK_EVERY
        if on and time.monotonic() < self._hot_until:
            self._wait = self._first
            self._sooner()

    def _written(self) -> None:
        """The WAL file was written to while it was watched: check until the commit shows and settles."""
        assert self._inotify is not None
        self._inotify.drain()
        self._heat()

    def _heat(self) -> None:
        self._hot_until = time.monotonic() + HOT_FOR
        self._wait = self._first
        if self._inotify is not None:
            self._inotify.unwatch()
        self._sooner()

    def _sooner(self) -> None:
        if self._timer is not None and self._timer.when() > self._loop.time() + 1.5 * self._first:
            self._timer.cancel()  # a long wait of this series: check soon instead
            self._timer = None
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        self._timer = self._loop.call_later(self._wait * (0.5 + _JITTER.random()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = time.monotonic()
        if self.check():  # more may follow: check soon again
            self._hot_until, self._wait = now + HOT_FOR, self._first
        elif now > self._hot_until - HOT_FOR + SYNC_FOR:  # past the time a commit takes to show: back off
            self._wait = min(self._wait * 2, LONGEST_WAIT)
        if self._inotify is None or time.monotonic() < self._hot_until:
            self._arm()
        elif not self._inotify.watch(self._wal):  # the WAL file is gone: the timer alone, for good
            self._loop.remove_reader(self._inotify.fd)
            self._inotify.close()
            self._inotify = None
            self._arm()
        elif self.check():  # what was committed before the watch was set
            self._heat()

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


class _Inotify:
    """An inotify instance (Linux) watching one file for writes, or nothing, at will."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self.fd = fd
        self._wd: int | None = None

    @classmethod
    def open(cls) -> _Inotify | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        except (OSError, AttributeError):
            return None
        return cls(libc, fd) if fd >= 0 else None

    def watch(self, path: str) -> bool:
        """Watch ``path`` for writes (events told before are read first); whether it could be."""
        self.drain()
        if self._wd is None:
            wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_MODIFY))
            if wd < 0:
                return False
            self._wd = wd
        return True

    def unwatch(self) -> None:
        if self._wd is not None:
            self._libc.inotify_rm_watch(self.fd, self._wd)
            self._wd = None

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while len(os.read(self.fd, 4096)) >= 2048:  # identical unread events are told once: rarely more
                pass

    def close(self) -> None:
        self.unwatch()
        os.close(self.fd)
