"""Reading run streams: a process's readers, fed by one query, and each reader's catch-up by seq.

A reader first pages its topic from the store (past the seq it was given), then receives
what commits next. While anyone reads, the hub follows every run's new chunks by id with one
query (at once when a chunk committed in this process, else every ``POLL`` seconds) and
hands each row to the readers of its run and topic; a reader that sees a gap in the seqs
(rows committed out of id order on PostgreSQL) reads its topic again from the store. Once
the run has ended its stream is complete (its chunks commit before its end), and the reader
ends with the run's outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from ..clock import Clock, stop_tasks
from ..crypto import Keyring, Sealer, is_sealed
from ..errors import UnknownRun
from ..store import Store, runs, shared
from ..store import streams as store_streams
from ..store.base import Row
from ..streams import StreamChunk, StreamEnd, StreamLimits, check_topic

__all__ = ["POLL", "SECRET_NAME", "StreamHub", "chunk_identity"]

POLL = 0.05  # seconds between two looks for other processes' chunks while someone reads
IDLE = 0.5  # seconds between two looks at whether the runs read here ended (in other processes)
RECHECK = 2.0  # PostgreSQL: seconds between a quiet reader's reads of its topic (a row committed out of id order)
PAGE = 500
SECRET_NAME = "stream-tokens"


def chunk_identity(topic: str, seq: int) -> tuple[str, str]:
    """The journal key and field a chunk of an encrypted run is sealed as (``Sealer.seal``)."""
    return f"stream:{topic}", str(seq)


class _Reader:
    __slots__ = ("ended", "news", "rows")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.news = asyncio.Event()
        self.ended = False


class StreamHub:
    """One per client or engine: the cap its executions apply, the readers it feeds, the token secret."""

    def __init__(self, store: Store, keyring: Keyring, clock: Clock) -> None:
        self.store = store
        self.keyring = keyring
        self.clock = clock
        self.limits = StreamLimits()
        self._readers: dict[str, dict[str, set[_Reader]]] = {}  # run id -> topic -> its readers here
        self._last: int | None = None
        self._poke: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._secret: str | None = None
        # Where ids are not given in commit order (PostgreSQL: concurrent transactions), a row can commit
        # after the follower passed its id: a reader whose seqs jump reads its topic again, and a quiet one
        # does every RECHECK seconds. SQLite commits one transaction at a time: ids follow commits.
        self._out_of_order = store.dialect != "sqlite"

    # -- told by this process ---------------------------------------------------------------

    def committed(self) -> None:
        """Chunks committed here: look for them now."""
        if self._poke is not None:
            self._poke.set()

    def ended(self, run_id: str) -> None:
        """``run_id`` ended here: its readers finish once they have read everything."""
        for readers in self._readers.get(run_id, {}).values():  # a run's end costs its own readers only
            for reader in readers:
                reader.ended = True
                reader.news.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_tasks([task])

    # -- the shared follower --------------------------------------------------------------

    async def _follow(self) -> None:
        poke = self._poke
        assert poke is not None
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while self._readers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL):  # never wait_for: on 3.11 it may turn a cancel into a timeout
                    await poke.wait()
            poke.clear()
            try:
                if loop.time() - checked >= IDLE:  # runs other processes ended: one query for every reader
                    checked = loop.time()
                    for row in await self.store.read(runs.ended_rows, sorted(self._readers)):
                        self.ended(row["id"])
                while True:
                    rows = await self.store.read(store_streams.tail, self._last or 0, PAGE)
                    for row in rows:
                        self._last = max(self._last or 0, int(row["id"]))
                        for reader in self._readers.get(row["run_id"], {}).get(row["topic"], ()):
                            reader.rows.append(row)
                            reader.news.set()
                    if len(rows) < PAGE:
                        break
            except Exception:  # a store outage: the readers' own reads report it; look again later
                await asyncio.sleep(POLL)
        self._task = None

    async def _join(self, key: tuple[str, str], reader: _Reader) -> None:
        if self._last is None:
            self._last = await self.store.read(store_streams.last_id)
        self._readers.setdefault(key[0], {}).setdefault(key[1], set()).add(reader)
        if self._task is None or self._task.done():
            self._poke = asyncio.Event()
            self._task = asyncio.ensure_future(self._follow())

    def _leave(self, key: tuple[str, str], reader: _Reader) -> None:
        topics = self._readers.get(key[0], {})
        readers = topics.get(key[1])
        if readers is not None:
            readers.discard(reader)
            if not readers:
                del topics[key[1]]
            if not topics:
                del self._readers[key[0]]

    # -- one reader -----------------------------------------------------------------------

    async def read(
        self, run_id: str, topic: str, after: int = 0, *, heartbeat: float | None = None
    ) -> AsyncIterator[StreamChunk | StreamEnd | None]:
        """``run_id``'s ``topic`` past seq ``after``, then what comes, then a ``StreamEnd`` once it ended.

        With ``heartbeat``, ``None`` after each ``heartbeat`` seconds without a chunk (a server's
        keep-alive). ``UnknownRun`` when no run has that id.
        """
        async for batch in self.batches(run_id, topic, after, heartbeat=heartbeat):
            if isinstance(batch, list):
                for chunk in batch:
                    yield chunk
            else:
                yield batch

    async def run_row(self, run_id: str) -> Row:
        """The run's row; ``UnknownRun`` when no run has that id (checked before a response begins)."""
        run = await self.store.read(runs.find_run, run_id)
        if run is None:
            raise UnknownRun(f"no run {run_id}")
        return run

    async def batches(
        self, run_id: str, topic: str, after: int = 0, *, heartbeat: float | None = None, run: Row | None = None
    ) -> AsyncIterator[list[StreamChunk] | StreamEnd | None]:
        """As ``read``, the chunks that came together in one list (a server writes them at once); ``run``:
        the run's row when the caller read it already."""
        check_topic(topic)
        key = (run_id, topic)
        reader = _Reader()
        await self._join(key, reader)
        try:
            last = max(0, int(after))
            sealer: Sealer | None = None
            run = run or await self.run_row(run_id)
            loop = asyncio.get_running_loop()
            checked = beat = loop.time()
            ended = run["status"] in shared.TERMINAL
            while True:
                # from the store: everything past ``last`` (at first, after a gap, after the run ended)
                while True:
                    reader.rows.clear()
                    rows = await self.store.read(store_streams.chunks, run_id, topic, last, PAGE)
                    if rows:
                        sealer = sealer or (Sealer(self.keyring, run_id) if is_sealed(rows[0]["data"]) else None)
                        yield [self._chunk(row, sealer) for row in rows]
                        last = int(rows[-1]["seq"])
                    if len(rows) < PAGE:
                        break
                if ended:
                    final = await self.store.read(runs.find_run, run_id)
                    yield self._end(final or run)
                    return
                # then as they commit, handed over by the follower
                gap = False
                while not gap:
                    if not reader.rows:
                        wait = min(IDLE, max(0.0, checked + RECHECK - loop.time())) if self._out_of_order else IDLE
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(wait):
                                await reader.news.wait()
                        reader.news.clear()
                    rows, reader.rows = reader.rows, []
                    batch: list[StreamChunk] = []
                    for row in sorted(rows, key=lambda r: int(r["seq"])):
                        seq = int(row["seq"])
                        if seq <= last:
                            continue
                        if seq != last + 1:
                            gap = True
                            break
                        sealer = sealer or (Sealer(self.keyring, run_id) if is_sealed(row["data"]) else None)
                        batch.append(self._chunk(row, sealer))
                        last, beat = seq, loop.time()
                    if batch:
                        yield batch
                    if heartbeat is not None and loop.time() - beat >= heartbeat:
                        beat = loop.time()
                        yield None
                    if reader.ended:  # told by the run's end here, or by the follower's look at every reader's run
                        reader.ended = False
                        status = await self.store.read(runs.find_run, run_id)
                        if status is None or status["status"] in shared.TERMINAL:
                            ended = True
                            run = status or run
                            break
                    if self._out_of_order and loop.time() - checked >= RECHECK:
                        checked = loop.time()
                        gap = True  # a row that committed after a later one was handed over: read the store
        finally:
            self._leave(key, reader)

    def _chunk(self, row: Row, sealer: Sealer | None) -> StreamChunk:
        made = row.get("_chunk")
        if made is not None:  # a row the follower handed to every reader of its topic: decoded once
            return made  # type: ignore[no-any-return]
        row["_chunk"] = chunk = self._decode(row, sealer)
        return chunk

    def _decode(self, row: Row, sealer: Sealer | None) -> StreamChunk:
        topic, seq = row["topic"], int(row["seq"])
        text = row["data"]
        if sealer is not None and text is not None:
            text = sealer.open(*chunk_identity(topic, seq), text)
        return StreamChunk(
            seq=seq,
            topic=topic,
            data=None if text is None else json.loads(text),
            kind="reset" if row["kind"] == "reset" else "chunk",
            step=row["step_key"],
            attempt=None if row["attempt"] is None else int(row["attempt"]),
            at=float(row["created_at"]),
        )

    def _end(self, row: Row) -> StreamEnd:
        sealer = Sealer(self.keyring, row["id"])
        status = str(row["status"])
        if status not in shared.TERMINAL:
            return StreamEnd(row["id"], status)
        output: Any = None
        if status == "succeeded" and row.get("output") is not None:
            text = sealer.open("", "output", row["output"])
            output = json.loads(text) if text is not None else None
        return StreamEnd(
            run_id=row["id"],
            status=status,
            result=output,
            error_tag=row.get("error_tag"),
            error=sealer.open("", "error", row.get("error_message")),
        )

    # -- tokens ---------------------------------------------------------------------------

    async def secret(self) -> str:
        """The secret stream tokens are signed with, shared through the database (made on first use)."""
        if self._secret is None:
            value = await self.store.read(store_streams.read_secret, SECRET_NAME)
            if value is None:
                value = await self.store.write(store_streams.secret, SECRET_NAME, self.clock.now())
            self._secret = value
        return self._secret
