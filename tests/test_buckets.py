"""The token bucket's rule on its own (``lockgate.buckets``): random instants, exact bounds.

The gate (``test_gate_burst``) and step flow control (``test_step_flow_burst``) apply this
rule to stored state; here it meets arbitrary float instants near a real epoch, periods that
do not divide evenly, and a key driven flat out.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.buckets import Bucket, bucket_hit, bucket_opens, bucket_room

from .test_gate_burst import check_bucket

T0 = 1_800_000_000.123456
PERIODS = st.sampled_from((0.3, 1.0, 2.5, 7.0, 10.0 / 3, 60.0))


def offer(b: Bucket | None, limit: int, period: float, burst: int, now: float, tries: int) -> tuple[Bucket | None, int]:
    """Offer ``tries`` starts one after the other at ``now``; the state after, and how many passed."""
    passed = 0
    for _ in range(tries):
        if bucket_opens(b, limit, period, burst, now) is not None:
            break
        b, _ = bucket_hit(b, limit, period, now)
        passed += 1
    return b, passed


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 6),
    period=PERIODS,
    burst=st.integers(0, 5),
    steps=st.lists(
        st.tuples(st.floats(0, 3, allow_nan=False), st.integers(0, 8)),
        min_size=1,
        max_size=40,
    ),
)
def test_room_opens_and_the_bound_agree_at_any_instants(
    limit: int, period: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    b: Bucket | None = None
    now, times = T0, []
    for paces, tries in steps:
        now = now + paces * period / limit
        room = bucket_room(b, limit, period, burst, now)
        assert 0 <= room <= burst + 1
        b, passed = offer(b, limit, period, burst, now, tries)
        assert passed == min(room, tries)  # room says exactly how many pass, one after the other
        times += [now] * passed
        opens = bucket_opens(b, limit, period, burst, now)
        if opens is not None:  # the first instant one passes: then, and not an instant before
            assert opens > now
            assert bucket_opens(b, limit, period, burst, opens) is None
            assert bucket_opens(b, limit, period, burst, math.nextafter(opens, -math.inf)) is not None
    check_bucket(times, limit, period, burst)


@settings(max_examples=100, deadline=None)
@given(limit=st.integers(1, 6), period=PERIODS, burst=st.integers(0, 5), n=st.integers(1, 200))
def test_a_key_driven_flat_out_starts_the_burst_then_limit_per_period(
    limit: int, period: float, burst: int, n: int
) -> None:
    b, passed = offer(None, limit, period, burst, T0, n)
    assert passed == min(n, burst + 1)
    times, now = [T0] * passed, T0
    while len(times) < n:  # every start at the first instant the key lets it through
        opens = bucket_opens(b, limit, period, burst, now)
        now = now if opens is None else opens
        b, _ = bucket_hit(b, limit, period, now)
        times.append(now)
    check_bucket(times, limit, period, burst)
    if n > burst + 1:  # the limit is used to the full: the k-th steady start comes k paces after the first
        span = Fraction(times[-1]) - Fraction(T0)
        pace = Fraction(period) / limit
        # A due instant is the least float not before the exact one: a start may come up to one float
        # step (about 0.24 µs at this epoch) late, never early, so the rate errs slow by that at most.
        slack = Fraction(math.ulp(times[-1])) * n
        assert (n - burst - 1) * pace <= span <= (n - burst - 1) * pace + slack


def test_a_burst_start_is_one_that_gets_ahead_of_the_pace() -> None:
    b, flags = None, []
    for at in (0.0, 0.0, 0.0, 2.0, 4.05, 8.5, 8.5):  # pace 2s, burst 2
        assert bucket_opens(b, 4, 8.0, 2, T0 + at) is None
        b, on_burst = bucket_hit(b, 4, 8.0, T0 + at)
        flags.append(on_burst)
    # the idle key's two extra starts; not the steady ones after them, nor one late by less than a pace
    # (4.05s); 8.5s comes a pace and more late, so the lead fell by one, and the second start then is
    # one the key lets through on burst
    assert flags == [False, True, True, False, False, False, True]
