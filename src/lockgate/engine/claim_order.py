"""Which workers claim first when another process makes a run claimable.

On PostgreSQL a start, a wake-up or a release made in one process is told to every worker by
one notification, and every worker with room used to claim at once. One of them gets the run
(``FOR UPDATE SKIP LOCKED``); the others' claims find nothing, yet each costs a transaction on
the server and CPU in its process while the winner's claim and the run's first steps want the
same cores: with ten workers, a lone start cost ten claims.

Each notification now carries a token: the origin of the store that raised it and its
transaction's id (migration 0059). Every worker ranks the live workers it knows, but the one
that raised it (it woke itself in memory, and a run it left to the others past its share of a
key must go to another), by a hash of the token and each worker's id (rendezvous hashing): all
rank alike without a word to each other, and the first places rotate from one transaction to
the next, spreading lone starts over the workers. The first ``AT_ONCE`` claim at once: two, not
one, because a worker busy with its own runs may read the notification milliseconds after
another, and the quicker of two takes the run (with one, a concurrency-10 key of 20 ms jobs on
three busy workers lost a few per cent of its throughput). The others claim ``STAGGER`` seconds
later (one deferred claim covers every wake-up meanwhile), which takes the run should those
first be full, stopping, killed before their heartbeats lapsed, or not take that workflow; one
of them that is full or stopping tells every worker at once instead (a wake-up without a
token; at most one a ``STAGGER``). Nothing here decides who gets a run: the claim does, as
before, and a worker whose slot frees claims as it always did. A wake-up without a token
(SQLite's change check) wakes every worker at once; so does any while the worker knows no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from ..errors import StoreError
from ..store import workers
from ..store.base import Store, Tx

__all__ = ["AT_ONCE", "STAGGER", "ClaimOrder"]

AT_ONCE = 2
"""How many workers claim at once on a wake-up (the first places of its ranking)."""

STAGGER = 0.025
"""Seconds the workers after the first ones wait before they claim: those have long claimed by then, and their
claims, finding nothing, no longer compete with the run's first steps for the cores (a shorter wait put
them in the next start's way); short beside a poll should the first not take the run."""


async def _tell_all(tx: Tx, store: Store) -> None:
    await store.notify(tx, "runs", "")


def _score(token: str, worker: str) -> bytes:
    return hashlib.blake2b(f"{token}\x1f{worker}".encode(), digest_size=8).digest()


class ClaimOrder:
    """This worker's place among the live workers, per wake-up token, and the wake-ups it defers."""

    def __init__(
        self, me: str, store: Store, wake: Callable[[], None], can_claim: Callable[[], bool], stagger: float = STAGGER
    ) -> None:
        self.me = me
        self.store = store
        self.stagger = stagger
        self._wake = wake
        self._can_claim = can_claim  # whether this worker would claim now (room, not stopping)
        self._passing = False  # a wake-up passed on and not committed yet
        self._passed_at = float("-inf")  # when the last was (loop time)
        self._peers: tuple[tuple[str, str], ...] = ()  # the other live workers and their origins, as last read
        self._timer: asyncio.TimerHandle | None = None  # the deferred wake-up pending
        self._reading: set[asyncio.Task[None]] = set()
        self.at_once = 0  # wake-ups this worker claimed on at once (first, or with no token)
        self.deferred = 0  # wake-ups it left to another first
        self.passed_on = 0  # wake-ups it was first for but could not claim on: told to every worker

    def know(self, workers: Iterable[tuple[str, str | None]]) -> None:
        """The live workers (this one among them or not), each with its store's origin."""
        self._peers = tuple(sorted({(w, origin or "") for w, origin in workers if w != self.me}))

    async def refresh(self, now: float) -> None:
        """Read the live workers again (at start and each heartbeat, on a store whose wake-ups carry tokens:
        SQLite's do not, and a read there would be spent for nothing); a failed read keeps the last."""
        if self.store.ranked_wakeups:
            with contextlib.suppress(StoreError):
                self.know((row["id"], row["origin"]) for row in await self.store.read(workers.live_offers, now))

    def changed(self, now: float) -> None:
        """A worker started or stopped (another process's write): read the live workers again now."""
        self._background(self.refresh(now))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name="lockgate-claim-order")
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    def place(self, token: str) -> int:
        """How many live workers claim before this one on a wake-up carrying ``token`` (0: none); the worker
        that raised it (``origin:transaction``) never does."""
        if not token or not self._peers:
            return 0
        origin, raised, _ = token.partition(":")
        origin = origin if raised else ""
        mine = _score(token, self.me)
        return sum(_score(token, peer) > mine for peer, at in self._peers if not origin or at != origin)

    def woken(self, token: str) -> None:
        """A wake-up another process raised: wake now if first, else ``stagger`` seconds from now."""
        place = self.place(token)
        if place < AT_ONCE:
            self.at_once += 1
            if token and not self._can_claim():
                self._pass_on()
            self._wake()
            return
        self.deferred += 1
        if self._timer is None:  # else the deferred wake-up pending covers this one too
            self._timer = asyncio.get_running_loop().call_later(self.stagger, self._fire)

    def _pass_on(self) -> None:
        """Among the first but full or stopping: the run would wait for the others' deferred claims. Tell
        every worker at once instead (a wake-up without a token). Not while one passed on has not committed
        (the run this wake-up is about committed before it was heard, so before that one, and the claims it
        wakes will see it), nor within ``stagger`` of the last (each is a commit: a saturated cluster, where
        no one can claim, would pay one per start; the deferred claims cover what is heard meanwhile)."""
        now = asyncio.get_running_loop().time()
        if self._passing or now - self._passed_at < self.stagger:
            return
        self._passing, self._passed_at = True, now
        self.passed_on += 1
        self._background(self._tell_all())

    async def _tell_all(self) -> None:
        try:
            await self.store.write(_tell_all, self.store)
        except StoreError:
            pass  # the others' deferred claims take the run
        finally:
            self._passing = False

    def _fire(self) -> None:
        self._timer = None
        self._wake()
