"""Time-partitioned run history on PostgreSQL (docs/history.md): the partition intervals and their bounds.

A run's journal, step attempts and events sit in the partition of the interval its id was made in (an id
begins with its creation time, ids.py). Intervals begin on UTC boundaries: the hour, midnight, and for
weeks Monday's midnight. SQLite keeps its tables unpartitioned and ignores this.
"""

from __future__ import annotations

import time

from .durations import format_seconds
from .errors import InvalidHistoryOption

__all__ = ["DAY", "INTERVALS", "interval_start", "partition_interval", "partition_suffix"]

DAY = 86400.0
INTERVALS = {"hour": 3600.0, "day": DAY, "week": 7 * DAY}
"""The intervals a partition may span, by name."""

_MONDAY = 4 * DAY  # 1970-01-05, the first Monday after the epoch: weeks begin on Mondays


def partition_interval(name: str | None, retention: float | None) -> float:
    """The seconds one history partition spans: ``name`` (``hour``, ``day``, ``week``), or by default a day
    (an hour under a retention shorter than a day). ``InvalidHistoryOption`` naming the field for an
    unknown interval, or a retention shorter than the interval it names."""
    if name is None:
        return DAY if retention is None or retention >= DAY else INTERVALS["hour"]
    if name not in INTERVALS:
        known = ", ".join(INTERVALS)
        raise InvalidHistoryOption("history_partition", f"unknown partition interval {name!r}; one of {known}")
    seconds = INTERVALS[name]
    if retention is not None and retention < seconds:
        raise InvalidHistoryOption(
            "retention",
            f"{format_seconds(retention)} is shorter than the history partition interval ({name}): "
            "a partition would hold rows already past retention; lengthen it or partition by a shorter interval",
        )
    return seconds


def interval_start(at: float, interval: float) -> float:
    """The start of the interval holding ``at`` (epoch seconds)."""
    offset = _MONDAY if interval >= 7 * DAY else 0.0
    return (at - offset) // interval * interval + offset


def partition_suffix(start: float) -> str:
    """The name a partition that begins at ``start`` takes after its table's: ``p`` and the UTC minute."""
    return "p" + time.strftime("%Y%m%d%H%M", time.gmtime(start))
