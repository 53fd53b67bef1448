"""Typed results: a body's return value is checked against its annotation before the run ends."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import lockgate as lg
from lockgate.errors import ResultTypeError, RunFailed


class Item(BaseModel):
    i: int


class Verdict(BaseModel):
    ok: bool
    note: str = ""


def build_app(returns: dict[str, Any]) -> lg.App:
    app = lg.App()

    @app.workflow(name="yesno")
    async def yesno(ctx: lg.Context, p: Item) -> bool:
        return returns.get("yesno", True)  # type: ignore[no-any-return]

    @app.workflow(name="verdict")
    async def verdict(ctx: lg.Context, p: Item) -> Verdict:
        return returns.get("verdict", Verdict(ok=True))  # type: ignore[no-any-return]

    @app.workflow(name="parent")
    async def parent(ctx: lg.Context, p: Item) -> str:
        child = await ctx.start_child("yesno", p)
        try:
            await ctx.wait_child(child)
        except RunFailed as exc:
            return f"child failed: {exc.error_tag}"
        return "child ok"

    return app


async def test_a_mismatched_result_fails_the_run_with_a_typed_cause(make_engine: Any) -> None:
    app = build_app({"yesno": None})
    async with make_engine(app) as engine:
        handle = await engine.start("yesno", {"i": 1})
        with pytest.raises(RunFailed) as caught:
            await engine.result(handle.run_id, timeout=30)
        info = await engine.get_run(handle.run_id)
    assert caught.value.error_tag == "ResultTypeError"
    cause = caught.value.__cause__
    assert isinstance(cause, ResultTypeError)
    assert (cause.workflow, cause.expected, cause.actual) == ("yesno", "bool", "None")
    assert not isinstance(caught.value, ValidationError)
    assert info.status == "failed"


async def test_a_matching_result_is_validated_into_its_type(make_engine: Any) -> None:
    app = build_app({"verdict": {"ok": True, "note": "from a dict"}})
    async with make_engine(app) as engine:
        out = await engine.run("verdict", {"i": 1}, timeout=30)
        assert out == Verdict(ok=True, note="from a dict")
        assert await engine.run("yesno", {"i": 2}, timeout=30) is True


async def test_a_model_result_of_the_wrong_shape_is_refused(make_engine: Any) -> None:
    app = build_app({"verdict": {"note": "no ok"}})
    async with make_engine(app) as engine:
        with pytest.raises(RunFailed) as caught:
            await engine.run("verdict", {"i": 1}, timeout=30)
    cause = caught.value.__cause__
    assert isinstance(cause, ResultTypeError)
    assert cause.expected == "Verdict" and cause.actual == "dict"


async def test_a_parent_sees_its_childs_type_failure_as_run_failed(make_engine: Any) -> None:
    app = build_app({"yesno": "not a bool"})
    async with make_engine(app) as engine:
        assert await engine.run("parent", {"i": 1}, timeout=30) == "child failed: ResultTypeError"


async def test_a_stored_result_that_no_longer_fits_is_a_typed_error(make_engine: Any, store_url: str) -> None:
    """A deploy changed the annotation after the run ended: the reader gets ``ResultTypeError``, not pydantic's."""
    async with make_engine(build_app({"verdict": Verdict(ok=True)})) as engine:
        handle = await engine.start("verdict", {"i": 1})
        await engine.result(handle.run_id, timeout=30)
    changed = lg.App()

    @changed.workflow(name="verdict")
    async def verdict(ctx: lg.Context, p: Item) -> int:
        return 1

    async with lg.Client(changed, store_url) as client:
        with pytest.raises(ResultTypeError) as caught:
            await client.result(handle.run_id, timeout=30)
    assert caught.value.expected == "int" and caught.value.workflow == "verdict"


def test_the_error_is_rebuilt_from_its_message() -> None:
    error = ResultTypeError("a.b", "list[int]", "str")
    again = ResultTypeError.from_message(str(error))
    assert again is not None and (again.workflow, again.expected, again.actual) == ("a.b", "list[int]", "str")
    assert ResultTypeError.from_message("something else") is None


class Wait(BaseModel):
    ok: bool = True


class Renamed(BaseModel):
    count: int


