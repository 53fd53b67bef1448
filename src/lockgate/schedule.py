"""Schedules: when a workflow starts by the clock, and what every replica agrees a slot is.

``Schedule`` is what a user declares (on ``@app.workflow(schedule=...)`` or with
``app.schedule(name, ...)``); ``ScheduleDef`` is the validated form the sweep reads. Slot
arithmetic is pure: every replica derives the same ``scheduled_at`` instants from the
expression, never from its own clock, so a unique claim per slot can make one of them fire it.

Cron slots are computed on the zone's wall clock, then placed on the time line: a wall
time a spring-forward skips fires once, at the instant the gap ends; a wall time an autumn
fall-back repeats fires once, at its first occurrence. ``every=`` slots are plain elapsed
time, multiples of the interval since the Unix epoch, untouched by DST.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter  # type: ignore[import-untyped]
from pydantic import BaseModel

from .durations import Duration, format_seconds, to_seconds
from .errors import DefinitionError, LockgateError, UnknownSchedule
from .names import name_problem
from .serde import validate_payload

__all__ = [
    "DEFAULT_MAX_RUNTIME",
    "Overlap",
    "Schedule",
    "ScheduleDef",
    "ScheduleDefinitionError",
    "build_schedule",
    "build_schedules",
    "slot_key",
    "unknown_schedule",
]

Overlap = Literal["skip", "buffer", "cancel_other"]
PayloadSpec = Callable[[datetime], Any] | BaseModel | dict[str, Any] | None

DEFAULT_MAX_RUNTIME = 24 * 3600.0
"""Seconds a firing's run may stay live before the firing is failed and its run cancelled."""


@dataclass(frozen=True)
class Schedule:
    """Start a workflow by the clock: ``cron`` (in ``timezone``) or ``every`` (an interval).

    ``payload`` is the run's payload, or a function of the slot's ``scheduled_at`` (an aware
    datetime in ``timezone``); none given is ``{}``, for a payload model whose fields all have
    defaults. ``on_overlap`` says what a firing does while the previous
    firing's run is live: ``"skip"`` it, ``"buffer"`` it behind that run (at most
    ``buffer_limit`` waiting), or ``"cancel_other"`` (cancel that run, then start).
    ``backfill`` governs slots missed while nothing ran: ``None`` fires the most recent one,
    ``"all"`` fires each, a duration fires those within it. ``max_runtime`` bounds how long a
    firing's run may stay live; ``jitter`` delays each firing by a stable offset below it.
    ``name`` names the schedule of a workflow's own declaration (default: the workflow's name).
    """

    cron: str | None = None
    every: Duration | None = None
    timezone: str = "UTC"
    payload: PayloadSpec = None
    on_overlap: Overlap = "skip"
    buffer_limit: int | None = 1
    backfill: Literal["all"] | Duration | None = None
    max_runtime: Duration | None = None
    jitter: Duration | None = None
    name: str | None = None


class ScheduleDefinitionError(DefinitionError):
    """A schedule declaration is invalid; names the schedule, its workflow and the field."""

    def __init__(self, schedule: str, workflow: str, fields: str | list[str], problem: str) -> None:
        super().__init__(workflow, fields, problem)
        self.schedule = schedule
        LockgateError.__init__(
            self, f"schedule {schedule!r} (workflow {workflow!r}): {' + '.join(self.fields)}: {problem}"
        )


