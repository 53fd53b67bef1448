"""One PostgreSQL statement run straight through libpq: a repeatable write in one round trip.

A step's journal entry is one statement committed on its own, as often as the workflow
has steps, so the client's work around that round trip is most of what a step costs
beyond the server's. psycopg's asyncio cursor spends about twice the CPU of its blocking
loop on each such statement (a cursor, a transformer, the query's conversion, two waits
with their timers). This path sends the statement through psycopg's own libpq binding
(``psycopg.pq``) on a connection it does not otherwise touch while the statement runs,
prepared once per connection, with parameters in text form, and waits for one answer
with one reader on the event loop. On a ``DirectConnection`` that reader stays in place
from one statement to the next (registering and removing it each time costs two system
calls and a loop handle per wake-up, a good part of a local round trip).

It takes only what it can send exactly as psycopg would: ``None``, ``str`` (without NUL,
which libpq cannot carry in text form), ``int`` and ``float``. Anything else is refused
with ``Unsupported`` before a byte is sent, and the caller goes through psycopg.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import pq
from psycopg.abc import PQGen
from psycopg.rows import Row

from .multirow import POSTGRES_PARAM

__all__ = ["DirectConnection", "DirectStatement", "Unsupported", "numbered"]

_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_BAD = pq.ConnStatus.BAD


class DirectConnection(psycopg.AsyncConnection[Row]):
    """A psycopg connection on which direct statements leave their reader registered between runs.

    The reader steps down before psycopg itself waits on the connection (psycopg registers
    its own reader on the same socket), before it closes, and as soon as libpq may have
    closed the socket, so the event loop never watches a descriptor that is gone.
    """

    _reader_loop: asyncio.AbstractEventLoop | None = None
    _reader_fileno = -1
    _waiter: asyncio.Future[None] | None = None
    _plans: dict[Any, Any] | None = None
    _planned = 0

    @property
    def plans(self) -> dict[Any, Any]:
        """Statements prepared on this connection by the pipelined transactions (``store/wire.py``)."""
        if self._plans is None:
            self._plans = {}
        return self._plans

    def next_plan(self) -> int:
        """A number no other statement prepared on this connection has had."""
        self._planned += 1
        return self._planned

    async def wait(self, gen: PQGen[Any], *args: Any, **kwargs: Any) -> Any:
        self.stand_down()
        return await super().wait(gen, *args, **kwargs)

    async def close(self) -> None:
        self.stand_down()
        await super().close()

    @property
    def watching(self) -> bool:
        """Whether the direct statements' reader is registered on the event loop."""
        return self._reader_loop is not None

    def stand_down(self) -> None:
        """Remove the direct statements' reader, if it is registered."""
        loop, self._reader_loop = self._reader_loop, None
        if loop is not None:
            with contextlib.suppress(Exception):  # the loop is closed: nothing watches the socket anyway
                loop.remove_reader(self._reader_fileno)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        fileno = self.pgconn.socket
        if self._reader_loop is not loop or self._reader_fileno != fileno:
            self.stand_down()
            loop.add_reader(fileno, self._on_readable)
            self._reader_loop, self._reader_fileno = loop, fileno

    async def flushed(self) -> None:
        """Send all libpq holds for the server, reading its answers meanwhile (it stops reading while they back up)."""
        pgconn = self.pgconn
        if not pgconn.flush():  # nearly always sent at once
            return
        loop = asyncio.get_running_loop()
        self._watch(loop)
        while pgconn.flush():
            await _until_ready(loop.add_writer, loop.remove_writer, pgconn.socket)

    async def answered(self) -> None:
        """Wait until libpq holds the whole answer to the statement sent (in a pipeline: its next answer)."""
        pgconn = self.pgconn
        if not pgconn.is_busy():  # the answer was read already (by the reader, say); no system call to learn it
            return
        loop = asyncio.get_running_loop()
        self._watch(loop)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def _on_readable(self) -> None:
        # The answer is read here, not by the woken task: read later, the still-readable socket
        # would be reported once more by the loop's next poll and wake the next statement for nothing.
        waiter = self._waiter
        pgconn = self.pgconn
        try:
            pgconn.consume_input()  # with no statement waiting: a notice, or the server closing
        except psycopg.Error as exc:
            if pgconn.status == _BAD:
                self.stand_down()
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        if waiter is not None and not pgconn.is_busy():
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)


def numbered(sql: str) -> tuple[str, list[str]]:
    """``sql`` with its ``%(name)s`` parameters as the server's ``$n``, and the names in that order.

    A name used twice is one parameter; psycopg's escape for a literal ``%`` is undone.
    """
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return POSTGRES_PARAM.sub(number, sql).replace("%%", "%"), names


