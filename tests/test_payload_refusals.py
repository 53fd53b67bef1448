"""Data as given, or refused: NaN and infinities, lone surrogates, a payload string that is not JSON."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.serde import _refuse_unstorable, _storable


class Reading(BaseModel):
    sensor: str
    value: float
    history: list[float] = []


def _app() -> lg.App:
    app = lg.App()

    @app.workflow(name="readings.store", idempotency_key=lambda p: f"reading:{p.sensor}")
    async def store(ctx: lg.Context, p: Reading) -> float:
        return p.value

    return app


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"sensor": "s", "value": float("nan")}, "value"),
        ({"sensor": "s", "value": 1.0, "history": [2.0, float("inf")]}, "history.1"),
        ('{"sensor": "s", "value": NaN}', "value"),
        ('{"sensor": "s", "value": -Infinity}', "value"),
        (Reading(sensor="s", value=float("-inf")), "value"),
        ({"sensor": "s\ud800", "value": 1.0}, "sensor"),
    ],
)
async def test_unstorable_values_are_refused_at_the_gate(env_factory: Any, payload: Any, where: str) -> None:
    async with env_factory(_app()) as env:
        with pytest.raises(lg.PayloadError) as info:
            await env.engine.start("readings.store", payload)
        assert info.value.invalid == [where]
        assert await env.engine.list_runs() == []


async def test_a_payload_string_that_is_not_json_says_the_type_expected(env_factory: Any) -> None:
    async with env_factory(_app()) as env:
        with pytest.raises(lg.PayloadError, match=r"expected a Reading \(an object, or its JSON text\), got .sensor s"):
            await env.engine.start("readings.store", "sensor s")
        assert await env.engine.list_runs() == []


async def test_a_lone_surrogate_in_a_key_is_a_payload_error(env_factory: Any) -> None:
    async with env_factory(_app()) as env:
        with pytest.raises(lg.PayloadError, match="idempotency_key 'k\\\\udc00' holds '\\\\udc00', a lone surrogate"):
            await env.engine.start("readings.store", {"sensor": "s", "value": 1}, idempotency_key="k\udc00")
        assert await env.engine.list_runs() == []


async def test_finite_values_round_trip(env_factory: Any) -> None:
    async with env_factory(_app()) as env:
        handle = await env.engine.start("readings.store", {"sensor": "s", "value": 1e308})
        await env.settle()
        assert await handle.result(timeout=10) == 1e308


_TEXT = st.text(st.characters(blacklist_categories=()), max_size=6) | st.sampled_from(["ok", "\ud800", "é\udfff"])
_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | _TEXT
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_TEXT, inner, max_size=4)
    | st.builds(Reading, sensor=_TEXT, value=st.floats(), history=st.lists(st.floats(), max_size=3)),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_the_quick_check_agrees_with_the_naming_walk(value: Any) -> None:
    """A start pays only the quick check; the walk that names the field runs when it says no."""
    try:
        _refuse_unstorable(value, "payload")
    except lg.PayloadError:
        refused = True
    else:
        refused = False
    assert _storable(value) is not refused
