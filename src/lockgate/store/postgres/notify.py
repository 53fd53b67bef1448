"""Wake-ups between processes: LISTEN/NOTIFY over a dedicated connection that reconnects by itself."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import psycopg

from ..base import LISTENING, Tx
from ..wire import WireTx
from .connections import Connections
from .failures import first_line
from .tx import PostgresTx

__all__ = ["CHANNEL", "Wakeups"]

log = logging.getLogger("lockgate.store")

CHANNEL = "lockgate"
"""The PostgreSQL channel every wake-up travels on (the logical channel is in the payload)..."""
ENDED_CHANNEL = "lockgate_ended"
"""... but runs' ends (migration 0056): heard only by a process that awaits another process's run."""
_NOTIFY_LIMIT = 8000  # PostgreSQL refuses NOTIFY payloads of 8000 bytes or more


class Wakeups(Connections):
    """Publishing wake-ups with a transaction's commit, and hearing other processes'."""

    _listeners: list[Callable[[str, str], None]]
    _listener: asyncio.Task[None] | None
    _hearing_ends: bool

    @property
    def cross_process_wakeups(self) -> bool:
        return True

    @property
    def ranked_wakeups(self) -> bool:
        return True  # migration 0059

    async def notify(self, tx: Tx, channel: str, payload: str) -> None:
        if not isinstance(tx, (PostgresTx, WireTx)):
            raise TypeError("notify() takes a transaction of this PostgreSQL store")
        message = json.dumps([self._origin, channel, payload])
        size = len(message.encode())
        if size >= _NOTIFY_LIMIT:
            raise ValueError(f"wake-up on {channel!r} is {size} bytes; PostgreSQL allows under {_NOTIFY_LIMIT}")
        await tx.send("SELECT pg_notify(%(channel)s, %(message)s)", {"channel": CHANNEL, "message": message})

    def add_listener(self, callback: Callable[[str, str], None]) -> None:
        self._listeners.append(callback)
        if self._pool is not None and not self._closing:
            self._start_listener()

    def hear_ends(self) -> None:
        """Have the listeners told ``ended`` too: the listening connection joins the ends' channel (it is
        opened again if it runs: a wake-up missed meanwhile is polled)."""
        if self._hearing_ends:
            return
        self._hearing_ends = True
        if self._listener is not None and not self._listener.done():
            self._listener.cancel()
            self._listener = None
            self._start_listener()

    def _start_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="lockgate-pg-listener")

    async def _listen(self) -> None:
        """LISTEN on a connection of its own; reconnect when it drops (missed wake-ups are polled)."""
        delay = 0.1
        while True:
            conn = None
            began = time.monotonic()  # an answer to this attempt does not end an outage said since
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                self._born[conn] = self._outages
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    if self._hearing_ends:
                        await conn.execute(f"LISTEN {ENDED_CHANNEL}")
                    self._reachable(began)
                    delay = 0.1
                    self._tell(LISTENING, "")
                    async for note in conn.notifies():
                        self._deliver(note.payload)
            except psycopg.OperationalError as exc:
                await self._trouble(exc, conn)
            except psycopg.Error as exc:
                log.warning("PostgreSQL listener failed (will reconnect): %s", first_line(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _deliver(self, raw: str) -> None:
        try:
            origin, channel, payload = json.loads(raw)
        except (ValueError, TypeError):
            log.debug("ignored a foreign notification on %s: %r", CHANNEL, raw)
            return
        if origin != self._origin:
            self._tell(channel, payload)

    def _tell(self, channel: str, payload: str) -> None:
        for callback in list(self._listeners):
            try:
                callback(channel, payload)
            except Exception:
                log.exception("wake-up listener %r failed", callback)