class Unsupported(Exception):
    """A parameter the direct path does not send (its type, or a NUL in text): go through psycopg."""


class DirectStatement:
    """The named query ``name`` ready to run through libpq on any connection.

    On a connection it first runs as an unnamed statement (one round trip, as psycopg's
    first runs are); from its second run there it is prepared under its own name, which
    psycopg's own prepared statements (``_pg3_*``) never take.
    """

    def __init__(self, name: str, sql: str) -> None:
        text, self.names = numbered(sql)
        self._text = text.encode()
        self._name = f"lockgate_direct_{name}".encode()
        # Per connection: [whether the statement is prepared there, the connection's Python encoding].
        self._seen: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    def _values(self, params: Mapping[str, Any], encoding: str) -> list[bytes | None]:
        out: list[bytes | None] = []
        for name in self.names:
            value = params[name]
            if value is None:
                out.append(None)
            elif type(value) is str:
                if "\x00" in value:
                    raise Unsupported(name)
                out.append(value.encode(encoding))
            elif type(value) is int or type(value) is float:  # not bool: psycopg sends that as a boolean
                out.append(repr(value).encode())
            else:
                raise Unsupported(name)
        return out

    async def run(self, conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> int:
        """Run on ``conn`` (idle, in autocommit, used by no one else meanwhile); the rows it changed.

        ``Unsupported`` for a parameter this path does not carry, before anything is sent. A
        refusal by the server raises its psycopg error, after which the connection is idle
        again; a failure of the connection raises ``psycopg.OperationalError``. Cancelled
        while the statement is out, the connection is left with an answer to read: call
        ``finish`` before anything else uses it.
        """
        try:
            return await self._run(conn, params)
        except BaseException:
            _gone(conn)
            raise

    async def _run(self, conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any]) -> int:
        pgconn = conn.pgconn
        seen = self._seen.get(conn)
        if seen is None:
            encoding = conn.info.encoding
            values = self._values(params, encoding)
            self._seen[conn] = [False, encoding]
            pgconn.send_query_params(self._text, values)
            return await self._finish(conn)
        values = self._values(params, seen[1])
        if not seen[0]:
            seen[0] = True  # so even if its caller is cancelled, and the answer read by ``finish``
            pgconn.send_prepare(self._name, self._text)
            try:
                await self._finish(conn)
            except psycopg.Error:
                seen[0] = False
                raise
        pgconn.send_query_prepared(self._name, values)
        return await self._finish(conn)

    @classmethod
    async def finish(cls, conn: psycopg.AsyncConnection[Any]) -> int:
        """Send what is left of the statement and read its answer; the rows it changed."""
        try:
            return await cls._finish(conn)
        except BaseException:
            _gone(conn)
            raise

    @staticmethod
    async def _finish(conn: psycopg.AsyncConnection[Any]) -> int:
        pgconn = conn.pgconn
        if isinstance(conn, DirectConnection):
            await conn.flushed()
            await conn.answered()
        else:
            loop = asyncio.get_running_loop()
            fileno = pgconn.socket
            while pgconn.flush():  # a few bytes: nearly always sent at once
                await _until_ready(loop.add_writer, loop.remove_writer, fileno)
            while True:
                pgconn.consume_input()
                if not pgconn.is_busy():
                    break
                await _until_ready(loop.add_reader, loop.remove_reader, fileno)
        result = pgconn.get_result()
        while pgconn.get_result() is not None:  # the end of this statement's answers
            pass
        if result is None:
            raise psycopg.OperationalError("the server sent no answer to the statement")
        if result.status not in _DONE:
            encoding = conn.info.encoding
            if pgconn.status == pq.ConnStatus.BAD:
                raise psycopg.OperationalError(result.get_error_message(encoding))
            raise psycopg.errors.error_from_result(result, encoding=encoding)
        return int(result.command_tuples or 0)


def _gone(conn: psycopg.AsyncConnection[Any]) -> None:
    """After a failure: if libpq dropped the connection it closed the socket, whose number may soon be another's."""
    if isinstance(conn, DirectConnection) and conn.pgconn.status == _BAD:
        conn.stand_down()


async def _until_ready(add: Any, remove: Any, fileno: int) -> None:
    """Wait until ``fileno`` is ready (``add``/``remove``: the loop's reader or writer calls)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    add(fileno, _wake, future)
    try:
        await future
    finally:
        remove(fileno)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
