"""Activity over time: how many starts the gate admitted per bucket of a period, per workflow and key."""

from __future__ import annotations

from collections import defaultdict

from ..errors import InvalidArgument
from ..store import activity
from ..store.base import Tx

__all__ = ["MAX_BUCKETS", "admissions"]

MAX_BUCKETS = 1000


async def admissions(
    tx: Tx, since: float, width: float, buckets: int, workflow: str | None = None
) -> dict[tuple[str, str], list[int]]:
    """Admissions per (workflow, key) in ``buckets`` buckets of ``width`` seconds from ``since``.

    A store operation (``store.read(admissions, ...)``); a (workflow, key) with no admission in
    the period is absent."""
    if width <= 0 or not 1 <= buckets <= MAX_BUCKETS:
        raise InvalidArgument(f"width must be > 0 and buckets from 1 to {MAX_BUCKETS}")
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * buckets)
    for row in await activity.admissions_per_bucket(tx, since, width, workflow):
        bucket = int(row["bucket"])
        if 0 <= bucket < buckets:
            counts[(row["workflow"], row["key"])][bucket] += int(row["n"])
        elif bucket == buckets:  # the period's very last instant
            counts[(row["workflow"], row["key"])][buckets - 1] += int(row["n"])
    return dict(counts)
