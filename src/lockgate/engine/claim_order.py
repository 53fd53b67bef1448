"""Which worker claims first when another process makes a run claimable.

On PostgreSQL a start, a wake-up or a release made in one process is told to every worker by
one notification, and every worker with room used to claim at once. One of them gets the run
(``FOR UPDATE SKIP LOCKED``); the others' claims find nothing, yet each costs a transaction on
the server and CPU in its process while the winner's claim and the run's first steps want the
same cores: with six workers, a lone start cost six claims.

Each notification now carries a token its transaction chose (its id, migration 0059). Every
worker ranks the live workers it knows by a hash of the token and each worker's id
(rendezvous hashing): all rank alike without a word to each other, and the first place
rotates from one transaction to the next, spreading lone starts over the workers. The first
claims at once; the others claim ``STAGGER`` seconds later (one deferred claim covers every
wake-up meanwhile), which takes the run should the first be full, stopping, killed before its
heartbeat lapsed, or not take that workflow. Nothing here decides who gets a run: the claim
does, as before, and a worker whose slot frees claims as it always did. A wake-up without a
token (SQLite's change check) wakes every worker at once; so does any while the worker knows
no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Iterable

from ..errors import StoreError
from ..store import workers
from ..store.base import Store

__all__ = ["STAGGER", "ClaimOrder"]

STAGGER = 0.025
"""Seconds the workers after the first wait before they claim: the first has long claimed by then, and their
claims, finding nothing, no longer compete with the run's first steps for the cores (a shorter wait put
them in the next start's way); short beside a poll should the first not take the run."""


def _score(token: str, worker: str) -> bytes:
    return hashlib.blake2b(f"{token}\x1f{worker}".encode(), digest_size=8).digest()


class ClaimOrder:
    """This worker's place among the live workers, per wake-up token, and the wake-ups it defers."""

    def __init__(self, me: str, wake: Callable[[], None], stagger: float = STAGGER) -> None:
        self.me = me
        self.stagger = stagger
        self._wake = wake
        self._peers: tuple[str, ...] = ()  # the other live workers, as last read
        self._timer: asyncio.TimerHandle | None = None  # the deferred wake-up pending
        self._reading: set[asyncio.Task[None]] = set()
        self.at_once = 0  # wake-ups this worker claimed on at once (first, or with no token)
        self.deferred = 0  # wake-ups it left to another first

    def know(self, workers: Iterable[str]) -> None:
        """The live workers (this one among them or not)."""
        self._peers = tuple(sorted({w for w in workers if w != self.me}))

    async def refresh(self, store: Store, now: float) -> None:
        """Read the live workers again (at start and each heartbeat, on a store whose wake-ups cross
        processes); a failed read keeps the last."""
        if store.cross_process_wakeups:
            with contextlib.suppress(StoreError):
                self.know(row["id"] for row in await store.read(workers.live_offers, now))

    def changed(self, store: Store, now: float) -> None:
        """A worker started or stopped (another process's write): read the live workers again now."""
        task = asyncio.get_running_loop().create_task(self.refresh(store, now), name="lockgate-claim-order")
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    def place(self, token: str) -> int:
        """How many live workers claim before this one on a wake-up carrying ``token`` (0: none)."""
        if not token or not self._peers:
            return 0
        mine = _score(token, self.me)
        return sum(_score(token, peer) > mine for peer in self._peers)

    def woken(self, token: str) -> None:
        """A wake-up another process raised: wake now if first, else ``stagger`` seconds from now."""
        place = self.place(token)
        if place == 0:
            self.at_once += 1
            self._wake()
            return
        self.deferred += 1
        if self._timer is None:  # else the deferred wake-up pending covers this one too
            self._timer = asyncio.get_running_loop().call_later(self.stagger, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._wake()
