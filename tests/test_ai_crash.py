"""kill -9 in the middle of a multi-turn agent run: the next worker resumes it without calling the completed
model requests or tools again (at most the one in flight)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import lockgate as lg

from .apps import agents_crash, crashy
from .test_cli import migrated
from .test_crash import Workers

pytestmark = pytest.mark.slow


class AgentWorkers(Workers):
    app = "tests.apps.agents_crash:app"


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[AgentWorkers]:
    with AgentWorkers(migrated(store_url), tmp_path) as pool:
        yield pool


async def test_a_killed_agent_run_resumes_without_calling_completed_requests_again(
    workers: AgentWorkers, store_url: str
) -> None:
    async with lg.Client(agents_crash.app, store_url, poll_interval=0.05) as client:
        h = await client.start("agentcrash.narrate", {"text": "narrate row 7"})
        assert h.run_id is not None
        first = workers.spawn(lease="1s")
        await workers.until(lambda: workers.count("model:2") == 1, "the third request in flight")
        workers.kill(first)
        assert [workers.count(x) for x in ("model:0", "tool:r0", "model:1", "tool:r1")] == [1, 1, 1, 1]

        workers.raise_flag("release")
        workers.spawn(lease="1s")
        assert await client.result(h.run_id, timeout=60) == "narrated"
        # the completed requests and tools were replayed from the journal; only the one in flight ran again
        counts = [workers.count(x) for x in ("model:0", "tool:r0", "model:1", "tool:r1", "model:2")]
        assert counts == [1, 1, 1, 1, 2], workers.output()


@pytest.fixture
def pg_workers(pg_url: str, tmp_path: Path) -> Iterator[AgentWorkers]:
    with AgentWorkers(migrated(pg_url), tmp_path) as pool:
        yield pool


async def test_a_429_in_one_process_pauses_the_key_for_three(pg_workers: AgentWorkers, pg_url: str) -> None:
    async with lg.Client(agents_crash.app, pg_url, poll_interval=0.05) as client:
        handles = [await client.start("agentcrash.pressure", {"text": f"row {i}"}) for i in range(9)]
        for _ in range(3):
            pg_workers.spawn(lease="5s")

        async def paused() -> bool:
            keys = await client.flow_keys("pressure")
            return bool(keys and keys[0].paused)

        await pg_workers.until(paused, "the key paused by the 429")
        for h in handles:
            assert h.run_id is not None and await client.result(h.run_id, timeout=60) == "ok"
    lines = [line.split() for line in crashy.effects(pg_workers.effects)]
    [refused] = [float(at) for kind, at, _ in lines if kind == "429"]
    calls = sorted(float(at) for kind, at, _ in lines if kind == "call")
    assert len(calls) == 9
    # a request admitted before the pause was written may still go out just after the 429; none in the pause
    assert not [at for at in calls if refused + 0.5 < at < refused + 2.9], (refused, calls)
    assert calls[-1] >= refused + 2.9
