"""The Inspector's counts (page limits, offsets, tails) are bounded: a typed error naming the argument."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import lockgate as lg
from lockgate.inspect import Inspector, RunFilter

BAD = [0, -1, 10**30, 1_000_001, True, 2.5, "10"]

READS: dict[str, Callable[[Inspector, Any], Awaitable[Any]]] = {
    "runs": lambda i, n: i.runs(limit=n),
    "run_page": lambda i, n: i.run_page(RunFilter(), limit=n),
    "children": lambda i, n: i.children("run_x", limit=n),
    "ledger": lambda i, n: i.ledger(limit=n),
    "parked": lambda i, n: i.parked(limit=n),
    "list_events": lambda i, n: i.list_events(limit=n),
    "schedule_firings": lambda i, n: i.schedule_firings("nightly", limit=n),
    "replay_check": lambda i, n: i.replay_check(limit=n),
    "run_detail": lambda i, n: i.run_detail("run_x", children_limit=n),
}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("value", BAD, ids=repr)
async def test_a_count_out_of_range_is_refused_naming_it(store_url: str, read: str, value: Any) -> None:
    async with lg.Client(lg.App(), store_url) as client:
        with pytest.raises(lg.InvalidArgument) as refused:
            await READS[read](client.inspector, value)
    assert ("children_limit" if read == "run_detail" else "limit") in str(refused.value)
    assert "1,000,000" in str(refused.value)


async def test_offsets_and_tails_are_bounded_too(store_url: str) -> None:
    async with lg.Client(lg.App(), store_url) as client:
        inspector = client.inspector
        with pytest.raises(lg.InvalidArgument, match="offset"):
            await inspector.runs(offset=-1)
        with pytest.raises(lg.InvalidArgument, match="offset"):
            await inspector.runs(offset=10**20)
        with pytest.raises(lg.InvalidArgument, match="tail"):
            await anext(inspector.follow_runs(tail=10**20))
        assert await inspector.runs(limit=1_000_000) == []  # the largest count is a count
