"""Data as given, or refused: NaN and infinities, lone surrogates, a payload string that is not JSON."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.serde import _refuse_unstorable, _storable, refuse_unstorable


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


# -- values a run produces -------------------------------------------------------------------------


class Ask(BaseModel):
    n: int


class Kind(BaseModel):
    kind: str = "nan"


def _producing_app() -> lg.App:
    app = lg.App()

    def measure(kind: str) -> Any:
        return {"nan": float("nan"), "inf": [1.0, float("inf")], "-inf": {"low": float("-inf")}}[kind]

    @app.workflow(name="values.step")
    async def step(ctx: lg.Context, p: Kind) -> Any:
        return await ctx.step("measure", measure, p.kind, retry=lg.Retry(max_attempts=2, base_delay=0))

    @app.workflow(name="values.body")
    async def body(ctx: lg.Context, p: Kind) -> Any:
        return {"ratio": float("nan")}

    @app.workflow(name="values.update")
    async def update(ctx: lg.Context, p: Kind) -> str:
        await ctx.handle_update("ask", Ask, lambda a: [a.n, float("-inf")])
        return "answered"

    return app


@pytest.mark.parametrize(("kind", "where"), [("nan", "(root)"), ("inf", "1"), ("-inf", "low")])
async def test_a_nan_from_a_step_fails_its_attempts_naming_the_field(env_factory: Any, kind: str, where: str) -> None:
    async with env_factory(_producing_app()) as env:
        handle = await env.engine.start("values.step", {"kind": kind})
        await env.settle()
        with pytest.raises(lg.RunFailed) as failed:
            await handle.result(timeout=10)
        assert failed.value.error_tag == "UnstorableValue"  # the step's error, as any step error is told
        assert f"step 'measure' result: invalid {where} (" in str(failed.value)
        detail = await env.engine.inspector.run_detail(handle.run_id)
        attempts = [a for a in detail.attempts if a.step_key.startswith("measure")]
        assert [a.status for a in attempts] == ["failed", "failed"]  # each attempt refused, none journaled
        assert all(a.error_tag == "UnstorableValue" for a in attempts)
        assert [s.status for s in detail.steps if s.name == "measure"] == ["failed"]


async def test_a_body_result_holding_nan_fails_the_run_naming_the_field(env_factory: Any) -> None:
    async with env_factory(_producing_app()) as env:
        handle = await env.engine.start("values.body", {})
        await env.settle()
        with pytest.raises(lg.RunFailed) as failed:
            await handle.result(timeout=10)
        assert failed.value.error_tag == "UnstorableValue"
        assert "workflow 'values.body' result: invalid ratio (nan is not a number JSON can hold)" in str(failed.value)


async def test_an_update_answer_holding_infinity_fails_the_update_naming_the_field(env_factory: Any) -> None:
    async with env_factory(_producing_app()) as env:
        handle = await env.engine.start("values.update", {})
        await env.settle()
        with pytest.raises(lg.UpdateFailed) as failed:
            await env.engine.update(handle.run_id, "ask", {"n": 1}, timeout=10)
        assert failed.value.error_tag == "UnstorableValue"
        assert "update 'ask' answer: invalid 1 (-inf is not a number JSON can hold)" in str(failed.value)


def test_a_produced_value_is_refused_with_its_own_type() -> None:
    with pytest.raises(lg.UnstorableValue) as refused:
        refuse_unstorable({"a": [1.0, float("nan")]}, "step 'x' result")
    assert refused.value.invalid == ["a.1"] and isinstance(refused.value, lg.PayloadError)
    refuse_unstorable({"a": [1.0, 2.5, "text"]}, "step 'x' result")  # finite values pass
