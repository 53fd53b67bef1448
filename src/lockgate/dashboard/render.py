"""The Jinja2 environment of the dashboard: templates shipped in the package, everything escaped.

Autoescape is on for every template, so a payload holding ``<script>`` is shown as text; the
filters below turn records into what a person reads (times, durations, pretty JSON).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic_core import to_jsonable_python

from ..durations import format_seconds

__all__ = ["environment", "pretty", "since", "when"]


def when(value: datetime | str | None) -> str:
    """A UTC time (or an ISO 8601 one) to the second (``2026-12-04 21:30:05``), or an empty string."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def since(value: datetime | None, now: datetime) -> str:
    """How long ago ``value`` was (``3m 5s``), or in how long for a time to come (``in 10s``)."""
    if value is None:
        return ""
    seconds = (now - value).total_seconds()
    return f"in {span(-seconds)}" if seconds < 0 else f"{span(seconds)} ago"


def span(seconds: float | None) -> str:
    """A duration as a person reads it: ``420ms``, ``12.5s``, ``3m 5s``."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return format_seconds(round(seconds))


def duration(start: datetime | None, end: datetime | None, now: datetime) -> str:
    """How long from ``start`` to ``end`` (still going: to ``now``)."""
    if start is None:
        return ""
    return span(((end or now) - start).total_seconds())


def pretty(value: Any) -> str:
    """JSON indented for reading; ``<encrypted>`` stays as the store shows it."""
    if value is None:
        return "null"
    return json.dumps(to_jsonable_python(value), indent=2, ensure_ascii=False, sort_keys=True)


def environment() -> Environment:
    """The dashboard's templates with autoescaping on for every file."""
    env = Environment(
        loader=PackageLoader("lockgate.dashboard", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["span"] = span
    env.filters["pretty"] = pretty
    env.filters["short"] = lambda text: "" if text is None else (text if len(text) <= 18 else text[:18] + "…")
    env.globals["since"] = since
    env.globals["duration"] = duration
    return env
