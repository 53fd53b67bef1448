"""Invariants of listing's pure parts: a cursor names the position it was made from, and the id range
an id prefix is searched in holds every id that starts with it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockgate.inspect.listing import decode_cursor, encode_cursor, split_statuses
from lockgate.store.listing import _id_range

ID_DIGITS = "0123456789abcdefghijklmnopqrstuv"
run_ids = st.text(alphabet=ID_DIGITS, min_size=24, max_size=24).map(lambda tail: f"run_{tail}")


@given(at=st.floats(allow_nan=False, allow_infinity=False), run_id=st.text(min_size=1))
def test_a_cursor_names_the_position_it_was_made_from(at: float, run_id: str) -> None:
    assert decode_cursor(encode_cursor((at, run_id))) == (at, run_id)


@given(run_id=run_ids, cut=st.integers(min_value=0, max_value=28), other=run_ids)
def test_an_id_prefix_range_holds_every_id_that_starts_with_it(run_id: str, cut: int, other: str) -> None:
    prefix = run_id[:cut]
    bounds = _id_range(prefix)
    if bounds is None:
        return  # searched by creation time instead: nothing to hold
    lo, hi = bounds
    assert lo <= run_id < hi
    if other.startswith(prefix):
        assert lo <= other < hi


@given(st.lists(st.sampled_from(["running", "failed", " cancelled ", ""]), max_size=4))
def test_statuses_split_on_commas(parts: list[str]) -> None:
    assert split_statuses(",".join(parts)) == tuple(p.strip() for p in parts if p.strip())
