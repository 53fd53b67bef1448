"""Stateful schemathesis over the HTTP API: calls chained by the links between endpoints, zero 5xx.

Schemathesis infers the links from the document (a start's ``run_id`` and ``ticket`` feed
the run, ticket and recovery endpoints; a run's events feed the event endpoints) and walks
sequences of calls through them, each answer checked for a server error and its schema.
Each sequence meets a server of its own over a new store, so what one sequence did never
changes the answers another meets: a sequence replayed (to shrink it) walks as it first did.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from .test_http_schema import schema, serving

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import response_schema_conformance  # noqa: E402

Workflow = schema.as_state_machine()


@pytest.mark.slow
def test_sequences_of_linked_calls_never_meet_a_server_error() -> None:
    class Linked(Workflow):  # type: ignore[misc,valid-type]
        def setup(self) -> None:
            self._stack = contextlib.ExitStack()
            folder = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
            self._url = self._stack.enter_context(serving(folder / "lockgate.db"))

        def teardown(self) -> None:
            self._stack.close()

        def before_call(self, case: Any) -> None:
            # no engine runs these runs: an update would wait its whole timeout for an answer (202)
            if case.path.endswith("/update") and isinstance(case.body, dict):
                case.body["timeout"] = 0.2

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": self._url, "timeout": 30}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    Linked.run(
        settings=settings(
            max_examples=60,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
    )
