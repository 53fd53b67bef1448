"""Run streams on a ``Client`` (and an ``Engine``): reading one, and minting browser-scoped read tokens.

``StreamVerbs`` is a mixin over the ``Core`` the client holds; the HTTP stream endpoint checks a
presented token with ``check_stream_token``. See docs/streams.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from ..durations import Duration, to_seconds
from ..engine.core import Core
from ..errors import InvalidArgument, UnknownRun
from ..store import runs
from ..streams import DEFAULT_TOPIC, StreamChunk, StreamEnd, check_topic, sign_token, verify_token

__all__ = ["MAX_TOKEN_TTL", "StreamVerbs"]

MAX_TOKEN_TTL = 7 * 24 * 3600.0


class StreamVerbs:
    """``stream``, ``stream_token`` and what the HTTP endpoint needs of them."""

    core: Core

    def stream(self, run_id: str, topic: str = DEFAULT_TOPIC, *, after: int = 0) -> AsyncIterator[StreamChunk]:
        """``async for chunk in client.stream(run_id)``: the run's stream ``topic`` past seq ``after``, live,
        ending once the run ended and all of it was read. ``UnknownRun`` when no run has that id."""
        return self.core.stream(run_id, topic, after)

    async def stream_events(
        self, run_id: str, topic: str = DEFAULT_TOPIC, after: int = 0, *, heartbeat: float | None = None
    ) -> AsyncIterator[list[StreamChunk] | StreamEnd | None]:
        """As ``stream``, the chunks that came together in one list, then a ``StreamEnd`` with the run's
        outcome (what the SSE endpoint sends); with ``heartbeat``, ``None`` after each ``heartbeat`` seconds
        without one. ``UnknownRun`` here, before anything is read, when no run has that id."""
        check_topic(topic)
        run = await self.core.streams.run_row(run_id)
        return self.core.streams.batches(run_id, topic, after, heartbeat=heartbeat, run=run)

    async def stream_token(self, run_id: str, *, ttl: Duration = "15m", topics: Sequence[str] | None = None) -> str:
        """A signed token that reads ``run_id``'s stream (only ``topics``, when given) and nothing else,
        until ``ttl`` from now: hand it to a browser for ``GET /api/v1/runs/{id}/stream?token=``.

        ``UnknownRun`` when no run has that id; ``InvalidArgument`` for a ``ttl`` outside 1s..7d or a bad topic.
        """
        seconds = to_seconds(ttl, what="ttl")
        if not 1.0 <= seconds <= MAX_TOKEN_TTL:
            raise InvalidArgument(f"stream_token: ttl must be between 1s and 7d, got {ttl!r}")
        if isinstance(topics, str):
            raise InvalidArgument("stream_token: topics must be a list of topic names, not one string")
        chosen = None if topics is None else [check_topic(t) for t in topics]
        if chosen is not None and not chosen:
            raise InvalidArgument("stream_token: topics must name at least one topic (None: all of them)")
        if await self.core.store.read(runs.find_run, run_id) is None:
            raise UnknownRun(f"no run {run_id}")
        secret = await self.core.streams.secret()
        return sign_token(secret, run_id, chosen, self.core.clock.now() + seconds)

    async def check_stream_token(self, token: str, run_id: str, topic: str) -> None:
        """Nothing when ``token`` grants reading ``run_id``'s ``topic`` now; ``StreamTokenRefused`` why not."""
        verify_token(await self.core.streams.secret(), token, run_id, topic, self.core.clock.now())
