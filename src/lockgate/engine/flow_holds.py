"""The steps this process executes under each flow key: a second guard on the key's parallelism.

The store decides every slot, under the key's lock, and nothing here replaces that. But a
failover to a standby that had not received the last commits forgets the slots they took while
their steps go on executing here (until the lease watch stops them, up to most of a lease), and
the new primary may grant this very process a slot its own steps still fill. A step granted a
slot while the key's parallelism of steps already execute here waits for one of them to end
(said in the log), so that no process ever executes more than the parallelism, whatever the
store forgot.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque

__all__ = ["LocalHolds", "local_holds"]

log = logging.getLogger("lockgate.flow")


class LocalHolds:
    """Steps executing here per flow key, and those granted a slot waiting for one of them to end."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def executing(self, key: str) -> int:
        return self._held.get(key, 0)

    def waiting(self, key: str) -> int:
        return len(self._waiting.get(key, ()))

    def try_take(self, key: str, parallelism: int) -> bool:
        """Count one more step executing under ``key`` if fewer than ``parallelism`` do and none waits; whether
        it was."""
        held = self._held.get(key, 0)
        if held >= parallelism or key in self._waiting:
            return False
        self._held[key] = held + 1
        return True

    async def take(self, key: str, parallelism: int, step: str) -> None:
        """``try_take``, waiting for a step of ``key`` here to end as long as the parallelism is filled."""
        if self.try_take(key, parallelism):
            return
        log.warning(
            "flow key %r: granted a slot for %s while %d of its steps (its parallelism %d) execute in this "
            "process: the store lost slots it had granted (a failover to a standby behind?); waiting for one to end",
            key,
            step,
            self._held.get(key, 0),
            parallelism,
        )
        loop = asyncio.get_running_loop()
        try:
            while self._held.get(key, 0) >= parallelism:  # woken, but another took the room meanwhile: again
                turn: asyncio.Future[None] = loop.create_future()
                self._waiting.setdefault(key, deque()).append(turn)
                try:
                    await turn
                finally:
                    self._leave_line(key, turn)
        except BaseException:
            self._wake_one(key)  # a turn given to this step and not taken goes to the next
            raise
        self._held[key] = self._held.get(key, 0) + 1

    def give(self, key: str) -> None:
        """One step of ``key`` ended here: the first waiting, if any, may go."""
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)
        self._wake_one(key)

    def _wake_one(self, key: str) -> None:
        line = self._waiting.get(key)
        while line:
            turn = line.popleft()
            if not turn.done():
                turn.set_result(None)
                break
        if line is not None and not line:
            del self._waiting[key]  # a key is in ``_waiting`` only while someone waits

    def _leave_line(self, key: str, turn: asyncio.Future[None]) -> None:
        line = self._waiting.get(key)
        if line is None:
            return
        if turn in line:
            line.remove(turn)
        if not line:
            del self._waiting[key]


_HOLDS: weakref.WeakKeyDictionary[object, LocalHolds] = weakref.WeakKeyDictionary()


def local_holds(store: object) -> LocalHolds:
    """This process's holds on ``store`` (the engines sharing a store object share them)."""
    found = _HOLDS.get(store)
    if found is None:
        found = _HOLDS[store] = LocalHolds()
    return found
