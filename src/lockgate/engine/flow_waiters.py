"""The steps of a process waiting in place for a slot of their step flow key, and how they are told.

A refused step near the head of its key's line, or further back while its worker has places
to spare, waits in its process (``engine/stepflow.py``). The transaction that frees a slot
hands it to the first waiter held by a worker; a hand-off committed here is delivered as the
commit returns (``deliver``), one committed by another process arrives as a notification
(PostgreSQL) or as a commit seen on the file (SQLite), after which the waiters' rows are read
once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

from ..app import App
from ..errors import StoreError
from ..flowcontrol import FlowControl, FlowLimits
from ..store import Store, flow, runs
from ..store.base import CHANGED, Row

__all__ = ["EVICTED", "RECHECK", "RoomMaker", "Waiters", "deliver", "pressing", "room_to_wait", "undeliver", "waiters"]

RECHECK = 0.5
"""Seconds a step waiting in place for a hand-off goes without news before it asks the store again."""
EVICTED = flow.Grant(False, {})
"""What a step waiting in place deep in its line is told when its worker needs its place: park the run."""


class Waiters:
    """The steps of this process waiting in place for a slot of their key, on one store.

    A hand-off found in a transaction's answer (``deliver``) starts its step at once; news that
    another process handed a slot to a step held here has the waiters' rows read once, and those
    given a slot start. ``deep``: those waiting further back in line than their key's parallelism.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.waiting: dict[tuple[str, str], asyncio.Future[flow.Grant | None]] = {}
        self.deep: set[tuple[str, str]] = set()
        self.since: dict[tuple[str, str], float] = {}  # when each began waiting (its place in line, roughly)
        self.keys: dict[tuple[str, str], str] = {}  # the key each waits for
        self.owners: set[str] = set()
        self.early: dict[tuple[str, str], tuple[float, flow.Grant | None]] = {}  # handed before their step waited
        self._reading: asyncio.Task[None] | None = None
        self._again = False
        store.add_listener(self._on_wakeup)

    def wait(
        self, key: str, run_id: str, step_key: str, owner: str, asked: float, since: float, deep: bool = False
    ) -> asyncio.Future[flow.Grant | None]:
        """A future for the step's hand-off; ``asked``: the loop's time its refused ``acquire`` was sent
        (a slot handed before then went to an earlier ask, which took it or lost it); ``since``: when the
        step first asked."""
        future: asyncio.Future[flow.Grant | None] = asyncio.get_running_loop().create_future()
        early = self.early.pop((run_id, step_key), None)
        if early is not None and early[0] >= asked:
            future.set_result(early[1])
        self.waiting[(run_id, step_key)] = future
        self.keys[(run_id, step_key)] = key
        if deep:
            self.deep.add((run_id, step_key))
        self.since[(run_id, step_key)] = since
        self.owners.add(owner)
        return future

    def done(self, run_id: str, step_key: str) -> None:
        self.keys.pop((run_id, step_key), None)
        self.waiting.pop((run_id, step_key), None)
        self.deep.discard((run_id, step_key))
        self.since.pop((run_id, step_key), None)

    def holds(self, key: str) -> bool:
        """Whether a step here waits in place for ``key``: one asking now would come after it in line."""
        return key in self.keys.values()  # a few hundred at most: one look per ask

    def evict(self) -> bool:
        """Tell the step that began waiting last, deep in its line, to park its run (``EVICTED``)."""
        for place in sorted(self.deep, key=self.since.__getitem__, reverse=True):
            future = self.waiting.get(place)
            if future is not None and not future.done():
                future.set_result(EVICTED)
                return True
        return False

    def hand(self, handed: flow.Handed) -> bool:
        """Tell the step waiting for ``handed`` here; whether it was given the slot (not told to ask)."""
        place = (handed.run_id, handed.step_key)
        future = self.waiting.get(place)
        if future is None:
            # Its step may not wait yet: refused in the very commit that handed it the slot, its answer
            # not yet read. Kept a moment for it (a step that never comes asks the store, and finds it).
            now = asyncio.get_running_loop().time()
            if len(self.early) > 1000:
                self.early = {k: v for k, v in self.early.items() if v[0] > now - RECHECK}
            self.early[place] = (now, handed.grant)
        elif not future.done():
            future.set_result(handed.grant)
            return handed.grant is not None and handed.grant.granted
        return False

    def _on_wakeup(self, channel: str, payload: str) -> None:
        if not self.waiting:
            return
        if channel == CHANGED:  # another process committed (SQLite, which tells no more): a hand-off, perhaps
            self._read_soon()
        elif channel == "flow-ask" and payload in self.owners:  # a turn came under a rate window: ask again
            for future in self.waiting.values():
                if not future.done():
                    future.set_result(None)
        elif channel == "flow" and payload in self.owners:
            self._read_soon()

    def _read_soon(self) -> None:
        """Read which of the steps waiting here were handed a slot (once more if a read is under way)."""
        if self._reading is not None and not self._reading.done():
            self._again = True  # read once more when this read is done: it may have begun before the hand-off
            return
        self._reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            self._again = False
            ids = sorted({run_id for run_id, _ in self.waiting})
            try:
                rows = await self.store.read(flow.handed_slots, ids)
            except StoreError:
                rows = []  # the waiters ask again on their own
            for row in rows:
                future = self.waiting.get((row["run_id"], row["step_key"]))
                if future is not None and not future.done():
                    future.set_result(None)  # ask again: the grant is read under the step's own hold
            if not self._again:
                return


