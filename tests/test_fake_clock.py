"""The controllable clock starts where a test says: seconds since the epoch or an aware datetime."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import FakeClock, TestEnv


def test_a_clock_starts_at_an_aware_datetime_or_at_seconds() -> None:
    at = datetime(2027, 1, 1, tzinfo=UTC)
    assert FakeClock(at).now() == at.timestamp() == FakeClock(at.timestamp()).now()
    with pytest.raises(lg.InvalidArgument, match="timezone-aware"):
        FakeClock(datetime(2027, 1, 1))


class Nothing(BaseModel):
    pass


async def test_a_test_env_started_at_a_date_runs_there() -> None:
    app = lg.App()

    @app.workflow(name="today")
    async def today(ctx: lg.Context, p: Nothing) -> str:
        return (await ctx.now()).date().isoformat()

    async with TestEnv(app, start=datetime(2027, 2, 3, 12, tzinfo=UTC)) as env:
        assert await env.engine.run("today", {}, timeout=10) == "2027-02-03"
