"""Events survive SIGKILL: a replayed publish publishes once; a fan-out cut short delivers once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import lockgate as lg

from .apps import crashy_events
from .test_crash import Workers

pytestmark = pytest.mark.slow

APP = "tests.apps.crashy_events:app"


class EventWorkers(Workers):
    """``Workers`` running the event crash app."""

    app = APP


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[EventWorkers]:
    with EventWorkers(store_url, tmp_path) as pool:
        yield pool


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[lg.Client]:
    async with lg.Client(crashy_events.app, store_url, poll_interval=0.05) as c:
        yield c


async def test_a_publish_replayed_after_sigkill_publishes_once(workers: EventWorkers, client: lg.Client) -> None:
    h = await client.start("crashev.publisher", {"tag": "p1"})
    assert h.run_id is not None
    first = workers.spawn()
    assert await workers.exited(first) == 17  # died in the step after the publish
    workers.spawn()
    event_id = await client.result(h.run_id, timeout=60)
    events = await client.list_events(name="crash.happened")
    assert [e.id for e in events] == [event_id]
    assert workers.count("p1:body") == 2  # the body ran twice, the publish once

    async def delivered() -> bool:
        return [d.status for d in await client.deliveries(event_id)] == ["started"]

    await workers.until(delivered, "the event delivered")
    assert len(await client.list_runs(workflow="crashev.react")) == 1


async def test_a_fan_out_cut_short_by_sigkill_delivers_each_event_once(
    workers: EventWorkers, client: lg.Client
) -> None:
    ids = [await client.publish(crashy_events.happened, {"tag": f"t{n}"}, {"n": n}) for n in range(40)]
    first = workers.spawn()  # nothing fanned out before: the deliveries wait, pending, in the store

    async def some_started() -> bool:
        return len(await client.list_runs(workflow="crashev.react", limit=100)) >= 5

    await workers.until(some_started, "a few deliveries")
    workers.kill(first)
    workers.spawn()

    async def all_settled() -> bool:
        for eid in ids:
            if [d.status for d in await client.deliveries(eid)] != ["started"]:
                return False
        return True

    await workers.until(all_settled, "every delivery settled")
    runs = await client.list_runs(workflow="crashev.react", limit=200)
    assert sorted(r.payload["tag"] for r in runs) == sorted(f"t{n}" for n in range(40))
    assert {r.source for r in runs} == {"event:crash.happened"}


async def test_a_wait_replayed_after_sigkill_returns_the_same_event(workers: EventWorkers, client: lg.Client) -> None:
    h = await client.start("crashev.waiter", {"tag": "w1", "n": 7})
    assert h.run_id is not None
    consumed = await client.publish(crashy_events.happened, {"tag": "x"}, {"n": 7})
    first = workers.spawn()
    assert await workers.exited(first) == -9  # killed in the step after the wait
    await client.publish(crashy_events.happened, {"tag": "y"}, {"n": 7})  # matches too, but later
    workers.spawn()
    assert await client.result(h.run_id, timeout=60) == consumed
    assert workers.count("w1:after") == 2
