"""Process-local metrics and OpenTelemetry traces, reported through the engine core's observer."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

import lockgate as lg
from lockgate.engine.tracing import Tracing, configured
from lockgate.http import create_app
from lockgate.observer import Observer

FAST = lg.Retry(max_attempts=2, base_delay=0.01, jitter=False)


class Job(BaseModel):
    n: int = 0
    fail_once: bool = False
    fail: bool = False


class Go(BaseModel):
    ok: bool = True


_failed_once: set[int] = set()


def work(n: int, fail_once: bool, fail: bool) -> int:
    if fail:
        raise ValueError(f"job {n} cannot be done")
    if fail_once and n not in _failed_once:
        _failed_once.add(n)
        raise ConnectionError("flaky")
    return n * 2


async def body(ctx: lg.Context, p: Job) -> int:
    return int(await ctx.step("work", work, p.n, p.fail_once, p.fail, retry=FAST))


async def waits(ctx: lg.Context, p: Job) -> int:
    first = int(await ctx.step("before", work, p.n, False, False))
    await ctx.wait_for_signal("go", Go)
    return first + int(await ctx.step("after", work, p.n, False, False))


def make_app() -> lg.App:
    app = lg.App()
    app.workflow(name="jobs")(body)
    app.workflow(name="waits")(waits)
    return app


@asynccontextmanager
async def scraper(engine: lg.Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine.client))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_a_known_workload(make_engine: Callable[..., lg.Engine]) -> None:
    _failed_once.clear()
    async with make_engine(make_app()) as engine, scraper(engine) as http:
        handles = [await engine.start("jobs", {"n": n}) for n in range(3)]
        handles.append(await engine.start("jobs", {"n": 10, "fail_once": True}))
        handles.append(await engine.start("jobs", {"n": 11, "fail": True}))
        for h in handles[:4]:
            await h.result(timeout=20)
        with pytest.raises(lg.RunFailed):
            await handles[4].result(timeout=20)
        scraped = await http.get("/metrics")
        assert scraped.status_code == 200
        got = samples(scraped.text)

    def at(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    assert at("lockgate_runs_started_total", workflow="jobs") == 5
    assert at("lockgate_runs_ended_total", workflow="jobs", status="succeeded") == 4
    assert at("lockgate_runs_ended_total", workflow="jobs", status="failed") == 1
    assert at("lockgate_run_attempts_total", workflow="jobs", outcome="succeeded") == 4
    assert at("lockgate_run_attempts_total", workflow="jobs", outcome="failed") == 1
    # 3 plain + 1 flaky (error then ok) + 1 failing (error twice: max_attempts=2)
    assert at("lockgate_step_attempts_total", workflow="jobs", step="work", outcome="ok") == 4
    assert at("lockgate_step_attempts_total", workflow="jobs", step="work", outcome="error") == 3
    assert at("lockgate_step_retries_total", workflow="jobs", step="work") == 2
    assert at("lockgate_step_duration_seconds_count", workflow="jobs", step="work") == 7
    assert at("lockgate_step_duration_seconds_bucket", workflow="jobs", step="work", le="+Inf") == 7
    assert at("lockgate_commit_batch_size_count") >= 1
    assert at("lockgate_commit_batch_size_sum") >= at("lockgate_commit_batch_size_count")
    assert at("lockgate_lease_takeovers_total", workflow="jobs") == 0
    assert not any(name == "lockgate_store_errors_total" for name, _ in got)  # no error: no series
    assert at("lockgate_cluster_reporter") == 1
    assert at("lockgate_runs", workflow="jobs", status="succeeded") == 4  # the store's gauges beside them


async def test_a_parked_run_is_two_attempts_one_end(make_engine: Callable[..., lg.Engine]) -> None:
    async with make_engine(make_app()) as engine, scraper(engine) as http:
        handle = await engine.start("waits", {"n": 1})
        await _until_parked(engine, str(handle.run_id))
        await engine.signal(str(handle.run_id), "go", {"ok": True})
        assert await handle.result(timeout=20) == 4
        got = samples((await http.get("/metrics")).text)
    assert got[("lockgate_run_attempts_total", (("outcome", "parked"), ("workflow", "waits")))] == 1
    assert got[("lockgate_run_attempts_total", (("outcome", "succeeded"), ("workflow", "waits")))] == 1
    assert got[("lockgate_runs_ended_total", (("status", "succeeded"), ("workflow", "waits")))] == 1


async def _until_parked(engine: lg.Engine, run_id: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while loop.time() < deadline:
        run = await engine.inspector.run(run_id)
        if run.waiting_on == "signal":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never parked")


async def test_metrics_are_per_engine_and_off_until_asked(make_engine: Callable[..., lg.Engine]) -> None:
    async with make_engine(make_app()) as engine:
        assert engine.core.observer is None and engine.store.observer is None  # nothing paid until asked
        metrics = engine.core.metrics()
        assert engine.core.metrics() is metrics and engine.store.observer is metrics
        await (await engine.start("jobs", {"n": 1})).result(timeout=20)
        other = lg.Client(make_app(), engine.store.url)
        assert other.core.metrics().registry is not metrics.registry
    assert metrics.registry.get_sample_value("lockgate_runs_started_total", {"workflow": "jobs"}) == 1


async def test_store_errors_are_counted(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/lockgate.db"
    async with lg.Engine(make_app(), url, poll_interval=0.05) as engine:
        metrics = engine.core.metrics()
        with sqlite3.connect(f"{tmp_path}/lockgate.db") as raw:
            raw.execute("ALTER TABLE lockgate_runs RENAME TO lockgate_runs_gone")
        with pytest.raises(lg.StoreError):
            await engine.inspector.runs()
        assert (metrics.registry.get_sample_value("lockgate_store_errors_total", {"kind": "read"}) or 0) >= 1
        with sqlite3.connect(f"{tmp_path}/lockgate.db") as raw:
            raw.execute("ALTER TABLE lockgate_runs_gone RENAME TO lockgate_runs")


# -- traces ------------------------------------------------------------------------------------


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _named(finished: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name.startswith(prefix)]


async def test_run_and_step_spans_continue_the_starters_trace(
    make_engine: Callable[..., lg.Engine], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    _failed_once.clear()
    async with make_engine(make_app()) as engine:
        engine.core.observe(Tracing(provider))
        web = provider.get_tracer("web")
        with web.start_as_current_span("POST /orders") as request:
            handle = await engine.start("jobs", {"n": 20, "fail_once": True})
        assert await handle.result(timeout=20) == 40
        run = await engine.inspector.run(str(handle.run_id))
    ctx = request.get_span_context()
    assert run.trace_id == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"  # recorded
    finished = exporter.get_finished_spans()
    [run_span] = _named(finished, "run jobs")
    assert run_span.parent is not None and run_span.parent.span_id == ctx.span_id
    assert run_span.context is not None and run_span.context.trace_id == ctx.trace_id
    assert run_span.attributes is not None
    assert dict(run_span.attributes) == {
        "lockgate.workflow": "jobs",
        "lockgate.run_id": handle.run_id,
        "lockgate.attempt": 1,
        "lockgate.outcome": "succeeded",
    }
    steps = sorted(_named(finished, "step work"), key=lambda s: int((s.attributes or {})["lockgate.attempt"]))
    assert [(s.attributes or {})["lockgate.outcome"] for s in steps] == ["error", "ok"]
    for attempt, step in enumerate(steps, 1):
        assert step.parent is not None and step.parent.span_id == run_span.context.span_id
        assert (step.attributes or {})["lockgate.step"] == "work"
        assert (step.attributes or {})["lockgate.attempt"] == attempt
        assert (step.attributes or {})["lockgate.run_id"] == handle.run_id


async def test_each_entry_of_a_parked_run_is_a_span_under_the_starter(
    make_engine: Callable[..., lg.Engine], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with make_engine(make_app()) as engine:
        engine.core.observe(Tracing(provider))
        with provider.get_tracer("web").start_as_current_span("POST /approvals") as request:
            handle = await engine.start("waits", {"n": 2})
        await _until_parked(engine, str(handle.run_id))
        await engine.signal(str(handle.run_id), "go", {"ok": True})
        assert await handle.result(timeout=20) == 8
    finished = exporter.get_finished_spans()
    runs = sorted(_named(finished, "run waits"), key=lambda s: int((s.attributes or {})["lockgate.attempt"]))
    assert [(s.attributes or {})["lockgate.outcome"] for s in runs] == ["parked", "succeeded"]
    assert all(s.parent is not None and s.parent.span_id == request.get_span_context().span_id for s in runs)
    [before] = _named(finished, "step before")
    [after] = _named(finished, "step after")
    assert before.parent is not None and runs[0].context is not None
    assert before.parent.span_id == runs[0].context.span_id
    assert after.parent is not None and runs[1].context is not None
    assert after.parent.span_id == runs[1].context.span_id


async def test_a_start_outside_any_span_opens_a_new_trace(
    make_engine: Callable[..., lg.Engine], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with make_engine(make_app()) as engine:
        engine.core.observe(Tracing(provider))
        handle = await engine.start("jobs", {"n": 3})
        await handle.result(timeout=20)
        bare = await engine.start("jobs", {"n": 4}, trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
        await bare.result(timeout=20)
        assert (await engine.inspector.run(str(handle.run_id))).trace_id is None
    first, second = sorted(_named(exporter.get_finished_spans(), "run jobs"), key=lambda s: s.start_time or 0)
    assert first.parent is None
    assert second.context is not None and second.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736


def test_tracing_is_off_without_a_configured_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not configured()  # the suite never sets the global provider: the API's default is not "configured"
    monkeypatch.setenv("LOCKGATE_TRACING", "0")
    assert not configured()
    assert Observer().trace_parent() is None


_release: dict[str, asyncio.Event] = {}  # made in the test's own event loop


async def hold_step() -> str:
    await _release["event"].wait()
    return "done"


async def held(ctx: lg.Context, p: Job) -> str:
    return str(await ctx.step("hold", hold_step))


async def test_a_lease_takeover_is_counted_where_the_run_is_taken(tmp_path: Path) -> None:
    _release["event"] = asyncio.Event()
    url = f"sqlite:///{tmp_path}/lockgate.db"
    app = lg.App()
    app.workflow(name="held")(held)
    async with lg.Engine(app, url, poll_interval=0.05, lease="30s") as first:
        handle = await first.start("held", {})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while str(handle.run_id) not in first.dispatcher.executions:
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        async with lg.Engine(app, url, poll_interval=0.05, lease="30s") as second:
            metrics = second.core.metrics()
            with sqlite3.connect(f"{tmp_path}/lockgate.db") as raw:  # the first holder's lease runs out
                raw.execute("UPDATE lockgate_runs SET lease_until = 0 WHERE id = ?", (handle.run_id,))
            second.wake()
            while str(handle.run_id) not in second.dispatcher.executions:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            _release["event"].set()
            assert await handle.result(timeout=20) == "done"
            assert metrics.registry.get_sample_value("lockgate_lease_takeovers_total", {"workflow": "held"}) == 1
            assert metrics.registry.get_sample_value(
                "lockgate_runs_ended_total", {"workflow": "held", "status": "succeeded"}
            ) == 1


async def test_a_client_started_run_and_a_blocking_run_keep_their_starters(
    make_engine: Callable[..., lg.Engine], store_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("web")
    async with make_engine(make_app()) as engine, lg.Client(make_app(), store_url) as client:
        engine.core.observe(Tracing(provider))
        client.core.observe(Tracing(provider))  # the web process: it only starts
        with tracer.start_as_current_span("from the web") as web:
            started = await client.start("jobs", {"n": 5})
        with tracer.start_as_current_span("blocking") as blocking:
            assert await engine.run("jobs", {"n": 6}) == 12
        assert await started.result(timeout=20) == 10
    finished = exporter.get_finished_spans()
    parents = {(s.attributes or {})["lockgate.run_id"]: s.parent for s in _named(finished, "run jobs")}
    assert parents[started.run_id] is not None
    assert parents[started.run_id].span_id == web.get_span_context().span_id  # type: ignore[union-attr]
    [blocked] = [rid for rid in parents if rid != started.run_id]
    assert parents[blocked] is not None
    assert parents[blocked].span_id == blocking.get_span_context().span_id  # type: ignore[union-attr]


async def test_a_replica_that_does_not_report_the_store_serves_only_its_own(
    make_engine: Callable[..., lg.Engine],
) -> None:
    async with make_engine(make_app()) as engine:
        reporting = [False]
        transport = httpx.ASGITransport(app=create_app(engine.client, cluster_metrics=lambda: reporting[0]))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            await (await engine.start("jobs", {"n": 1})).result(timeout=20)
            quiet = samples((await http.get("/metrics")).text)
            reporting[0] = True
            loud = samples((await http.get("/metrics")).text)
    assert quiet[("lockgate_cluster_reporter", ())] == 0
    assert not any(name in ("lockgate_runs", "lockgate_workers") for name, _ in quiet)
    assert quiet[("lockgate_runs_started_total", (("workflow", "jobs"),))] == 1  # its own metrics all the same
    assert loud[("lockgate_cluster_reporter", ())] == 1
    assert loud[("lockgate_runs", (("status", "succeeded"), ("workflow", "jobs")))] == 1


NO_OTEL = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from pydantic import BaseModel
import lockgate as lg
from lockgate.engine import tracing
assert not tracing.AVAILABLE and not tracing.configured()
app = lg.App()

class P(BaseModel):
    n: int = 1

@app.workflow(name="w")
async def w(ctx: lg.Context, p: P) -> int:
    return int(await ctx.step("s", lambda: p.n))

async def main() -> None:
    async with lg.Engine(app, sys.argv[1]) as engine:
        assert engine.core.observer is None
        assert await engine.run("w", {}) == 1
        try:
            tracing.Tracing()
        except RuntimeError as exc:
            assert "lockgate[otel]" in str(exc)
        else:
            raise AssertionError("Tracing() without OpenTelemetry")

asyncio.run(main())
print("ok")
"""


def test_without_the_otel_extra_nothing_is_traced(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL, f"sqlite:///{tmp_path}/x.db"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


async def parent(ctx: lg.Context, p: Job) -> int:
    child = await ctx.start_child("jobs", {"n": p.n})
    return int(await ctx.wait_child(child)) + 1


async def test_a_childs_run_span_is_under_its_parents_run(
    make_engine: Callable[..., lg.Engine], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    app = make_app()
    app.workflow(name="parent")(parent)
    async with make_engine(app) as engine:
        engine.core.observe(Tracing(provider))
        with provider.get_tracer("web").start_as_current_span("POST /parents") as request:
            handle = await engine.start("parent", {"n": 3})
        assert await handle.result(timeout=20) == 7
    finished = exporter.get_finished_spans()
    parents = _named(finished, "run parent")
    [child] = _named(finished, "run jobs")
    assert all(s.parent is not None and s.parent.span_id == request.get_span_context().span_id for s in parents)
    first = min(parents, key=lambda s: int((s.attributes or {})["lockgate.attempt"]))
    assert first.context is not None and child.parent is not None
    assert child.parent.span_id == first.context.span_id  # started by the parent's first entry
    assert child.context is not None and child.context.trace_id == request.get_span_context().trace_id