_WAITERS: weakref.WeakKeyDictionary[Store, Waiters] = weakref.WeakKeyDictionary()


def waiters(store: Store) -> Waiters:
    """The waiters of this process on ``store``."""
    found = _WAITERS.get(store)
    if found is None:
        found = _WAITERS[store] = Waiters(store)
    return found


def deliver(store: Store, handed: Sequence[flow.Handed]) -> list[str]:
    """Slots a committed transaction handed over: the steps waiting for them here start now; the runs
    whose steps were so given a slot."""
    if not handed:
        return []
    found = waiters(store)
    return [h.run_id for h in handed if found.hand(h)]


def undeliver(store: Store, handed: Sequence[flow.Handed]) -> None:
    """Slots delivered as their transaction's COMMIT went out were not handed after all (it did not commit):
    those no step took yet are forgotten (the steps that took one are the caller's to stop)."""
    found = waiters(store)
    for h in handed:
        found.early.pop((h.run_id, h.step_key), None)


class RoomMaker:
    """A full worker's steps waiting in place deep in their lines give way to other work: when a run the
    worker could take is due, the one that began waiting last parks (one each ``every`` seconds at most).
    The parked run keeps its place in the line and is woken again as its turn nears."""

    def __init__(self, store: Store, worker_id: str, every: float) -> None:
        self.store = store
        self.worker_id = worker_id
        self.every = every
        self._looked = 0.0

    async def look(self, now: float) -> None:
        """The worker is full: park a deep waiter if a run is due (one look each ``every`` seconds at most)."""
        found = _WAITERS.get(self.store)
        if found is None or not found.deep or now - self._looked < self.every:
            return
        self._looked = now
        due = await self.store.read(runs.next_wake, self.worker_id)
        if due is not None and due <= now:
            found.evict()


def pressing(claimed: Sequence[tuple[Row, Any]], free: int, app: App) -> frozenset[str]:
    """What a claim that filled every place (``free``) brought in besides runs back for a flow slot: the
    step flow key each such run's steps wait on (``""``: other work, or a key known only from its payload).

    A step waiting in place deep in its line parks for them, unless every one of them waits on its own
    key: a fresh run of that key would only wait behind it, and parking would cost writes for nothing."""
    if len(claimed) < free:
        return frozenset()
    return frozenset(_run_key(row, app) for row, _ in claimed if row["waiting_on"] != "flow")


def room_to_wait(pressing: frozenset[str], key: str, deep: int, places: int) -> bool:
    """Whether a step refused by ``key`` waits in place deep in its line, ``deep`` others doing so in a worker
    of ``places``: in nine tenths of them at most, and not while the last claim filled every place with fresh
    runs of other work (they are due: it parks, as they will); every place when they were all of ``key``'s."""
    if not pressing <= {key}:
        return False
    return deep < (places if pressing else places - max(1, places // 10))


def _run_key(row: Row, app: App) -> str:
    """The flow key a run's steps inherit, when it is one string for the run; ``""`` otherwise."""
    given = row.get("flow_control")
    if isinstance(given, str):
        return FlowLimits.from_json(given).key
    defn = app.definitions().get(row["workflow"])
    control = None if defn is None else defn.options.flow_control
    return control.key if isinstance(control, FlowControl) and isinstance(control.key, str) else ""
