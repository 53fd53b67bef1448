"""What the dispatcher's loops share: the wake-up they sleep on, back-off, outage reporting,
and releasing the runs of this host's dead workers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from ..clock import CLOCK_TOLERANCE, Clock, SystemClock
from ..errors import StoreError
from ..store import Store, runs, shared, workers

__all__ = [
    "ClockWatch",
    "Outages",
    "Wakeup",
    "backoff",
    "hand_back",
    "overdue",
    "pid_alive",
    "release_dead_local_workers",
    "report_released",
]

log = logging.getLogger("lockgate.engine")


class Wakeup:
    """What the dispatcher sleeps on: ``set()`` from anywhere on the loop; ``wait(timeout)``.

    One future and one timer per sleep: lighter than an ``asyncio.Event`` waited on through
    a task, which the dispatcher would pay for after every start.
    """

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        _resolve(self._waiter)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self, timeout: float) -> None:
        if self._flag:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def backoff(failures: int, base: float) -> float:
    """Seconds to wait after ``failures`` failed tries in a row: doubling from ``base``, at most 5 s."""
    return float(min(5.0, max(0.05, base) * 2 ** min(failures - 1, 10)))


class Outages:
    """Where the engine's loops report their store calls, so an outage reads as two log lines."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since: float | None = None  # monotonic time the store was first found unreachable

    def failed(self, where: str, exc: BaseException) -> None:
        """A loop's store call failed: an outage is logged once, when it begins; anything else each time."""
        if not isinstance(exc, StoreError):
            log.error("%s failed; retrying", where, exc_info=exc)
            return
        if self._since is None:
            self._since = time.monotonic()
            log.warning("store unavailable (%s: %s); runs are kept and every loop retries with backoff", where, exc)
        else:
            log.debug("store still unavailable (%s: %s)", where, exc)

    def recovered(self) -> None:
        """A loop's store call succeeded: if an outage was logged, log its end."""
        if self._since is not None:
            log.warning("store available again after %.1fs", time.monotonic() - self._since)
            self._since = None


@contextlib.contextmanager
def overdue(within: float, where: str, failed: Callable[[str, BaseException], None]) -> Iterator[None]:
    """Report ``where`` as a store outage (``failed``) if the block has not ended ``within`` seconds in.

    The block goes on waiting: it is not cancelled (a write's outcome would be unknown). A query
    or commit that does not return (a cut link before the kernel gives up on it, a stopped or
    blocked server) is said within that time, not once the connection breaks, if it ever does.
    """
    timer = asyncio.get_running_loop().call_later(
        within, failed, where, StoreError(f"no answer from the store in {within:.3g}s")
    )
    try:
        yield
    finally:
        timer.cancel()


class ClockWatch:
    """This process's clock against the database's: read at open and on every heartbeat.

    The process keeps the database's time from each reading on (``SystemClock.follow``), so a
    clock set wrong takes no live lease and fires no timer early; an offset beyond
    ``CLOCK_TOLERANCE`` is still worth fixing, and is logged once (and once when it is mended).
    """

    __slots__ = ("_clock", "_skewed", "_store", "offset")

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._skewed = False
        self.offset = 0.0  # this process's clock minus the database's, at the last reading

    async def read(self) -> float:
        """Read the database's clock again; the offset (0 where processes share one machine's clock)."""
        reading = await workers.follow_database(self._store, self._clock)
        if reading is None:
            return self.offset
        # As the readings so far bound it (SystemClock.follow), not as this one guessed it.
        self.offset = offset = self._clock.offset if isinstance(self._clock, SystemClock) else reading.offset
        skewed = abs(offset) > CLOCK_TOLERANCE
        if skewed and not self._skewed:
            side = "ahead of" if offset > 0 else "behind"
            log.warning(
                "this process's clock is %.3fs %s the database's (tolerance %gs): leases, timers and windows "
                "keep the database's time, but set this host's clock right (NTP)",
                abs(offset),
                side,
                CLOCK_TOLERANCE,
            )
        elif self._skewed and not skewed:
            log.warning("this process's clock is within %gs of the database's again (%+.3fs)", CLOCK_TOLERANCE, offset)
        self._skewed = skewed
        return offset


async def release_dead_local_workers(store: Store, clock: Clock, host: str, worker_id: str) -> None:
    """Runs held by a process on this host that no longer exists are released at once."""
    rows = await store.read(workers.live_workers_on_host, host, worker_id)
    now = clock.now()
    for row in rows:
        if pid_alive(int(row["pid"])):
            continue
        released = await store.write(workers.stop_worker, row["id"], now, clean=False)
        if released:
            log.warning("worker %s (pid %s) is gone; released %d run(s)", row["id"], row["pid"], len(released))


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one we may not signal counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def report_released(released: list[str]) -> None:
    """Runs whose rows named this worker but which it did not execute were released: said once per heartbeat."""
    shown = ", ".join(released[:5]) + (" ..." if len(released) > 5 else "")
    log.warning(
        "released %d run(s) recorded as held by this worker but not executed here (%s); resumed from their journals",
        len(released),
        shown,
    )


class Reporting(Protocol):
    """Where a loop reports its store calls (the dispatcher), and whether it still runs."""

    def is_running(self) -> bool: ...
    def store_failed(self, where: str, exc: BaseException) -> None: ...
    def store_recovered(self) -> None: ...


async def hand_back(
    store: Store, clock: Clock, fence: shared.Fence, loop: Reporting, poll: float, wake: Callable[[], None]
) -> None:
    """Release a run whose execution broke on the store, retrying (with backoff) until the store answers."""
    failures = 0
    while loop.is_running():
        try:
            await store.write(runs.release_run, fence, clock.now())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            loop.store_failed(f"hand-back of run {fence.run_id}", exc)
            await asyncio.sleep(backoff(failures, poll))
        else:
            loop.store_recovered()
            log.info("run %s: handed back after a store failure; re-entered from its journal", fence.run_id)
            wake()
            return
