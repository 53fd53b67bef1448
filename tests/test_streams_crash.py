"""Run streams across a SIGKILL of the streaming worker and a failed attempt: every token once, in order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import lockgate as lg

from .apps import streaming
from .test_crash import Workers

pytestmark = pytest.mark.slow


class StreamWorkers(Workers):
    """``Workers`` running ``tests/apps/streaming.py``."""

    app = "tests.apps.streaming:app"


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[Workers]:
    with StreamWorkers(store_url, tmp_path) as pool:
        yield pool


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[lg.Client]:
    async with lg.Client(streaming.app, store_url, poll_interval=0.05) as c:
        yield c


async def test_a_reader_gets_every_token_once_across_a_sigkill_and_a_retry(workers: Workers, client: lg.Client) -> None:
    handle = await client.start("stream.answer", {"tag": "s1", "n": 20})
    assert handle.run_id is not None
    received: list[lg.StreamChunk] = []

    async def read() -> None:
        async for chunk in client.stream(handle.run_id):
            received.append(chunk)

    reader = asyncio.ensure_future(read())
    first = workers.spawn(lease="2s")
    await workers.until(lambda: len(received) >= 5, "five chunks read while the first worker streams")
    workers.kill(first)
    workers.spawn(lease="2s")
    assert await client.result(handle.run_id, timeout=60) == 20
    await asyncio.wait_for(reader, 30)

    assert [c.seq for c in received] == list(range(1, len(received) + 1))  # nothing missed, nothing twice
    resets = [(c.step, c.attempt) for c in received if c.kind == "reset"]
    assert resets == [("generate#0", 1), ("generate#0", 2)]  # the killed attempt, then the failed one
    kept = [c.data for c in lg.drop_resets(received)]
    assert kept == ["<start>", *[f"t{i}" for i in range(20)], "<end>"]
    assert {c.attempt for c in lg.drop_resets(received) if c.step} == {3}
    # a reader starting afresh reads the same stream from the store
    assert [c.seq for c in [c async for c in client.stream(handle.run_id)]] == [c.seq for c in received]
