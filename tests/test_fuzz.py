"""Fuzzed input: every bad value ends in a typed error that names it, never a traceback, never a partial write.

Hypothesis draws durations, cron expressions and time zones, control declarations,
payloads and command lines. A refusal is a ``LockgateError`` (or, for the helpers that
document it, a ``ValueError`` naming the field); a start that is refused leaves the row
counts of the store as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli import run as cli_run
from lockgate.durations import parse_duration, to_seconds

from .conftest import LONG

FUZZ = settings(
    max_examples=500 if LONG else 40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# -- durations ------------------------------------------------------------------------------------

UNITS = ["ms", "s", "m", "h", "d", "w", "minutes", "hours", "days", "sec", "x", ""]
duration_text = st.one_of(
    st.text(max_size=20),
    st.builds(
        lambda parts: " ".join(f"{n}{u}" for n, u in parts),
        st.lists(st.tuples(st.integers(0, 10**30), st.sampled_from(UNITS)), min_size=1, max_size=3),
    ),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-5s", "1_000", "0x10", "5 s 3", "1.5.5s"]),
)
durations = st.one_of(
    duration_text,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.timedeltas(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@FUZZ
@given(value=durations)
def test_a_duration_is_read_or_refused_by_name(value: Any) -> None:
    for parse in (to_seconds, parse_duration):
        try:
            parsed = parse(value, what="debounce.period")
        except ValueError as exc:
            assert "debounce.period" in str(exc)
            continue
        seconds = parsed.total_seconds() if isinstance(parsed, timedelta) else parsed
        assert seconds >= 0


# -- declarations ---------------------------------------------------------------------------------


class Item(BaseModel):
    key: str = "k"


class Items(BaseModel):
    items: list[Item] = []


def _declare(options: dict[str, Any], *, batch: bool = False) -> lg.App:
    app = lg.App()

    if batch:

        @app.workflow(name="fuzzed", **options)
        async def batched(ctx: lg.Context, p: Items) -> None:
            return None

    else:

        @app.workflow(name="fuzzed", **options)
        async def body(ctx: lg.Context, p: Item) -> None:
            return None

    return app


def _boots_or_refuses(app: lg.App) -> None:
    try:
        app.definitions()
    except lg.DefinitionError as exc:
        assert exc.fields, exc
        assert str(exc)


limits = st.one_of(st.integers(-5, 10**12), st.floats(allow_nan=True), st.none(), st.text(max_size=3), st.booleans())
keys = st.sampled_from([None, lambda p: p.key, "not callable", 42])
controls = st.one_of(
    st.builds(lambda p, t, k: {"debounce": lg.Debounce(period=p, timeout=t, key=k)}, durations, durations, keys),
    st.builds(lambda n, k, t: {"concurrency": lg.Concurrency(limit=n, key=k, total=t)}, limits, keys, limits),
    st.builds(lambda n, p: {"throttle": lg.Throttle(limit=n, period=p)}, limits, durations),
    st.builds(lambda n, p: {"rate_limit": [lg.RateLimit(limit=n, period=p)]}, limits, durations),
    st.builds(lambda s, f: {"timeouts": lg.Timeouts(start=s, finish=f)}, durations, durations),
    st.builds(lambda m: {"singleton": lg.Singleton(mode=m, key=lambda p: p.key)}, st.sampled_from(["skip", None, "x"])),
    st.builds(lambda v: {"priority": v}, st.sampled_from([None, 3, "high", lambda p: 1])),
)


@FUZZ
@given(options=controls)
def test_a_control_declaration_boots_or_is_refused_by_name(options: dict[str, Any]) -> None:
    _boots_or_refuses(_declare(options))


@FUZZ
@given(size=limits, timeout=durations)
def test_a_batch_declaration_boots_or_is_refused_by_name(size: Any, timeout: Any) -> None:
    _boots_or_refuses(_declare({"batch": lg.Batch(item=Item, max_size=size, timeout=timeout)}, batch=True))


cron_field = st.one_of(
    st.sampled_from(["*", "*/5", "0", "59", "60", "1-5", "5-1", "MON", "JAN", "?", "L", "1,2", "*/0", "-1", ""]),
    st.text(max_size=4),
)
crons = st.one_of(st.lists(cron_field, min_size=0, max_size=7).map(" ".join), st.text(max_size=30))
zones = st.one_of(
    st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Nowhere/City", "", "../etc"]), st.text(max_size=12)
)


@FUZZ
@given(cron=crons, zone=zones, every=st.one_of(st.none(), durations))
def test_a_schedule_declaration_boots_or_is_refused_by_name(cron: str, zone: str, every: Any) -> None:
    app = _declare({})
    options: dict[str, Any] = {"cron": cron, "timezone": zone, "payload": {}}
    if every is not None:
        options = {"every": every, "timezone": zone, "payload": {}}
    try:
        app.schedule("fuzzed-schedule", workflow="fuzzed", **options)
    except lg.DefinitionError:
        return
    try:
        app.definitions()
    except lg.DefinitionError as exc:
        assert "fuzzed-schedule" in str(exc), exc


# -- payloads -------------------------------------------------------------------------------------


class Order(BaseModel):
    id: str
    qty: int
    tags: list[str] = []
    note: str | None = None


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
payloads = st.one_of(
    json_values,
    st.fixed_dictionaries({"id": json_values, "qty": json_values}, optional={"tags": json_values, "note": json_values}),
)

payload_app = lg.App()


@payload_app.workflow(name="fuzz.order", debounce=lg.Debounce(key=lambda p: p.id, period="1h"))
async def order(ctx: lg.Context, p: Order) -> str:
    return p.id


@payload_app.workflow(name="fuzz.plain")
async def plain(ctx: lg.Context, p: Order) -> str:
    return p.id


TABLES = ("lockgate_runs", "lockgate_ledger", "lockgate_pending", "lockgate_run_events", "lockgate_journal")


@pytest.fixture(scope="module")
def started_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[asyncio.Runner, lg.Client, Path]]:
    db = tmp_path_factory.mktemp("fuzz") / "lockgate.db"
    with asyncio.Runner() as runner:
        client = lg.Client(payload_app, f"sqlite:///{db}")
        runner.run(client.open())
        try:
            yield runner, client, db
        finally:
            runner.run(client.close())


def _counts(db: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}


@FUZZ
@given(workflow=st.sampled_from(["fuzz.order", "fuzz.plain"]), payload=payloads, key=st.one_of(st.none(), st.text()))
def test_a_payload_is_started_or_refused_with_nothing_written(
    started_client: tuple[asyncio.Runner, lg.Client, Path], workflow: str, payload: Any, key: str | None
) -> None:
    runner, client, db = started_client
    before = _counts(db)
    try:
        handle = runner.run(client.start(workflow, payload, idempotency_key=key))
    except (lg.PayloadError, lg.InvalidArgument) as exc:
        assert str(exc)
        assert _counts(db) == before, "a refused start wrote rows"
        return
    assert handle.status in ("started", "existing", "queued")
    assert _counts(db) != before or handle.status == "existing"


# -- command lines --------------------------------------------------------------------------------

VERBS = [
    ["workflows", "list"],
    ["workflows", "show"],
    ["workflows", "start"],
    ["workflows", "cancel"],
    ["workflows", "signal"],
    ["workflows", "flow"],
    ["workflows", "why"],
    ["workflows", "cancel-many"],
    ["cluster", "status"],
    ["schedules", "list"],
    ["events", "list"],
]
OPTIONS = ["--limit", "--offset", "--status", "--workflow", "--format", "--payload", "--timeout", "--reason", "--app"]
words = st.one_of(
    st.sampled_from(["-1", "0", "1e9", "99999999999999999999", "{", "[]", "null", "json", "text", "@/nonexistent", ""]),
    st.text(max_size=8),
)


@FUZZ
@given(verb=st.sampled_from(VERBS), extra=st.lists(st.one_of(st.sampled_from(OPTIONS), words), max_size=5))
def test_a_command_line_ends_in_an_exit_code_never_a_traceback(
    verb: list[str], extra: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    store = f"sqlite:///{tmp_path_factory.getbasetemp()}/fuzz-cli.db"
    argv = [*verb, "--store", store, *extra]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = cli_run(argv)
        except SystemExit as exc:  # --help and the like
            code = exc.code if isinstance(exc.code, int) else 0
    assert isinstance(code, int)
