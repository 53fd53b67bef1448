"""What the dispatcher's loops share: the wake-up they sleep on, back-off, outage reporting,
and releasing the runs of this host's dead workers."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from ..clock import Clock
from ..errors import StoreError
from ..store import Store, workers

__all__ = ["Outages", "Wakeup", "backoff", "pid_alive", "release_dead_local_workers"]

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
