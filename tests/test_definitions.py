"""Workflow definitions: what a body declares, and what the engine refuses at boot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg


class Order(BaseModel):
    order_id: str
    amount: int


class Receipt(BaseModel):
    order_id: str
    charged: int


@dataclass
class Summary:
    order_id: str
    lines: list[str]


def _boot_error(app: lg.App) -> lg.DefinitionError:
    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    return info.value


# -- refusals ------------------------------------------------------------------------


async def test_refusal_surfaces_at_engine_boot(make_engine: Any) -> None:
    app = lg.App()

    @app.workflow(name="orders.sync")
    def not_async(ctx: lg.Context, p: Order) -> None:
        return None

    with pytest.raises(lg.DefinitionError) as info:
        async with make_engine(app):
            pytest.fail("the engine booted with an invalid definition")
    assert info.value.workflow == "orders.sync"
    assert info.value.fields == ["body"]
    assert "'orders.sync'" in str(info.value) and "body" in str(info.value)


async def test_client_refuses_the_same_definitions(store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="orders.untyped")
    async def untyped(ctx: lg.Context, p) -> None:  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(lg.DefinitionError, match=r"orders\.untyped"):
        async with lg.Client(app, store_url):
            pytest.fail("the client booted with an invalid definition")


def test_sync_body_is_refused() -> None:
    app = lg.App()

    @app.workflow(name="w")
    def body(ctx: lg.Context, p: Order) -> None:
        return None

    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["body"])
    assert "async def" in err.problem


def test_missing_payload_annotation_is_refused() -> None:
    app = lg.App()

    @app.workflow(name="w")
    async def body(ctx: lg.Context, p) -> None:  # type: ignore[no-untyped-def]
        return None

    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["payload"])
    assert "'p'" in err.problem


@pytest.mark.parametrize("annotation", [int, dict, Summary])
def test_payload_annotation_must_be_a_pydantic_model(annotation: Any) -> None:
    app = lg.App()

    async def body(ctx: lg.Context, p: Any) -> None:
        return None

    body.__annotations__["p"] = annotation
    app.workflow(name="w")(body)
    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["payload"])
    assert "pydantic model" in err.problem


@pytest.mark.parametrize("arity", [1, 3])
def test_body_must_take_ctx_and_payload(arity: int) -> None:
    app = lg.App()
    if arity == 1:

        async def body(ctx: lg.Context) -> None:
            return None

        app.workflow(name="w")(body)
    else:

        async def body3(ctx: lg.Context, p: Order, extra: int) -> None:
            return None

        app.workflow(name="w")(body3)
    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["body"])
    assert f"takes {arity}" in err.problem


def test_unresolvable_annotation_is_refused() -> None:
    app = lg.App()

    async def body(ctx: lg.Context, p: NoSuchModel) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    app.workflow(name="w")(body)
    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["body"])
    assert "NoSuchModel" in err.problem


def test_duplicate_names_are_refused() -> None:
    app = lg.App()

    @app.workflow(name="orders.charge")
    async def first(ctx: lg.Context, p: Order) -> None:
        return None

    @app.workflow(name="orders.charge")
    async def second(ctx: lg.Context, p: Order) -> None:
        return None

    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("orders.charge", ["name"])
    assert "twice" in err.problem


@pytest.mark.parametrize(
    ("options", "fields"),
    [
        ({"version": 2}, ["version"]),
        ({"version": ""}, ["version"]),
        ({"compatible_with": ["1"]}, ["compatible_with", "version"]),
        ({"version": "2", "compatible_with": 1}, ["compatible_with"]),
        ({"version": "2", "compatible_with": ["1", 1]}, ["compatible_with"]),
        ({"version": "2", "compatible_with": [""]}, ["compatible_with"]),
        ({"patches": [""]}, ["patches"]),
        ({"patches": ["fix-1", None]}, ["patches"]),
        ({"patches": {"fix-1": True}}, ["patches"]),
        ({"idempotency_key": "order_id"}, ["idempotency_key"]),
        ({"on_stalled": "page-someone"}, ["on_stalled"]),
        ({"signals": {"approve": dict}}, ["signals"]),
        ({"updates": ["add"]}, ["updates"]),
    ],
)
def test_bad_options_are_refused_naming_the_field(options: dict[str, Any], fields: list[str]) -> None:
    app = lg.App()

    async def body(ctx: lg.Context, p: Order) -> None:
        return None

    app.workflow(name="orders.charge", **options)(body)
    err = _boot_error(app)
    assert err.workflow == "orders.charge"
    assert err.fields == fields
    assert str(err).startswith("workflow 'orders.charge': " + " + ".join(fields))


def test_unknown_option_is_refused() -> None:
    app = lg.App()

    @app.workflow(name="w", retries=3)
    async def body(ctx: lg.Context, p: Order) -> None:
        return None

    err = _boot_error(app)
    assert (err.workflow, err.fields) == ("w", ["retries"])


# -- what a definition captures ---------------------------------------------------------


def test_payload_model_and_success_type_come_from_the_annotations() -> None:
    app = lg.App()

    @app.workflow(name="orders.charge", version="2", compatible_with="1", patches=["fix-1"])
    async def charge(ctx: lg.Context, order: Order) -> Receipt:
        return Receipt(order_id=order.order_id, charged=order.amount)

    @app.workflow
    async def nothing(ctx: lg.Context, order: Order) -> None:
        return None

    defs = app.definitions()
    defn = defs["orders.charge"]
    assert defn.payload_model is Order
    assert defn.result_type is Receipt
    assert (defn.version, defn.compatible_with, defn.patches) == ("2", ("1",), ("fix-1",))
    assert defn.accepts_version("1") and defn.accepts_version("2") and not defn.accepts_version("3")
    default_name = f"{__name__}.test_payload_model_and_success_type_come_from_the_annotations.<locals>.nothing"
    assert default_name in defs
    assert defs[default_name].result_type is None
    assert app.get(charge) is defn and app.get(nothing) is defs[default_name]


async def test_body_receives_the_decoded_payload_model(env_factory: Any) -> None:
    app = lg.App()
    seen: list[Any] = []

    def key(order: Order) -> str:
        seen.append(order)
        return f"order:{order.order_id}"

    @app.workflow(name="orders.charge", idempotency_key=key)
    async def charge(ctx: lg.Context, order: Order) -> int:
        seen.append(order)
        return order.amount * 2

    async with env_factory(app) as env:
        handle = await env.engine.start(charge, {"order_id": "o-1", "amount": "21"})
        assert handle.workflow == "orders.charge"
        assert await env.engine.result(handle.run_id, timeout=10) == 42
    assert [type(s) for s in seen] == [Order, Order]
    assert seen[0] == seen[1] == Order(order_id="o-1", amount=21)


def _receipt(order: Order) -> Receipt:
    return Receipt(order_id=order.order_id, charged=order.amount)


def _summary(order: Order) -> Summary:
    return Summary(order_id=order.order_id, lines=[f"{order.amount} units"])


def _receipts(order: Order) -> list[Receipt]:
    return [_receipt(order), Receipt(order_id="refund", charged=-order.amount)]


async def test_results_come_back_decoded_to_the_return_annotation(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(name="model")
    async def as_model(ctx: lg.Context, order: Order) -> Receipt:
        return _receipt(order)

    @app.workflow(name="dataclass")
    async def as_dataclass(ctx: lg.Context, order: Order) -> Summary:
        return _summary(order)

    @app.workflow(name="primitive")
    async def as_float(ctx: lg.Context, order: Order) -> float:
        return order.amount / 4

    @app.workflow(name="list")
    async def as_list(ctx: lg.Context, order: Order) -> list[Receipt]:
        return _receipts(order)

    @app.workflow(name="none")
    async def as_none(ctx: lg.Context, order: Order) -> None:
        return None

    order = Order(order_id="o-7", amount=10)
    expected: dict[str, Callable[[Order], Any]] = {
        "model": _receipt,
        "dataclass": _summary,
        "primitive": lambda o: 2.5,
        "list": _receipts,
        "none": lambda o: None,
    }
    async with env_factory(app) as env:
        for name, make in expected.items():
            handle = await env.engine.start(name, order)
            result = await env.engine.result(handle.run_id, timeout=10)
            assert result == make(order), name
            assert type(result) is type(make(order)), name
        receipts = await env.engine.run("list", order, timeout=10)
        assert all(isinstance(r, Receipt) for r in receipts)
