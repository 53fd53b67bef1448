"""A token bucket (GCRA): the rule of a throttle with a burst, at the gate and on step flow keys.

A key's theoretical arrival time (TAT) is ``anchor + n * T``, ``T = period / limit`` the pace.
A start passes when ``now >= TAT - burst * T``; it moves the TAT on by T from ``max(TAT, now)``.
So an idle key lets ``burst + 1`` through at once, then one per T, and no half-open span of one
period holds more than ``limit + burst`` starts: the (k+1)-th start after a first at t0 needs
``now >= t0 + (k - burst) * T``, so ``limit + burst + 1`` of them span at least a period. The
TAT is kept as an instant and a count and compared exactly (``Fraction`` of the stored floats):
a rounded TAT could otherwise let one more through at the edge of a span, or refuse the last
start of an idle key's burst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Bucket", "bucket_hit", "bucket_opens", "bucket_room"]


@dataclass(frozen=True)
class Bucket:
    """A key's state as stored: its TAT is ``anchor + n * period / limit``; ``last`` its latest start."""

    anchor: float
    n: int
    last: float


def bucket_opens(b: Bucket | None, limit: int, period: float, burst: int, now: float) -> float | None:
    """``None`` when the key lets a start through now, else the first instant it will."""
    if b is None:
        return None
    ahead = (b.n - burst) * Fraction(period)  # passes iff anchor + ahead / limit <= now
    if ahead <= (Fraction(now) - Fraction(b.anchor)) * limit:
        return None
    return _ceil(Fraction(b.anchor) + ahead / limit)


def bucket_room(b: Bucket | None, limit: int, period: float, burst: int, now: float) -> int:
    """How many starts the key lets through at ``now``, one after the other."""
    if b is None or Fraction(b.anchor) + b.n * Fraction(period) / limit <= now:
        return burst + 1  # idle: the first counts afresh from now, then the burst
    # the k-th passes iff (n + k - 1 - burst) * period <= (now - anchor) * limit
    paces = math.floor((Fraction(now) - Fraction(b.anchor)) * limit / Fraction(period))
    return max(0, burst + 1 - b.n + paces)


def bucket_hit(b: Bucket | None, limit: int, period: float, now: float) -> tuple[Bucket, bool]:
    """The key's state once a start passed at ``now``, and whether it passed on burst.

    Since the key last idled (its ``anchor``), a steady pace lets ``1 + paces elapsed`` starts
    through; the starts beyond that are its lead. A start on burst is one that takes the lead
    further than its previous start had: one of an idle key's burst, not the steady starts that
    follow it (a late start, late by less than a pace, does not shorten the lead).
    """
    pace = Fraction(period) / limit
    if b is None or Fraction(b.anchor) + b.n * pace <= now:  # idle since its TAT: counted afresh from now
        return Bucket(now, 1, now), False
    anchor = Fraction(b.anchor)
    lead_before = b.n - 1 - math.floor((Fraction(b.last) - anchor) / pace)
    lead = b.n - math.floor((Fraction(now) - anchor) / pace)
    return Bucket(b.anchor, b.n + 1, now), lead > lead_before


def _ceil(x: Fraction) -> float:
    """The least float not before ``x``: a start due then is let through."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)
