"""Schedule declarations and slot arithmetic: pure, no store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.controls import WorkflowOptions
from lockgate.schedule import Schedule, ScheduleDef, build_schedule, slot_key
from lockgate.sweeps.schedules import GRACE, due_slots


class Day(BaseModel):
    day: str


def make(given: Schedule, name: str = "s") -> ScheduleDef:
    return build_schedule(name, "wf", given, Day, datetime(2026, 1, 1, tzinfo=UTC).timestamp())


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[arg-type,misc]


def walls(sched: ScheduleDef, slots: list[float]) -> list[str]:
    return [sched.local(s).strftime("%Y-%m-%d %H:%M %Z") for s in slots]


DAY = {"payload": {"day": "x"}}


def test_spring_forward_fires_a_skipped_wall_time_once_at_the_end_of_the_gap() -> None:
    sched = make(Schedule(cron="30 2 * * *", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    slots = sched.slots_between(utc(2026, 3, 27), utc(2026, 3, 31))
    assert walls(sched, slots) == [
        "2026-03-27 02:30 CET",
        "2026-03-28 02:30 CET",
        "2026-03-29 03:00 CEST",  # 02:30 does not exist that night: the first instant after the gap
        "2026-03-30 02:30 CEST",
    ]


def test_spring_forward_folds_every_slot_of_the_gap_into_one() -> None:
    sched = make(Schedule(cron="*/20 * * * *", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    slots = sched.slots_between(utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30))
    assert walls(sched, slots) == [
        "2026-03-29 01:40 CET",
        "2026-03-29 03:00 CEST",  # 02:00, 02:20, 02:40 and 03:00 are one instant
        "2026-03-29 03:20 CEST",
    ]


def test_autumn_fires_a_repeated_wall_time_once() -> None:
    sched = make(Schedule(cron="30 2 * * *", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    slots = sched.slots_between(utc(2026, 10, 24), utc(2026, 10, 27))
    assert walls(sched, slots) == ["2026-10-24 02:30 CEST", "2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]
    hourly = make(Schedule(cron="0,30 * * * *", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    slots = hourly.slots_between(utc(2026, 10, 24, 23, 0), utc(2026, 10, 25, 2, 0))
    assert walls(hourly, slots) == [
        "2026-10-25 01:30 CEST",
        "2026-10-25 02:00 CEST",
        "2026-10-25 02:30 CEST",  # the second 02:00 and 02:30 (CET) do not fire again
        "2026-10-25 03:00 CET",
    ]
    # Asked from inside the repeated hour's second pass, the next slot is after it.
    assert walls(hourly, [hourly.next_after(utc(2026, 10, 25, 1, 10))]) == ["2026-10-25 03:00 CET"]


def test_every_is_elapsed_time_from_the_epoch() -> None:
    sched = make(Schedule(every="15m", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    slots = sched.slots_between(utc(2026, 3, 29, 0, 50), utc(2026, 3, 29, 1, 20))
    assert [datetime.fromtimestamp(s, UTC).strftime("%H:%M") for s in slots] == ["01:00", "01:15"]
    assert sched.latest_at_or_before(utc(2026, 3, 29, 1, 14)) == utc(2026, 3, 29, 1, 0)
    assert sched.spec == "every 15m"


def test_payload_is_computed_from_the_slot_in_the_zone() -> None:
    sched = make(Schedule(cron="0 0 * * *", timezone="Asia/Tokyo", payload=lambda at: {"day": at.date().isoformat()}))
    slot = sched.next_after(utc(2026, 5, 1, 12))
    assert sched.payload_for(slot) == {"day": "2026-05-02"}
    assert datetime.fromtimestamp(slot, UTC) == datetime(2026, 5, 1, 15, tzinfo=UTC)
    assert slot_key("s", slot) == "s@2026-05-01T15:00:00+00:00"


def test_jitter_is_stable_and_below_the_bound() -> None:
    sched = make(Schedule(every="1h", jitter="10m", **DAY))  # type: ignore[arg-type]
    offsets = [sched.jitter_for(s) for s in sched.next_slots(utc(2026, 1, 1), 50)]
    assert all(0 <= o < 600 for o in offsets) and len(set(offsets)) > 40
    assert offsets == [sched.jitter_for(s) for s in sched.next_slots(utc(2026, 1, 1), 50)]


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"]
CRONS = ["0 3 * * *", "30 2 * * *", "*/15 * * * *", "0 * * * *", "15 1,2,3 * * 0", "0 0 1 * *", "*/7 2 * * *"]


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    cron=st.sampled_from(CRONS),
    start=st.integers(min_value=int(utc(2020, 1, 1)), max_value=int(utc(2030, 1, 1))),
    span=st.integers(min_value=1, max_value=4 * 86400),
)
def test_every_slot_in_a_range_is_produced_once_in_order_and_in_the_zone(
    zone: str, cron: str, start: int, span: int
) -> None:
    sched = make(Schedule(cron=cron, timezone=zone, **DAY))  # type: ignore[arg-type]
    end = start + span
    slots = sched.slots_between(start, end)
    assert all(start < s <= end for s in slots)
    assert slots == sorted(set(slots))  # ordered, each once
    tz = ZoneInfo(zone)
    for s in slots:
        wall = datetime.fromtimestamp(s, tz).replace(tzinfo=None)
        # A slot is a wall time the cron names, or the instant a DST gap that swallowed one ends.
        matches = croniter.match(cron, wall)
        before = datetime.fromtimestamp(s - 1, tz)
        gap_end = before.utcoffset() != datetime.fromtimestamp(s, tz).utcoffset()
        assert matches or gap_end, (zone, cron, wall)
    # Chaining next_after walks the same slots; a split range gives the same slots.
    chain, at = [], float(start)
    while True:
        at = sched.next_after(at)
        if at > end:
            break
        chain.append(at)
    assert chain == slots
    middle = start + span // 2
    assert sched.slots_between(start, middle) + sched.slots_between(middle, end) == slots
    # Every wall time the cron names in the range, if it exists in the zone, has a slot at its instant.
    it = croniter(cron, datetime.fromtimestamp(start, tz).replace(tzinfo=None))
    for _ in range(20):
        wall = it.get_next(datetime)
        placed = wall.replace(tzinfo=tz, fold=0)
        instant = placed.timestamp()
        if instant > end:
            break
        exists = datetime.fromtimestamp(instant, tz).replace(tzinfo=None) == wall
        if exists and instant > start:
            assert instant in slots or datetime.fromtimestamp(instant, tz).fold == 1


@settings(max_examples=100, deadline=None)
@given(
    every=st.integers(min_value=1, max_value=86400),
    start=st.integers(min_value=0, max_value=2**34),
    span=st.integers(min_value=0, max_value=200_000),
)
def test_every_slots_are_the_multiples_of_the_interval(every: int, start: int, span: int) -> None:
    sched = make(Schedule(every=every, **DAY))  # type: ignore[arg-type]
    slots = sched.slots_between(start, start + span, 500)
    assert all(s % every == 0 and start < s <= start + span for s in slots)
    assert slots == sorted(set(slots))
    expected = len(range(start // every + 1, (start + span) // every + 1))
    assert len(slots) == min(expected, 500)


# -- catch-up arithmetic ---------------------------------------------------------------------


def test_after_downtime_backfill_none_fires_only_the_most_recent_missed_slot() -> None:
    sched = make(Schedule(cron="0 * * * *", **DAY))  # type: ignore[arg-type]
    down_from = utc(2026, 1, 1, 0, 0)
    now = down_from + 3 * 86400 + 600
    due = due_slots(sched, down_from, now)
    assert due.fire == [(utc(2026, 1, 4, 0, 0), "catch-up")]
    assert due.missed == 71
    assert due.watermark == now - GRACE


def test_after_downtime_backfill_all_and_window() -> None:
    down_from, now = utc(2026, 1, 1), utc(2026, 1, 4, 0, 10)
    every = make(Schedule(cron="0 * * * *", backfill="all", **DAY))  # type: ignore[arg-type]
    due = every_due = due_slots(every, down_from, now)
    assert len(due.fire) == 72 and due.missed == 0
    assert [s for s, _ in every_due.fire] == sorted(s for s, _ in every_due.fire)
    window = make(Schedule(cron="0 * * * *", backfill="6h", **DAY))  # type: ignore[arg-type]
    due = due_slots(window, down_from, now)
    assert [datetime.fromtimestamp(s, UTC).hour for s, _ in due.fire] == [19, 20, 21, 22, 23, 0]
    assert due.missed == 66


def test_on_time_slots_fire_each_even_when_a_tick_is_late() -> None:
    sched = make(Schedule(every="1s", **DAY))  # type: ignore[arg-type]
    due = due_slots(sched, 1000.0, 1003.5)
    assert due.fire == [(1001.0, "cron"), (1002.0, "cron"), (1003.0, "cron")]
    assert due.watermark == 1003.0 and due.missed == 0
    assert due_slots(sched, 1003.0, 1003.9).fire == []


# -- declarations ----------------------------------------------------------------------------


def app_with(**schedule: Any) -> lg.App:
    app = lg.App()

    @app.workflow(name="nightly")
    async def nightly(ctx: lg.Context, p: Day) -> None:
        return None

    app.schedule("nightly.s", workflow="nightly", **schedule)
    return app


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"cron": "0 3 * *", "payload": {"day": "x"}}, "cron", "not a valid cron"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus", "payload": {"day": "x"}}, "timezone", "unknown time zone"),
        ({"cron": "0 3 * * *", "payload": {"date": "x"}}, "payload", "first upcoming slot"),
        ({"cron": "0 3 * * *", "payload": lambda at: {"day": 3}}, "payload", "first upcoming slot"),
        ({"cron": "0 3 * * *", "payload": lambda: {"day": "x"}}, "payload", "one argument"),
        ({"cron": "0 3 * * *", "on_overlap": "buffer", "buffer_limit": None, **DAY}, "buffer_limit", "bound"),
        ({"cron": "0 3 * * *", "on_overlap": "queue", **DAY}, "on_overlap", "skip"),
        ({"cron": "0 3 * * *", "every": "1h", **DAY}, "every", "exactly one"),
        ({**DAY}, "cron", "exactly one"),
        ({"every": "500ms", **DAY}, "every", "at least 1s"),
        ({"cron": "0 3 * * *", "backfill": "soon", **DAY}, "backfill", "window"),
        ({"cron": "0 3 * * *", "jitter": -1, **DAY}, "jitter", "0 or more"),
    ],
)
def test_bad_declarations_are_refused_at_boot_naming_the_schedule_and_field(
    options: dict[str, Any], field: str, words: str
) -> None:
    app = app_with(**options)
    with pytest.raises(lg.DefinitionError) as caught:
        app.definitions()
    assert "schedule 'nightly.s'" in str(caught.value)
    assert field in caught.value.fields
    assert words in str(caught.value)


def test_a_schedule_of_an_unknown_workflow_or_a_name_used_twice_is_refused() -> None:
    app = app_with(cron="0 3 * * *", **DAY)
    app.schedule("other", workflow="nope", every="1h")
    with pytest.raises(lg.DefinitionError, match=r"schedule 'other'.*workflow: no workflow 'nope'"):
        app.definitions()
    app = app_with(cron="0 3 * * *", **DAY)
    app.schedule("nightly.s", workflow="nightly", every="1h", **DAY)
    with pytest.raises(lg.DefinitionError, match="two schedules have this name"):
        app.definitions()


def test_a_workflow_declares_its_own_schedule_under_its_name() -> None:
    app = lg.App()

    @app.workflow(name="reports.nightly", schedule=lg.Schedule(cron="0 3 * * *", timezone="Europe/Berlin", **DAY))  # type: ignore[arg-type]
    async def nightly(ctx: lg.Context, p: Day) -> None:
        return None

    app.schedule("reports.hourly", workflow=nightly, every="1h", payload=lambda at: {"day": f"{at:%H}"})
    schedules = app.schedules()
    assert sorted(schedules) == ["reports.hourly", "reports.nightly"]
    assert schedules["reports.nightly"].spec == "cron 0 3 * * *"
    assert schedules["reports.hourly"].workflow == "reports.nightly"
    assert app.definitions()["reports.nightly"].options == WorkflowOptions()  # not a gate option
    assert timedelta(seconds=schedules["reports.nightly"].max_runtime) == timedelta(days=1)
