"""Durations: ``timedelta``, seconds, or strings such as ``"500ms"``, ``"1h30m"``, ``"15 minutes"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["Duration", "format_seconds", "parse_duration", "to_seconds"]

Duration = timedelta | float | int | str

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
_LONGEST = 1000 * 365 * 86400.0  # a thousand years: anything longer is a typo, and overflows dates
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration(value: Duration, *, what: str = "duration") -> timedelta:
    """Parse ``value`` into a non-negative ``timedelta``; ``ValueError`` names ``what``."""
    return timedelta(seconds=to_seconds(value, what=what))


def to_seconds(value: Duration, *, what: str = "duration") -> float:
    """Parse ``value`` into non-negative seconds; ``ValueError`` names ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value, what)
    else:
        raise ValueError(f"{what}: expected timedelta, seconds or a string like '15m', got {type(value).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"{what}: must be finite, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{what}: must not be negative, got {value!r}")
    if seconds > _LONGEST:
        raise ValueError(f"{what}: must be at most {_LONGEST / 86400 / 365:g} years, got {value!r}")
    return seconds


def _parse_text(text: str, what: str) -> float:
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{what}: empty duration")
    try:
        return float(stripped)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    while pos < len(stripped):
        match = _PART.match(stripped, pos)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"{what}: cannot read {text!r} (try '500ms', '15m', '1h30m', '7d')")
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
