"""Durations: every accepted spelling, and refusals that name the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.durations import format_seconds, parse_duration, to_seconds


class Empty(BaseModel):
    pass


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("15m", 900.0),
        ("1h30m", 5400.0),
        ("7d", 604800.0),
        ("15 minutes", 900.0),
        ("2 hours 5 minutes", 7500.0),
        ("1.5s", 1.5),
        ("1w", 604800.0),
        ("  10s ", 10.0),
        ("30", 30.0),
        ("0", 0.0),
        (timedelta(minutes=2, milliseconds=250), 120.25),
        (2.5, 2.5),
        (3, 3.0),
        (0, 0.0),
    ],
)
def test_accepted_spellings(value: Any, seconds: float) -> None:
    assert to_seconds(value) == pytest.approx(seconds)
    assert parse_duration(value) == timedelta(seconds=seconds)


def test_units_are_case_insensitive() -> None:
    assert to_seconds("1H30M") == 5400.0


@pytest.mark.parametrize(
    "value",
    [-1, -0.5, "-5m", timedelta(seconds=-1), float("nan"), float("inf"), "inf", "nan"],
)
def test_negative_and_non_finite_values_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^timeout: "):
        to_seconds(value, what="timeout")


@pytest.mark.parametrize(
    "value",
    ["", "   ", "soon", "5 parsecs", "15mm", "m15", "1h 30", "1..5s", True, None, [1], object()],
)
def test_garbage_is_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^cool-off: "):
        to_seconds(value, what="cool-off")


def test_unreadable_text_message_suggests_the_syntax() -> None:
    with pytest.raises(ValueError, match="try '500ms'"):
        to_seconds("a fortnight", what="period")


def test_retry_fields_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match=r"Retry\.base_delay"):
        lg.Retry(base_delay="-1s")
    with pytest.raises(ValueError, match=r"Retry\.max_delay"):
        lg.Retry(max_delay="whenever")
    with pytest.raises(ValueError, match=r"Retry\.max_elapsed"):
        lg.Retry(max_elapsed=-3)


def test_engine_options_are_checked_by_name() -> None:
    app = lg.App()
    with pytest.raises(ValueError, match=r"^lease: "):
        lg.Engine(app, "sqlite:///unused.db", lease="forever")
    with pytest.raises(ValueError, match=r"^inline_sleep: "):
        lg.Engine(app, "sqlite:///unused.db", inline_sleep="-1s")
    with pytest.raises(ValueError, match=r"^poll_interval: "):
        lg.Engine(app, "sqlite:///unused.db", poll_interval="1 fortnight")


def test_workflow_duration_option_is_a_definition_error() -> None:
    app = lg.App()

    @app.workflow(name="stalls", stall_after="a while")
    async def stalls(ctx: lg.Context, p: Empty) -> None:
        return None

    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    assert info.value.workflow == "stalls"
    assert info.value.fields == ["stall_after"]
    assert "stall_after" in str(info.value)


async def test_body_duration_is_refused_naming_the_call(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(name="naps")
    async def naps(ctx: lg.Context, p: Empty) -> None:
        await ctx.sleep("nap", "a little")

    async with env_factory(app) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("naps", {}, timeout=10)
    assert info.value.error_tag == "InvalidArgument"
    assert "ctx.sleep('nap')" in (info.value.error_message or "")


@pytest.mark.parametrize("seconds", [0.5, 1, 15, 90, 5400, 86400, 30 * 86400, 90061.5])
def test_format_seconds_reads_back(seconds: float) -> None:
    assert to_seconds(format_seconds(seconds)) == seconds


@pytest.mark.parametrize("value", ["99999999999d", 10**20, "1000000000w", timedelta.max.total_seconds() * 2])
def test_a_duration_past_the_calendar_is_refused_by_name(value: Any) -> None:
    with pytest.raises(ValueError, match=r"debounce\.period: must be at most"):
        parse_duration(value, what="debounce.period")


@pytest.mark.parametrize(
    "value", [101 * 365 * 86400, 10**400, -(10**400), "99999999999999999999999d", timedelta.max, 1e300]
)
def test_durations_beyond_a_century_are_refused_naming_the_value(value: Any) -> None:
    with pytest.raises(lg.InvalidArgument, match=r"^lease: must be") as info:
        to_seconds(value, what="lease")
    assert len(str(info.value)) < 120  # a huge number is cut short, not printed whole


async def test_an_absurd_sleep_fails_its_run_and_leaves_the_store_readable(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(name="forever")
    async def forever(ctx: lg.Context, p: Empty) -> None:
        await ctx.sleep("nap", 10**15)

    async with env_factory(app) as env:
        with pytest.raises(lg.RunFailed) as info:
            await env.engine.run("forever", {}, timeout=10)
        assert "100 years" in (info.value.error_message or "")
        assert [r.status for r in await env.engine.list_runs()] == ["failed"]


def test_a_control_count_beyond_a_database_integer_is_a_definition_error() -> None:
    app = lg.App()

    @app.workflow(name="wide", concurrency=lg.Concurrency(limit=10**30))
    async def wide(ctx: lg.Context, p: Empty) -> None:
        return None

    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    assert info.value.fields == ["concurrency.limit"]
    assert "from 1 to 1000000000" in str(info.value)
