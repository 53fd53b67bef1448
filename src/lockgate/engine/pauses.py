"""The pauses as this process last read them: the gate decides pauses from this snapshot."""

from __future__ import annotations

import asyncio

from ..clock import Clock
from ..store import Store, gate
from ..store.base import Row

__all__ = ["PAUSE_CACHE_SECONDS", "PauseCache"]

PAUSE_CACHE_SECONDS = 1.0
"""How old the snapshot may be: a pause reaches every process within that."""


class PauseCache:
    """Active pauses by scope (``wf:<name>``, ``key:<key>``), read at most a second ago."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._cache: dict[str, Row] = {}
        self._read_at = float("-inf")
        self._reads = 0  # reads of the pauses begun so far
        self._kept = 0  # the latest begun of those whose answer is the cache
        self._stale_read: asyncio.Future[None] | None = None

    async def snapshot(self) -> dict[str, Row]:
        """The pauses as last read, read again first if that was over a second ago.

        A burst of starts that finds the snapshot stale shares one read: a read per start would
        take a connection each and starve the writes they wait for."""
        if self._clock.now() - self._read_at > PAUSE_CACHE_SECONDS:
            if self._stale_read is None:
                self._stale_read = asyncio.ensure_future(self._read_once())
            await asyncio.shield(self._stale_read)
        return self._cache

    async def _read_once(self) -> None:
        try:
            await self.refresh()
        finally:
            self._stale_read = None

    async def refresh(self) -> None:
        """Read the pauses now (an answer older than one already kept is dropped)."""
        now = self._clock.now()
        self._reads += 1
        mine = self._reads
        rows = await self._store.read(gate.list_pauses, now)
        if mine < self._kept:
            return  # a read begun after this one has answered already: this one may be older
        self._cache = {r["scope"]: r for r in rows}
        self._read_at = now
        self._kept = mine

    async def paused(self, workflow: str) -> bool:
        """Whether ``workflow`` is paused (as of the snapshot)."""
        return gate.pause_in(await self.snapshot(), [f"wf:{workflow}"], self._clock.now()) is not None

    async def pause(self, scope: str, reason: str | None, until: float | None) -> None:
        """Pause ``scope`` (``wf:<name>``, ``key:<key>``) until ``until`` (``None``: until lifted).

        This process's gate sees it at once."""
        now = self._clock.now()
        await self._store.write(gate.pause, scope, reason, until, now)
        await self.committed(scope, {"scope": scope, "reason": reason, "until": until, "created_at": now})

    async def committed(self, scope: str, row: Row | None) -> None:
        """This process just committed a pause of ``scope`` (``row``) or its lifting (``None``): its own
        gate sees it at once, and no read begun before the commit may undo that; then a fresh read."""
        cache = dict(self._cache)
        if row is None:
            cache.pop(scope, None)
        else:
            cache[scope] = row
        self._reads += 1
        self._kept = self._reads
        self._cache = cache
        await self.refresh()
