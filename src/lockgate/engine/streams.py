"""A body's side of run streams: ``ctx.stream(chunk, topic=...)``.

Chunks are numbered per topic by the execution, queued in order on the store's group commit
(a burst of chunks between two turns of the event loop is one multi-row write) and fenced
by the run's lease. ``ctx.stream`` returns once its chunk is queued; it waits for commits
only when several writes are still in flight, and the run's next journal write, park or end
commits after them (the store's queue keeps their order).

Replay: a body re-entered from the top streams its chunks again. Chunks written outside a
step are counted per topic, and those already stored are not written twice. A step that
completed returns its record without running, so its chunks are not written again; a step
attempt that fails is followed by a ``reset`` chunk in each topic it wrote to, and so are
the attempts a dead worker left unfinished (found when the run streams again), so a reader
can drop what such an attempt wrote.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import weakref
from collections import Counter
from typing import Any

from ..errors import StreamLimitExceeded
from ..serde import encode, refuse_unstorable
from ..store import streams as store_streams
from ..streams import check_topic
from .durable import Running
from .stream_hub import StreamHub, chunk_identity

__all__ = ["IN_FLIGHT", "STEP", "RunStreams"]

STEP: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("lockgate_stream_step", default=None)
"""The step key and attempt number of the step attempt running in this task, if any (set by the executor)."""

IN_FLIGHT = 4  # chunk writes queued and not yet durable before ``ctx.stream`` waits for the oldest


class RunStreams:
    """What one execution has streamed, and what the run had streamed before it."""

    def __init__(self, run: Running, hub: StreamHub) -> None:
        self._run = weakref.ref(run)  # the execution holds this (in _STREAMS, by a weak key): no cycle keeps it
        self.hub = hub
        self._loaded = False
        self._next: Counter[str] = Counter()  # topic -> last seq written
        self._body_stored: Counter[str] = Counter()  # topic -> chunks outside steps stored before this execution
        self._body_seen: Counter[str] = Counter()  # topic -> chunks outside steps this execution reached
        self._prior: dict[str, int] = {}  # step key -> highest attempt number stored
        self._written: dict[tuple[str, int], set[str]] = {}  # (step key, attempt) -> topics it wrote to
        self._chunks = 0
        self._bytes = 0
        self._batch: store_streams.ChunkBatch | None = None  # queued, not yet taken by its write
        self._pending: list[asyncio.Future[None]] = []

    @property
    def run(self) -> Running:
        run = self._run()
        if run is None:  # only an execution streams, and only while it runs
            raise RuntimeError("ctx.stream: the execution has ended")
        return run

    async def _load(self) -> None:
        rows = await self.run.store.read(store_streams.state, self.run.run_id)
        open_attempts: set[tuple[str, str, int]] = set()
        resets: set[tuple[str, str, int]] = set()
        for row in rows:
            topic, step, kind = row["topic"], row["step_key"], row["kind"]
            self._next[topic] = max(self._next[topic], int(row["last"]))
            if step is not None:
                attempt = int(row["attempt"])
                self._prior[step] = max(self._prior.get(step, 0), attempt)
                (resets if kind == "reset" else open_attempts).add((topic, step, attempt))
            if kind == "chunk":
                self._chunks += int(row["n"])
                self._bytes += int(row["bytes"])
                if step is None:
                    self._body_stored[topic] += int(row["n"])
        self._loaded = True
        for topic, step, attempt in sorted(open_attempts - resets):
            entry = self.run.entry(step)
            if entry is None or entry["status"] != "completed":  # left unfinished by a worker that died
                self._queue(self._reset_row(topic, step, attempt))

    def _attempt(self, step: str, attempt: int) -> int:
        """The attempt number a chunk carries: counted on from the attempts earlier executions streamed."""
        return self._prior.get(step, 0) + attempt

    async def append(self, chunk: Any, topic: str) -> None:
        if topic not in self._next:
            check_topic(topic)
        if type(chunk) is str and chunk.isascii():  # a token of text: the common chunk, encoded plainly
            text = json.dumps(chunk)
        else:
            refuse_unstorable(chunk, "stream chunk")
            try:
                text = encode(chunk)
            except Exception as exc:
                raise TypeError(f"ctx.stream: the chunk cannot be stored as JSON: {exc}") from exc
        self._check_failed()
        if not self._loaded:
            await self._load()
        step = STEP.get()
        if step is None:
            n = self._body_seen[topic]
            self._body_seen[topic] = n + 1
            if n < self._body_stored[topic]:
                return  # written by an earlier entry of the body: not again
        size = len(text.encode())
        limits = self.hub.limits
        if self._chunks + 1 > limits.chunks:
            raise StreamLimitExceeded(self.run.run_id, "chunks", limits.chunks)
        if self._bytes + size > limits.bytes:
            raise StreamLimitExceeded(self.run.run_id, "bytes", limits.bytes)
        self._chunks += 1
        self._bytes += size
        seq = self._seq(topic)
        if self.run.sealer is not None:
            text = self.run.sealer.seal(*chunk_identity(topic, seq), text)
        step_key, attempt = (None, None) if step is None else (step[0], self._attempt(*step))
        if step_key is not None and attempt is not None:
            self._written.setdefault((step_key, attempt), set()).add(topic)
        self._queue(self._row(topic, seq, "chunk", step_key, attempt, text, size))
        if len(self._pending) > IN_FLIGHT:
            await asyncio.shield(self._pending[0])
            self._check_failed()

    def attempt_failed(self, step: str, attempt: int) -> None:
        """A step attempt failed: tell readers of each topic it wrote to to drop its chunks."""
        if not self._loaded:
            return  # it streamed nothing
        number = self._attempt(step, attempt)
        for topic in sorted(self._written.pop((step, number), ())):
            self._queue(self._reset_row(topic, step, number))

    def _seq(self, topic: str) -> int:
        self._next[topic] += 1
        return self._next[topic]

    def _reset_row(self, topic: str, step: str, attempt: int) -> dict[str, Any]:
        return self._row(topic, self._seq(topic), "reset", step, attempt, None, 0)

    def _row(
        self, topic: str, seq: int, kind: str, step: str | None, attempt: int | None, data: str | None, size: int
    ) -> dict[str, Any]:
        return {
            "topic": topic,
            "seq": seq,
            "kind": kind,
            "step_key": step,
            "attempt": attempt,
            "data": data,
            "size": size,
            "created_at": self.run.clock.now(),
        }

    def _queue(self, row: dict[str, Any]) -> None:
        batch = self._batch
        if batch is not None and not batch.taken:
            batch.rows.append(row)  # a write queued already takes it with the rest
            return
        batch = self._batch = store_streams.ChunkBatch(self.run.fence)
        batch.rows.append(row)
        future = self.run.store.write_soon(store_streams.append, batch)
        future.add_done_callback(self._done)
        self._pending.append(future)

    def _done(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.hub.committed()

    def _check_failed(self) -> None:
        """Drop the writes that are durable; raise the failure of one that failed (``Fenced``: the lease moved on)."""
        while self._pending and self._pending[0].done():
            future = self._pending.pop(0)
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]


_STREAMS: weakref.WeakKeyDictionary[Running, RunStreams] = weakref.WeakKeyDictionary()
"""Each execution's streams, made by its first ``ctx.stream``."""


async def stream(run: Running, chunk: Any, *, topic: str = "default") -> None:
    """``ctx.stream``: append ``chunk`` to the run's stream ``topic`` (the executor's method)."""
    streams = _STREAMS.get(run)
    if streams is None:
        streams = _STREAMS[run] = RunStreams(run, run.host.stream_hub)
    await streams.append(chunk, topic)


def attempt_failed(run: Running, step: str, attempt: int) -> None:
    """A step attempt of ``run`` failed: readers drop what it streamed."""
    streams = _STREAMS.get(run)
    if streams is not None:
        streams.attempt_failed(step, attempt)
