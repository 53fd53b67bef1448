"""Durations: ``timedelta``, seconds, or strings such as ``"500ms"``, ``"1h30m"``, ``"15 minutes"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .errors import InvalidArgument

__all__ = ["MAX_SECONDS", "Duration", "format_seconds", "parse_duration", "to_seconds"]

Duration = timedelta | float | int | str

MAX_SECONDS = 100 * 365 * 86400.0
"""The longest duration anything accepts (100 years): a longer one is a mistake, not a plan,
and the times it would lead to do not fit a date."""

_UNITS = {
    "ms": 0.001,
    "msec": 0.001,
    "millis": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration(value: Duration, *, what: str = "duration") -> timedelta:
    """Parse ``value`` into a non-negative ``timedelta``; ``InvalidArgument`` (a ``ValueError``) names ``what``."""
    return timedelta(seconds=to_seconds(value, what=what))


def to_seconds(value: Duration, *, what: str = "duration") -> float:
    """Parse ``value`` into seconds from 0 to ``MAX_SECONDS``; ``InvalidArgument`` (a ``ValueError``) names ``what``."""
    if isinstance(value, bool):
        raise InvalidArgument(f"{what}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf if value > 0 else -math.inf
    elif isinstance(value, str):
        seconds = _parse_text(value, what)
    else:
        raise InvalidArgument(f"{what}: expected timedelta, seconds or a string like '15m', got {type(value).__name__}")
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgument(f"{what}: must be a duration of 0 or more, got {_shown(value)}")
    if seconds > MAX_SECONDS:
        raise InvalidArgument(f"{what}: must be at most 100 years, got {_shown(value)}")
    return seconds


def _shown(value: object) -> str:
    """``value`` for an error message, cut short: the text of a huge number is no help."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _parse_text(text: str, what: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise InvalidArgument(f"{what}: empty duration")
    try:
        return float(stripped)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    while pos < len(stripped):
        match = _PART.match(stripped, pos)
        if not match or match.group(2).lower() not in _UNITS:
            raise InvalidArgument(f"{what}: cannot read {_shown(text)} (try '500ms', '15m', '1h30m', '7d')")
        total += float(match.group(1)) * _UNITS[match.group(2).lower()]
        pos = match.end()
    return total


def format_seconds(seconds: float) -> str:
    """``seconds`` as text ``to_seconds`` reads back: ``30d``, ``1h30m``, ``15s``, ``500ms``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts: list[str] = []
    rest = seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        whole = int(rest // size)
        if whole:
            parts.append(f"{whole}{unit}")
            rest -= whole * size
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)
