"""A validated definition is typed and frozen: its controls and gate plan are set when it is built."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.controls import WorkflowOptions
from lockgate.plan import GatePlan


class Job(BaseModel):
    tenant: str


def test_options_are_typed_and_the_plan_is_built_with_the_definition() -> None:
    app = lg.App()
    throttle = lg.Throttle(limit=5, period="1m")

    @app.workflow(name="wf", throttle=throttle, concurrency=lg.Concurrency(limit=2), version="v1")
    async def wf(ctx: lg.Context, p: Job) -> None:
        return None

    defn = app.definitions()["wf"]
    assert defn.options == WorkflowOptions(throttle=(throttle,), concurrency=lg.Concurrency(limit=2))
    assert isinstance(defn.gate, GatePlan)
    assert defn.gate.workflow == "wf" and len(defn.gate.throttles) == 1 and defn.gate.concurrency_scope == "wf:wf"
    with pytest.raises(dataclasses.FrozenInstanceError):
        defn.gate = GatePlan(workflow="wf")  # type: ignore[misc]
    assert app.definitions() is app.definitions()  # validated once, until another workflow is declared


def test_a_bare_workflow_has_empty_options_and_a_bare_plan() -> None:
    app = lg.App()

    @app.workflow(name="bare")
    async def bare(ctx: lg.Context, p: Job) -> None:
        return None

    defn = app.validate()["bare"]
    assert defn.options == WorkflowOptions()
    assert defn.gate == GatePlan(workflow="bare") and defn.gate.bare
