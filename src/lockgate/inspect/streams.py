"""A run's stream as Server-Sent Events, for the HTTP endpoint and the dashboard alike.

Each chunk is an event named ``chunk`` (or ``reset``) whose ``id`` is its seq, so a browser's
``EventSource`` resumes after a dropped connection from the ``Last-Event-ID`` it sends back;
the last event, ``end``, carries the run's outcome (and no id). A comment is sent while
nothing happens, and the response ends after ``LIFETIME`` seconds: the browser reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

from ..errors import InvalidArgument
from ..streams import StreamChunk, StreamEnd

__all__ = ["KEEPALIVE", "LIFETIME", "resume_from", "sse_events"]

KEEPALIVE = 15.0
LIFETIME = 300.0


def resume_from(last_event_id: str | None, after: str | int | None) -> int:
    """The seq to read past: ``Last-Event-ID``, else ``after``, else 0; ``InvalidArgument`` if not a number."""
    given = last_event_id if last_event_id not in (None, "") else after
    if given is None or given == "":
        return 0
    try:
        value = int(given)
    except (TypeError, ValueError):
        raise InvalidArgument(f"Last-Event-ID / after must be a chunk's seq (a whole number), got {given!r}") from None
    if value < 0:
        raise InvalidArgument(f"Last-Event-ID / after must be >= 0, got {value}")
    return value


def _event(item: StreamChunk | StreamEnd) -> str:
    if isinstance(item, StreamEnd):
        return f"event: end\ndata: {json.dumps(item.to_dict())}\n\n"
    text: str | None = getattr(item, "_sse", None)
    if text is None:  # a chunk every reader of its topic shares: written as text once
        text = f"id: {item.seq}\nevent: {item.kind}\ndata: {json.dumps(item.to_dict())}\n\n"
        object.__setattr__(item, "_sse", text)
    return text


async def sse_events(
    source: AsyncIterator[list[StreamChunk] | StreamChunk | StreamEnd | None],
    disconnected: Callable[[], Awaitable[bool]] | None = None,
    *,
    lifetime: float = LIFETIME,
) -> AsyncIterator[str]:
    """``source`` (a reader's batches, read with ``heartbeat=KEEPALIVE``) as event-stream text: chunks and
    resets as they come, the chunks of a batch in one write, ``end`` last; a comment for each heartbeat,
    and an end after ``lifetime`` seconds."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + lifetime
    yield "retry: 1000\n\n"
    try:
        async for item in source:
            if item is None:  # a heartbeat: nothing for KEEPALIVE seconds
                if loop.time() > ends or (disconnected is not None and await disconnected()):
                    return
                yield ": still here\n\n"
                continue
            if isinstance(item, list):  # the chunks that came together: one write
                yield "".join(_event(chunk) for chunk in item)
                if loop.time() > ends:
                    return
                continue
            yield _event(item)
            if isinstance(item, StreamEnd) or loop.time() > ends:
                return
    finally:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()
