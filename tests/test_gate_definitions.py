"""What the gate refuses: bad declarations at boot, bad callbacks at start, blocking starts it cannot serve."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.gate import parked, runs


class Job(BaseModel):
    tenant: str
    n: int = 0


class Item(BaseModel):
    sku: str


class Other(BaseModel):
    code: str


class Items(BaseModel):
    items: list[Item]


class OtherItems(BaseModel):
    items: list[Other]


def app_with(options: dict[str, Any], model: type[BaseModel] = Job, *, name: str = "wf") -> lg.App:
    """An app with one workflow ``name`` taking ``model`` and declaring ``options`` (plus a valid handler)."""
    app = lg.App()

    @app.workflow(name="handler")
    async def handler(ctx: lg.Context, p: lg.FailureReport) -> None:
        return None

    if model is Job:

        @app.workflow(name=name, **options)
        async def body(ctx: lg.Context, p: Job) -> None:
            return None

    elif model is Items:

        @app.workflow(name=name, **options)
        async def items_body(ctx: lg.Context, p: Items) -> None:
            return None

    elif model is OtherItems:

        @app.workflow(name=name, **options)
        async def other_body(ctx: lg.Context, p: OtherItems) -> None:
            return None

    else:
        raise AssertionError(model)
    return app


def refusal(app: lg.App) -> lg.DefinitionError:
    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    return info.value


def key(p: Any) -> str:
    return str(p.tenant)


# -- combinations ------------------------------------------------------------------------------


BAD_COMBINATIONS: list[tuple[str, dict[str, Any], type[BaseModel], list[str]]] = [
    (
        "throttle+rate_limit",
        {"throttle": lg.Throttle(limit=1, period="1m"), "rate_limit": lg.RateLimit(limit=1, period="1m")},
        Job,
        ["throttle", "rate_limit"],
    ),
    (
        "batch+debounce",
        {"batch": lg.Batch(item=Item, max_size=5, timeout="30s"), "debounce": lg.Debounce(period="1m")},
        Items,
        ["batch", "debounce"],
    ),
    ("start timeout without deferral", {"timeouts": lg.Timeouts(start="1h")}, Job, ["timeouts.start"]),
    (
        "start timeout under singleton only",
        {"timeouts": lg.Timeouts(start="1h"), "singleton": lg.Singleton(mode="skip")},
        Job,
        ["timeouts.start"],
    ),
    ("singleton without mode", {"singleton": lg.Singleton(key=key)}, Job, ["singleton.mode"]),
    ("singleton with unknown mode", {"singleton": lg.Singleton(mode="evict")}, Job, ["singleton.mode"]),  # type: ignore[arg-type]
    (
        "batch payload without items",
        {"batch": lg.Batch(item=Item, max_size=5, timeout="30s")},
        Job,
        ["batch.item", "payload"],
    ),
    (
        "batch items of another type",
        {"batch": lg.Batch(item=Item, max_size=5, timeout="30s")},
        OtherItems,
        ["batch.item", "payload"],
    ),
    ("batch item not a model", {"batch": lg.Batch(item=dict, max_size=5, timeout="30s")}, Items, ["batch.item"]),  # type: ignore[arg-type]
    (
        "keep=all without items",
        {"debounce": lg.Debounce(period="1m", keep="all")},
        Job,
        ["debounce.keep", "payload"],
    ),
    ("debounce keep unknown", {"debounce": lg.Debounce(period="1m", keep="middle")}, Job, ["debounce.keep"]),  # type: ignore[arg-type]
    ("on_failure unregistered", {"on_failure": "nobody"}, Job, ["on_failure"]),
    ("on_failure not a FailureReport handler", {"on_failure": "wf"}, Job, ["on_failure"]),
    ("on_failure not a name", {"on_failure": 42}, Job, ["on_failure"]),
    ("unknown option", {"debounse": lg.Debounce(period="1m")}, Job, ["debounse"]),
    ("burst without total", {"concurrency": lg.Concurrency(limit=2, burst=4)}, Job, ["concurrency.burst"]),
    ("total under limit", {"concurrency": lg.Concurrency(limit=5, total=2)}, Job, ["concurrency.total"]),
]


@pytest.mark.parametrize(
    ("options", "model", "fields"),
    [pytest.param(o, m, f, id=i) for i, o, m, f in BAD_COMBINATIONS],
)
def test_bad_declarations_are_refused_naming_workflow_and_fields(
    options: dict[str, Any], model: type[BaseModel], fields: list[str]
) -> None:
    err = refusal(app_with(options, model))
    assert err.workflow == "wf"
    for f in fields:
        assert f in err.fields, (f, err.fields)
        assert f in str(err)
    assert "'wf'" in str(err)


WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("debounce not a Debounce", {"debounce": "15m"}, "debounce"),
    ("concurrency given a Throttle", {"concurrency": lg.Throttle(limit=1, period="1m")}, "concurrency"),
    ("concurrency limit a string", {"concurrency": lg.Concurrency(limit="5")}, "concurrency.limit"),  # type: ignore[arg-type]
    ("concurrency limit zero", {"concurrency": lg.Concurrency(limit=0)}, "concurrency.limit"),
    ("concurrency limit a bool", {"concurrency": lg.Concurrency(limit=True)}, "concurrency.limit"),
    ("throttle limit negative", {"throttle": lg.Throttle(limit=-1, period="1m")}, "throttle.limit"),
    ("throttle empty list", {"throttle": []}, "throttle"),
    ("rate_limit list of the wrong kind", {"rate_limit": [lg.Throttle(limit=1, period="1m")]}, "rate_limit"),
    ("priority not callable", {"priority": 5}, "priority"),
    ("fair_by not callable", {"fair_by": "tenant"}, "fair_by"),
    ("debounce key not callable", {"debounce": lg.Debounce(period="1m", key="tenant")}, "debounce.key"),  # type: ignore[arg-type]
    ("singleton key not callable", {"singleton": lg.Singleton(mode="skip", key="t")}, "singleton.key"),  # type: ignore[arg-type]
    ("concurrency key not callable", {"concurrency": lg.Concurrency(limit=1, key=3)}, "concurrency.key"),  # type: ignore[arg-type]
    ("timeouts not Timeouts", {"timeouts": {"finish": "1m"}}, "timeouts"),
]


@pytest.mark.parametrize(("options", "field"), [pytest.param(o, f, id=i) for i, o, f in WRONG_TYPES])
def test_wrong_types_are_refused(options: dict[str, Any], field: str) -> None:
    err = refusal(app_with(options))
    assert err.workflow == "wf"
    assert field in err.fields


BAD_DURATIONS: list[tuple[str, dict[str, Any], str]] = [
    ("misspelt unit", {"debounce": lg.Debounce(period="15 minuts")}, "debounce.period"),
    ("zero period", {"debounce": lg.Debounce(period=0)}, "debounce.period"),
    ("negative period", {"throttle": lg.Throttle(limit=1, period=-5)}, "throttle.period"),
    ("empty timeout", {"debounce": lg.Debounce(period="1m", timeout="")}, "debounce.timeout"),
    ("list as a duration", {"rate_limit": lg.RateLimit(limit=1, period=[1])}, "rate_limit.period"),  # type: ignore[arg-type]
    ("bool as a duration", {"timeouts": lg.Timeouts(finish=True)}, "timeouts.finish"),
    ("unreadable finish", {"timeouts": lg.Timeouts(finish="soon")}, "timeouts.finish"),
    (
        "unreadable start",
        {"timeouts": lg.Timeouts(start="1 fortnight"), "concurrency": lg.Concurrency(limit=1)},
        "timeouts.start",
    ),
    ("second window of a list", {"throttle": [lg.Throttle(1, "1m"), lg.Throttle(5, "1 yr")]}, "throttle[1].period"),
]


@pytest.mark.parametrize(("options", "field"), [pytest.param(o, f, id=i) for i, o, f in BAD_DURATIONS])
def test_bad_durations_are_refused(options: dict[str, Any], field: str) -> None:
    err = refusal(app_with(options))
    assert err.fields == [field]


def test_batch_timeout_must_be_readable() -> None:
    err = refusal(app_with({"batch": lg.Batch(item=Item, max_size=3, timeout="half a minute")}, Items))
    assert err.fields == ["batch.timeout"]


def test_pool_members_must_declare_the_same_limit() -> None:
    app = lg.App()

    @app.workflow(name="embed", concurrency=lg.Concurrency(limit=10, pool="openai"))
    async def embed(ctx: lg.Context, p: Job) -> None:
        return None

    @app.workflow(name="summarize", concurrency=lg.Concurrency(limit=5, pool="openai"))
    async def summarize(ctx: lg.Context, p: Job) -> None:
        return None

    err = refusal(app)
    assert err.workflow == "summarize"
    assert "concurrency.limit" in err.fields
    assert "embed" in str(err) and "pool:openai" in str(err)


def test_pool_members_with_equal_limits_boot() -> None:
    app = lg.App()

    @app.workflow(name="embed", concurrency=lg.Concurrency(limit=10, pool="openai", key=key))
    async def embed(ctx: lg.Context, p: Job) -> None:
        return None

    @app.workflow(name="summarize", concurrency=lg.Concurrency(limit=10, pool="openai"))
    async def summarize(ctx: lg.Context, p: Job) -> None:
        return None

    defs = app.definitions()
    assert defs["embed"].gate.concurrency_scope == defs["summarize"].gate.concurrency_scope == "pool:openai"


def test_valid_combinations_boot() -> None:
    app = app_with(
        {
            "debounce": lg.Debounce(period="15 minutes", timeout=timedelta(hours=1), key=key),
            "singleton": lg.Singleton(mode="cancel", key=key),
            "concurrency": lg.Concurrency(limit=5, key=key),
            "timeouts": lg.Timeouts(start="1h", finish=600),
            "priority": lambda p: p.n,
            "fair_by": key,
            "on_failure": "handler",
        }
    )
    plan = app.definitions()["wf"].gate
    assert (plan.debounce_period, plan.debounce_timeout, plan.start_timeout, plan.finish_timeout) == (
        900.0,
        3600.0,
        3600.0,
        600.0,
    )
    assert plan.deferring == "debounce"


# -- boot on a store: the Engine and the Client refuse before anything is accepted ----------


async def test_engine_and_client_refuse_to_open(make_engine: Callable[..., lg.Engine], store_url: str) -> None:
    app = app_with({"throttle": lg.Throttle(limit=1, period="1m"), "rate_limit": lg.RateLimit(limit=1, period="1m")})
    with pytest.raises(lg.DefinitionError, match=r"'wf'.*throttle \+ rate_limit"):
        async with make_engine(app):
            pass
    with pytest.raises(lg.DefinitionError, match="throttle"):
        async with lg.Client(app, store=store_url):
            pass


async def test_an_unrefused_app_opens_the_same_store(make_engine: Callable[..., lg.Engine]) -> None:
    async with make_engine(app_with({"concurrency": lg.Concurrency(limit=2)})) as engine:
        handle = await engine.start("wf", {"tenant": "t"})
        assert handle.status == "started"


# -- callbacks that fail at start ----------------------------------------------------------------


def misspelt(p: Any) -> str:
    return str(p.tenant_id)  # the model's field is ``tenant``


CALLBACK_FAILURES: list[tuple[str, dict[str, Any], str]] = [
    ("debounce key raises", {"debounce": lg.Debounce(period="1m", key=misspelt)}, "debounce.key"),
    ("debounce key returns None", {"debounce": lg.Debounce(period="1m", key=lambda p: None)}, "debounce.key"),
    ("concurrency key raises", {"concurrency": lg.Concurrency(limit=1, key=misspelt)}, "concurrency.key"),
    ("singleton key returns None", {"singleton": lg.Singleton(mode="skip", key=lambda p: None)}, "singleton.key"),
    ("throttle key raises", {"throttle": lg.Throttle(limit=1, period="1m", key=misspelt)}, "throttle[0].key"),
    ("priority raises", {"concurrency": lg.Concurrency(limit=1), "priority": misspelt}, "priority"),
    ("priority returns None", {"concurrency": lg.Concurrency(limit=1), "priority": lambda p: None}, "priority"),
    ("priority returns a string", {"concurrency": lg.Concurrency(limit=1), "priority": lambda p: "high"}, "priority"),
    ("fair_by raises", {"concurrency": lg.Concurrency(limit=1), "fair_by": misspelt}, "fair_by"),
    ("fair_by returns None", {"concurrency": lg.Concurrency(limit=1), "fair_by": lambda p: None}, "fair_by"),
]


@pytest.mark.parametrize(("options", "field"), [pytest.param(o, f, id=i) for i, o, f in CALLBACK_FAILURES])
async def test_a_failing_callback_is_a_definition_error_at_start_and_writes_nothing(
    make_engine: Callable[..., lg.Engine], options: dict[str, Any], field: str
) -> None:
    async with make_engine(app_with(options)) as engine:
        with pytest.raises(lg.DefinitionError) as info:
            await engine.start("wf", {"tenant": "t"})
        assert info.value.workflow == "wf"
        assert info.value.fields == [field]
        assert "'wf'" in str(info.value) and field in str(info.value)
        assert await runs(engine, "wf") == []
        assert await parked(engine, "wf") == 0
        assert await engine.flow("wf") == []


async def test_a_batch_key_is_called_with_the_item(make_engine: Callable[..., lg.Engine]) -> None:
    app = app_with({"batch": lg.Batch(item=Item, max_size=2, timeout="1m", key=lambda i: i.tenant)}, Items)
    async with make_engine(app) as engine:
        with pytest.raises(lg.DefinitionError, match=r"batch\.key: callback raised AttributeError"):
            await engine.start("wf", {"sku": "a"})
        assert await engine.flow("wf") == []


# -- blocking starts ---------------------------------------------------------------------------


DEFERRING: list[tuple[str, dict[str, Any], type[BaseModel], dict[str, Any]]] = [
    ("debounce", {"debounce": lg.Debounce(period="1m")}, Job, {"tenant": "t"}),
    ("batch", {"batch": lg.Batch(item=Item, max_size=2, timeout="1m")}, Items, {"sku": "a"}),
    ("throttle", {"throttle": lg.Throttle(limit=5, period="1m")}, Job, {"tenant": "t"}),
    ("concurrency", {"concurrency": lg.Concurrency(limit=5)}, Job, {"tenant": "t"}),
]


@pytest.mark.parametrize(
    ("control", "options", "model", "payload"), [pytest.param(*case, id=case[0]) for case in DEFERRING]
)
async def test_blocking_starts_are_refused_on_deferring_workflows(
    make_engine: Callable[..., lg.Engine],
    control: str,
    options: dict[str, Any],
    model: type[BaseModel],
    payload: dict[str, Any],
) -> None:
    async with make_engine(app_with(options, model)) as engine:
        with pytest.raises(lg.BlockingStartRefused) as info:
            await engine.start("wf", payload, wait=True)
        assert (info.value.workflow, info.value.control) == ("wf", control)
        assert "wait=True" in str(info.value) and control in str(info.value)
        with pytest.raises(lg.BlockingStartRefused, match=control):
            await engine.run("wf", payload)
        assert await engine.flow("wf") == []
        assert await runs(engine, "wf") == []


async def test_rate_limit_on_a_blocking_path_raises_rate_limited(make_engine: Callable[..., lg.Engine]) -> None:
    app = app_with({"rate_limit": lg.RateLimit(limit=1, period="1h", key=key)})
    async with make_engine(app) as engine:
        assert await engine.run("wf", {"tenant": "t"}, timeout=15) is None
        with pytest.raises(lg.RateLimited) as info:
            await engine.run("wf", {"tenant": "t"}, timeout=15)
        assert timedelta(minutes=59) < info.value.retry_after <= timedelta(hours=1)
        assert info.value.workflow == "wf"
        with pytest.raises(lg.RateLimited):
            await engine.start("wf", {"tenant": "t"}, wait=True)
        dropped = await engine.start("wf", {"tenant": "t"})
        assert dropped.status == "dropped" and dropped.run_id is None
        assert dropped.retry_after is not None and dropped.retry_after > timedelta(minutes=59)
        # another key has its own window
        assert await engine.run("wf", {"tenant": "u"}, timeout=15) is None
        assert len(await runs(engine, "wf")) == 2


async def test_no_store_is_needed_to_refuse(tmp_path: Path) -> None:
    """A refused app never reaches its store: the database file is not even created."""
    engine = lg.Engine(app_with({"singleton": lg.Singleton()}), f"sqlite:///{tmp_path}/never.db")
    with pytest.raises(lg.DefinitionError, match=r"singleton\.mode"):
        await engine.open()
    assert not (tmp_path / "never.db").exists()
