"""``Tracing``: OpenTelemetry spans for run attempts and step attempts (the ``lockgate[otel]`` extra).

A start made inside a span records that span's W3C ``traceparent`` as the run's
``trace_id``; each entry into the run's body is then a span whose parent is that starter
span (a run started in a web request continues its trace), and each ``ctx.step`` attempt
is a span under the run's. A ``trace_id`` given by hand is honoured when it is a
``traceparent`` or a 32-digit hex trace id. Without ``opentelemetry`` installed this module
imports nothing from it and ``AVAILABLE`` is false.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..observer import Observer, RunOutcome

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # the otel extra is not installed: tracing stays off
    AVAILABLE = False
else:
    AVAILABLE = True

__all__ = ["AVAILABLE", "DISABLE_ENV", "Tracing", "configured"]

DISABLE_ENV = "LOCKGATE_TRACING"
"""Set to ``0`` (or ``off``) to keep tracing off even where a tracer provider is configured."""

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
SCOPE = "lockgate"


def configured() -> bool:
    """OpenTelemetry is installed and an SDK tracer provider has been set (not the API's default)."""
    if not AVAILABLE or os.environ.get(DISABLE_ENV, "").lower() in ("0", "off", "false", "no"):
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


class Tracing(Observer):
    """Spans through ``tracer_provider`` (default: the global one, looked up as each span starts)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        if not AVAILABLE:
            raise RuntimeError("tracing needs OpenTelemetry: pip install 'lockgate[otel]'")
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)

    def trace_parent(self) -> str | None:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    @contextlib.contextmanager
    def run_attempt(self, row: Mapping[str, Any], outcome: RunOutcome) -> Iterator[None]:
        # No recorded starter: a trace of its own, whatever span the task launching it was created under.
        parent = _parent_context(row.get("trace_id")) or otel_context.Context()
        attributes: dict[str, str | int] = {
            "lockgate.workflow": row["workflow"],
            "lockgate.run_id": row["id"],
            "lockgate.attempt": int(row["entries"]),
        }
        with self.tracer.start_as_current_span(
            f"run {row['workflow']}", context=parent, attributes=attributes, record_exception=False
        ) as span:
            try:
                yield
            finally:
                span.set_attribute("lockgate.outcome", outcome.value)
                if outcome.value == "failed":
                    span.set_status(trace.StatusCode.ERROR)

    @contextlib.contextmanager
    def step_attempt(self, workflow: str, run_id: str, step: str, attempt: int) -> Iterator[None]:
        attributes: dict[str, str | int] = {
            "lockgate.workflow": workflow,
            "lockgate.run_id": run_id,
            "lockgate.step": step,
            "lockgate.attempt": attempt,
        }
        # The step's function runs under this span, so spans it opens are its children.
        with self.tracer.start_as_current_span(
            f"step {step}", attributes=attributes, record_exception=True, set_status_on_exception=True
        ) as span:
            outcome = "ok"
            try:
                yield
            except Exception:
                outcome = "error"
                raise
            except BaseException:
                outcome = "stopped"
                raise
            finally:
                span.set_attribute("lockgate.outcome", outcome)


def _parent_context(recorded: str | None) -> otel_context.Context | None:
    """The starter's span as a remote parent, from a run's recorded ``trace_id``; ``None``: a new trace."""
    if not recorded:
        return None
    text = recorded.strip().lower()
    found = _TRACEPARENT.match(text)
    if found is not None:
        trace_id, span_id, flags = int(found[1], 16), int(found[2], 16), int(found[3], 16)
    elif _TRACE_ID.match(text):  # a bare trace id: join the trace under a parent nobody recorded
        trace_id, span_id, flags = int(text, 16), random.getrandbits(64) or 1, int(trace.TraceFlags.SAMPLED)
    else:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    parent = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))