@dataclass(frozen=True)
class ScheduleDef:
    """A validated schedule: what the sweep, the CLI and the engine read."""

    name: str
    workflow: str
    cron: str | None
    every: float | None
    zone: ZoneInfo
    payload: PayloadSpec
    on_overlap: Overlap
    buffer_limit: int
    backfill: Literal["all"] | float | None  # "all", a window in seconds, or None (catch up once)
    max_runtime: float
    jitter: float
    start_at: float | None = None
    """No slot before this instant (a runtime schedule's ``start_at``)."""
    end_at: float | None = None
    """No slot after this instant: past it the schedule has ended."""
    _last: list[float] = field(default_factory=list, init=False, compare=False, repr=False)
    # The last ``next_after`` asked and answered: creating a schedule asks it three times of one instant.

    @property
    def spec(self) -> str:
        """The expression as shown to an operator: ``cron 0 3 * * *`` or ``every 15m``."""
        return f"cron {self.cron}" if self.cron is not None else f"every {format_seconds(self.every or 0)}"

    @property
    def timezone(self) -> str:
        return self.zone.key

    # -- slots ----------------------------------------------------------------------------

    def next_after(self, instant: float) -> float:
        """The first slot strictly after ``instant`` (epoch seconds); ``inf`` once the schedule has ended."""
        last = self._last
        if last and last[0] == instant:
            return last[1]
        slot = next(self._from(instant), math.inf)
        last[:] = (instant, slot)
        return slot

    def next_slots(self, instant: float, count: int) -> list[float]:
        """The ``count`` slots strictly after ``instant``, in order (fewer once the schedule ends)."""
        return list(itertools.islice(self._from(instant), count))

    def next_due(self, watermark: float) -> float | None:
        """When the first slot after ``watermark`` fires (its jitter added); ``None`` once ended."""
        slot = self.next_after(watermark)
        return None if math.isinf(slot) else slot + self.jitter_for(slot)

    def slots_between(self, start: float, end: float, limit: int | None = None) -> list[float]:
        """Slots ``s`` with ``start < s <= end``, oldest first (at most ``limit``)."""
        out: list[float] = []
        for slot in self._from(start):
            if slot > end or (limit is not None and len(out) >= limit):
                break
            out.append(slot)
        return out

    def latest_at_or_before(self, instant: float, *, after: float | None = None) -> float | None:
        """The newest slot ``<= instant`` (and ``> after`` if given); ``None`` if there is none."""
        if self.every is not None:
            slot = float(int(instant // self.every) * self.every)
            return None if after is not None and slot <= after else slot
        # A wall time never maps more than a day from its instant: two days back holds the newest slot.
        probe = instant - 2 * 86400 if after is None else max(after, instant - 2 * 86400)
        while True:
            slots = self.slots_between(probe, instant)
            if slots:
                return slots[-1]
            if after is not None and probe <= after:
                return None
            probe = probe - 30 * 86400 if after is None else max(after, probe - 30 * 86400)
            if probe < instant - 5 * 366 * 86400:
                return None

    def jitter_for(self, slot: float) -> float:
        """The stable delay of ``slot``'s firing: the same on every replica."""
        if self.jitter <= 0:
            return 0.0
        digest = hashlib.sha256(f"{self.name}@{slot}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 * self.jitter

    def local(self, slot: float) -> datetime:
        """``slot`` as an aware datetime in the schedule's zone."""
        return datetime.fromtimestamp(slot, tz=UTC).astimezone(self.zone)

    def payload_for(self, slot: float) -> Any:
        """The payload of ``slot``'s run (the callback computes against the slot, not now)."""
        spec = self.payload
        if callable(spec) and not isinstance(spec, BaseModel):
            return spec(self.local(slot))
        return spec

    def _from(self, instant: float) -> Iterator[float]:
        if self.start_at is not None and instant < self.start_at:
            instant = math.nextafter(self.start_at, -math.inf)  # a slot at start_at itself is one
        slots = self._unbounded(instant)
        if self.end_at is None:
            return slots
        end = self.end_at
        return itertools.takewhile(lambda slot: slot <= end, slots)

    def _unbounded(self, instant: float) -> Iterator[float]:
        if self.every is not None:
            step = self.every
            n = int(instant // step) + 1
            while True:
                yield float(n * step)
                n += 1
        else:
            yield from _cron_slots(self.cron or "", self.zone, instant)


def slot_key(schedule: str, slot: float) -> str:
    """The idempotency key of a slot's start: ``<schedule>@<scheduled_at ISO, UTC>``."""
    return f"{schedule}@{datetime.fromtimestamp(slot, tz=UTC).isoformat()}"


def unknown_schedule(declared: Mapping[str, ScheduleDef], name: str) -> UnknownSchedule:
    """The error for a schedule ``name`` that ``declared`` (nor, where it was asked, the store) knows."""
    known = ", ".join(sorted(declared)[:20]) or "(none)"
    return UnknownSchedule(name, f" (declared here: {known})")


@functools.lru_cache(maxsize=4096)
def _valid_cron(expr: str) -> bool:
    """Whether croniter reads ``expr`` (kept: many schedules share few expressions)."""
    return bool(croniter.is_valid(expr))


@functools.lru_cache(maxsize=4096)
def _parsed_cron(expr: str) -> Any:
    """``expr`` parsed once: parsing is most of what computing a slot costs, and a thousand tenants'
    schedules share a few expressions. Copies share the parse (croniter reads it, never changes it)."""
    return croniter(expr, 0.0)


def _cron_slots(expr: str, zone: ZoneInfo, instant: float) -> Iterator[float]:
    """Cron slots strictly after ``instant``, each once, in order (see the module docstring for DST)."""
    start = datetime.fromtimestamp(instant, tz=UTC).astimezone(zone)
    wall = start.replace(tzinfo=None, microsecond=0)
    it = copy.copy(_parsed_cron(expr))  # its parse shared, its position its own
    it.set_current(wall, force=True)
    last: float | None = None
    while True:
        candidate: datetime = it.get_next(datetime)
        slot = _place(candidate, zone)
        # A repeated hour's second pass maps back to its first: those slots lie behind ``instant``.
        if slot <= instant or slot == last:
            continue
        last = slot
        yield slot


def _place(wall: datetime, zone: ZoneInfo) -> float:
    """The instant of the wall time ``wall`` in ``zone``: its first occurrence, or the end of a gap."""
    first = wall.replace(tzinfo=zone, fold=0)
    epoch = first.timestamp()
    if datetime.fromtimestamp(epoch, tz=zone).replace(tzinfo=None) == wall:
        return epoch
    # Skipped by a spring-forward: the earliest instant whose wall time is past ``wall`` ends the gap.
    lo = wall.replace(tzinfo=zone, fold=1).timestamp()
    hi = epoch
    lo_i, hi_i = int(min(lo, hi)), int(max(lo, hi)) + 1
    while lo_i < hi_i:
        mid = (lo_i + hi_i) // 2
        if datetime.fromtimestamp(mid, tz=zone).replace(tzinfo=None) >= wall:
            hi_i = mid
        else:
            lo_i = mid + 1
    return float(lo_i)


# -- validation --------------------------------------------------------------------------------


def build_schedules(
    on_workflows: Sequence[tuple[str, Any]],
    standalone: Sequence[tuple[str, Any, Schedule]],
    models: Mapping[str, type[BaseModel]],
    now: float,
) -> dict[str, ScheduleDef]:
    """Every schedule, validated: those declared on workflows (``(workflow, Schedule)``) and the
    standalone ones (``(name, workflow name or decorated function, Schedule)``).

    ``models`` maps each workflow to its payload model. Raises ``ScheduleDefinitionError``
    for the first problem.
    """
    built: dict[str, ScheduleDef] = {}
    entries: list[tuple[str, Any, Any]] = [
        (getattr(given, "name", None) or workflow, workflow, given) for workflow, given in on_workflows
    ]
    entries += list(standalone)
    for name, ref, given in entries:
        workflow = ref if isinstance(ref, str) else getattr(ref, "__lockgate_workflow__", None)
        shown = workflow or getattr(ref, "__qualname__", repr(ref))
        if not isinstance(workflow, str) or workflow not in models:
            raise ScheduleDefinitionError(
                str(name), str(shown), "workflow", f"no workflow {shown!r} is registered (known: {sorted(models)})"
            )
        problem = name_problem(name)
        if problem is not None:
            raise ScheduleDefinitionError(str(name), workflow, "name", problem)
        if name in built:
            raise ScheduleDefinitionError(str(name), workflow, "name", "two schedules have this name")
        built[name] = build_schedule(name, workflow, given, models[workflow], now)
    return built


def build_schedule(
    name: str, workflow: str, given: Schedule, payload_model: type[BaseModel], now: float
) -> ScheduleDef:
    """``given`` validated: ``ScheduleDefinitionError`` names the schedule and the field.

    The payload of the first slot after ``now`` must be a valid ``payload_model``.
    """

    def fail(fields: str | list[str], problem: str) -> ScheduleDefinitionError:
        return ScheduleDefinitionError(name, workflow, fields, problem)

    if not isinstance(given, Schedule):
        raise fail("schedule", f"must be a lockgate.Schedule, got {type(given).__name__}")
    if not name or not isinstance(name, str):
        raise fail("name", "must be a non-empty string")
    if (given.cron is None) == (given.every is None):
        raise fail(["cron", "every"], "give exactly one of cron= and every=")
    cron: str | None = None
    every: float | None = None
    if given.cron is not None:
        if not isinstance(given.cron, str) or not _valid_cron(given.cron):
            raise fail("cron", f"not a valid cron expression: {given.cron!r}")
        cron = " ".join(given.cron.split())
    else:
        try:
            every = to_seconds(given.every, what="every")  # type: ignore[arg-type]
        except ValueError as exc:
            raise fail("every", str(exc).removeprefix("every: ")) from None
        if every < 1 or every != int(every):
            raise fail("every", f"must be a whole number of seconds, at least 1s, got {given.every!r}")
    try:
        zone = ZoneInfo(given.timezone) if isinstance(given.timezone, str) and given.timezone else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        raise fail("timezone", f"unknown time zone {given.timezone!r} (use an IANA name such as 'Europe/Berlin')")
    if given.on_overlap not in ("skip", "buffer", "cancel_other"):
        raise fail("on_overlap", f"must be 'skip', 'buffer' or 'cancel_other', got {given.on_overlap!r}")
    limit = given.buffer_limit
    if given.on_overlap == "buffer" and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise fail(["on_overlap", "buffer_limit"], f"buffer needs a bound: buffer_limit >= 1, got {limit!r}")
    backfill: Literal["all"] | float | None = None
    if given.backfill == "all":
        backfill = "all"
    elif given.backfill is not None:
        try:
            backfill = to_seconds(given.backfill, what="backfill")
        except ValueError as exc:
            problem = str(exc).removeprefix("backfill: ")
            raise fail("backfill", f"None, 'all' or a window such as '6h': {problem}") from None
    durations: dict[str, float] = {}
    for option in ("max_runtime", "jitter"):
        value = getattr(given, option)
        try:
            durations[option] = 0.0 if value is None else to_seconds(value, what=option)
        except ValueError as exc:
            raise fail(option, str(exc).removeprefix(f"{option}: ")) from None
    max_runtime = durations["max_runtime"] or DEFAULT_MAX_RUNTIME
    spec = {} if given.payload is None else given.payload  # none given: the model's defaults
    if callable(spec) and not isinstance(spec, BaseModel):
        try:
            inspect.signature(spec).bind(datetime.now(UTC))
        except TypeError:
            raise fail("payload", "a payload callback takes one argument: the slot's scheduled_at") from None
        except ValueError:
            pass  # a builtin without a signature: called as is
        if inspect.iscoroutinefunction(spec):
            raise fail("payload", "a payload callback must be a plain function, not async")
    defn = ScheduleDef(
        name=name,
        workflow=workflow,
        cron=cron,
        every=every,
        zone=zone,
        payload=spec,
        on_overlap=given.on_overlap,
        buffer_limit=int(limit) if isinstance(limit, int) else 1,
        backfill=backfill,
        max_runtime=max_runtime,
        jitter=durations["jitter"],
    )
    try:  # a valid expression may still never come due (Feb 30), or come due past the calendar's end
        first = defn.next_after(now)
        defn.local(first)
    except (CroniterBadDateError, OverflowError, OSError, ValueError):
        field = "cron" if cron is not None else "every"
        raise fail(field, f"never comes due: {given.cron if cron is not None else given.every!r}") from None
    try:
        validate_payload(payload_model, defn.payload_for(first), what=f"payload of schedule {name!r}")
    except Exception as exc:
        slot = defn.local(first).isoformat()
        raise fail("payload", f"no valid payload for the first upcoming slot {slot}: {exc}") from None
    return defn
