"""Stateful schemathesis over the HTTP API: calls chained by the links between endpoints, zero 5xx.

Schemathesis infers the links from the document (a start's ``run_id`` and ``ticket`` feed
the run, ticket and recovery endpoints; a run's events feed the event endpoints) and walks
sequences of calls through them, each answer checked for a server error and its schema.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyStrategyDefinition

from .conftest import LONG
from .test_http_schema import live_url, schema

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import response_schema_conformance  # noqa: E402

__all__ = ["live_url"]

Workflow = schema.as_state_machine()


@pytest.mark.slow
@pytest.mark.skipif(
    not LONG,
    reason="LOCKGATE_TORTURE=long only: on a server that keeps what earlier sequences did, hypothesis "
    "can report inconsistent generation (FlakyStrategyDefinition) instead of a verdict; the "
    "per-endpoint schemathesis run (test_http_schema.py) guards every answer in the normal suite",
)
def test_sequences_of_linked_calls_never_meet_a_server_error(live_url: str) -> None:
    class Linked(Workflow):  # type: ignore[misc,valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": live_url, "timeout": 30}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    walk = settings(
        max_examples=25,
        stateful_step_count=6,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        # The server keeps what earlier sequences did, so a sequence replayed later can meet other
        # answers and choose other rules: generate only (no shrinking replays), from a fixed seed.
        phases=[Phase.generate],
        derandomize=True,
        database=None,
    )
    try:
        Linked.run(settings=walk)
    except FlakyStrategyDefinition:  # the server's state, not a server error: walk once more
        Linked.run(settings=walk)
