"""Names are text a table shows whole: workflow, event, schedule, queue, signal, update and flow-key
names with NUL, a lone surrogate, a newline, a tab or nothing at all are refused at boot, naming the
field; a flow-control key given at start is refused before anything is written. One flow-control
key declared by two workflows has one set of limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.names import name_problem

BAD = ["", "  ", "a\x00b", "\ud800", "x\udfffy", "two\nlines", "tab\there", "bell\x07", "sep\u2028x", "del\x7f"]


class P(BaseModel):
    n: int = 0


async def _body(ctx: lg.Context, p: P) -> int:
    return p.n


def _with_workflow(name: str) -> lg.App:
    app = lg.App()
    app.workflow(name=name)(_body)
    return app


def _with_event(name: str) -> lg.App:
    app = _with_workflow("ok")
    app.event(name)
    return app


def _with_schedule(name: str) -> lg.App:
    app = _with_workflow("ok")
    app.schedule(name, workflow="ok", every="1m", payload={})
    return app


def _with_queue(name: str) -> lg.App:
    app = lg.App()
    app.workflow(name="ok", queue=app.queue(name, concurrency=2))(_body)
    return app


def _with_signal(name: str) -> lg.App:
    app = lg.App()
    app.workflow(name="ok", signals={name: P})(_body)
    return app


def _with_update(name: str) -> lg.App:
    app = lg.App()
    app.workflow(name="ok", updates={name: P})(_body)
    return app


def _with_flow_key(name: str) -> lg.App:
    app = lg.App()
    app.workflow(name="ok", flow_control=lg.FlowControl(key=name, rate=2, period="1s"))(_body)
    return app


BUILDERS: dict[str, tuple[Callable[[str], lg.App], str]] = {
    "workflow": (_with_workflow, "name"),
    "event": (_with_event, "name"),
    "schedule": (_with_schedule, "name"),
    "queue": (_with_queue, "name"),
    "signal": (_with_signal, "signals"),
    "update": (_with_update, "updates"),
    "flow key": (_with_flow_key, "flow_control.key"),
}


@pytest.mark.parametrize("bad", BAD, ids=repr)
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_a_bad_name_is_refused_at_boot_naming_the_field(kind: str, bad: str) -> None:
    build, field = BUILDERS[kind]
    with pytest.raises(lg.DefinitionError) as refused:
        build(bad).definitions()
    assert field in refused.value.fields, (refused.value.fields, str(refused.value))
    str(refused.value).encode()  # the message itself is text a log can hold


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_good_names_pass(kind: str) -> None:
    build, _ = BUILDERS[kind]
    for good in ("orders.paid", "Zahlung-über €", "注文", "a b"):
        build(good).definitions()


async def test_an_engine_does_not_boot_with_a_bad_name(tmp_path: Any) -> None:
    with pytest.raises(lg.DefinitionError, match="name: "):
        async with lg.Engine(_with_workflow("orders\x00"), f"sqlite:///{tmp_path}/x.db"):
            pass


@given(st.text(max_size=8))
def test_a_name_is_refused_exactly_when_it_cannot_be_stored_or_shown(name: str) -> None:
    def storable_and_one_line() -> bool:
        try:
            name.encode()
        except UnicodeEncodeError:
            return False
        return bool(name.strip()) and not any(c < " " or c in "\x7f\u2028\u2029" or "\x80" <= c < "\xa0" for c in name)

    assert (name_problem(name) is None) is storable_and_one_line()


# -- a flow-control key given at start ----------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["k\ud800", "line\nbreak", "", lambda p: f"k{p.n}\udc00"], ids=["surrogate", "newline", "empty", "callback"]
)
async def test_a_bad_flow_key_at_start_is_invalid_and_writes_nothing(env_factory: Any, key: Any) -> None:
    async with env_factory(_with_workflow("ok")) as env:
        with pytest.raises(lg.InvalidArgument, match=r"flow_control\.key"):
            await env.engine.start("ok", {"n": 1}, flow_control=lg.FlowControl(key=key, rate=1, period="1s"))
        assert await env.engine.list_runs() == []
        assert await env.engine.inspector.flow_keys() == []


# -- one key, one set of limits ---------------------------------------------------------------------


def _sharing(first: lg.FlowControl, second: lg.FlowControl) -> lg.App:
    app = lg.App()
    app.workflow(name="billing.charge", flow_control=first)(_body)
    app.workflow(name="billing.refund", flow_control=second)(_body)
    return app


@pytest.mark.parametrize(
    "second",
    [
        lg.FlowControl(key="stripe", rate=5, period="1s"),
        lg.FlowControl(key="stripe", rate=2, period="2s"),
        lg.FlowControl(key="stripe", rate=2, period="1s", parallelism=1),
    ],
)
def test_two_workflows_declaring_one_flow_key_with_other_limits_are_refused_naming_both(
    second: lg.FlowControl,
) -> None:
    with pytest.raises(lg.DefinitionError) as refused:
        _sharing(lg.FlowControl(key="stripe", rate=2, period="1s"), second).definitions()
    assert refused.value.workflow == "billing.refund"
    assert refused.value.fields == ["flow_control", "billing.charge.flow_control"]
    assert "'stripe' must declare the same limits" in str(refused.value)
    assert "in 'billing.charge'" in str(refused.value)


def test_one_flow_key_with_the_same_limits_is_shared() -> None:
    _sharing(
        lg.FlowControl(key="stripe", rate=2, period="1s"), lg.FlowControl(key="stripe", rate=2, period=1.0)
    ).definitions()
    _sharing(  # other keys, other limits
        lg.FlowControl(key="stripe", rate=2), lg.FlowControl(key="adyen", rate=5)
    ).definitions()
