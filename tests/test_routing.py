"""Worker routing and version-aware claiming, in one process: engines with other labels, selections and
code versions share one store; each run is executed only where its workflow and version are taken."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from click.testing import CliRunner

import lockgate as lg
from lockgate.cli import cli
from lockgate.http.metrics import StoreMetrics
from lockgate.inspect import DoctorSettings
from lockgate.routing import Labels, Selection, taken

from .apps.routing import Job, make_app
from .apps.waits import eventually


def test_labels_parse_and_refuse_empty_keys_and_values() -> None:
    assert dict(Labels.parse("gpu=a100, zone=eu")) == {"gpu": "a100", "zone": "eu"}
    assert Labels.parse("") == Labels()
    assert Labels(gpu="a100").satisfies({}) and not Labels().satisfies({"gpu": "a100"})
    for bad in ("gpu", "gpu=", "=a100", "gpu=a100,gpu=h100"):
        with pytest.raises(lg.InvalidArgument, match="labels"):
            Labels.parse(bad)
    with pytest.raises(lg.InvalidArgument, match="non-empty string value"):
        Labels(gpu="")
    with pytest.raises(lg.InvalidArgument, match="non-empty string"):
        Labels({"": "x"})


def test_a_selection_names_only_what_the_app_defines() -> None:
    app = make_app(None)
    defs = app.definitions()
    assert taken(defs, app.queues, Selection()) == ["deploy.job", "route.any"]  # no label: nothing routed
    assert taken(defs, app.queues, Selection.of("gpu=a100", exclude="deploy.job")) == ["route.gpu", "route.any"]
    assert taken(defs, app.queues, Selection.of("gpu=a100,zone=eu", "route.eu,route.gpu")) == ["route.gpu", "route.eu"]
    with pytest.raises(lg.UnknownWorkflow, match=r"route\.nope"):
        taken(defs, app.queues, Selection.of(None, "route.nope"))
    with pytest.raises(lg.UnknownWorkflow, match=r"route\.nope"):
        taken(defs, app.queues, Selection.of(None, None, "route.nope"))
    with pytest.raises(lg.InvalidArgument, match="no queue 'slow'"):
        taken(defs, app.queues, Selection.of(None, "queue:slow"))


async def test_an_engine_refuses_a_workflow_its_app_does_not_define_at_boot(make_engine: Any) -> None:
    with pytest.raises(lg.UnknownWorkflow, match=r"route\.nope"):
        async with make_engine(make_app(None), workflows=["route.nope"]):
            pass
    with pytest.raises(lg.InvalidArgument, match="labels"):
        make_engine(make_app(None), labels="gpu")


async def test_serve_refuses_bad_labels_and_unknown_workflows() -> None:
    runner = CliRunner()
    for args, hint in (
        (["--labels", "gpu="], "--labels"),
        (["--workflows", "route.gpu,route.nope"], "--workflows"),
        (["--exclude", "route.nope"], "--exclude"),
    ):
        result = runner.invoke(cli, ["serve", "tests.apps.routing:app", "--store", "sqlite:///:memory:", *args])
        assert result.exit_code == 2, result.output
        assert hint in result.output and ("route.nope" in result.output or "labels" in result.output)


async def test_each_run_is_executed_by_an_engine_that_takes_it(make_engine: Any) -> None:
    plain = make_engine(make_app(None, tag="plain"), worker_id="w-plain")
    gpu = make_engine(make_app(None, tag="gpu"), labels={"gpu": "a100"}, workflows=["route.gpu"], worker_id="w-gpu")
    async with plain, gpu:
        handles = [await plain.start("route.gpu", {}) for _ in range(5)]
        handles += [await gpu.start("route.any", {}) for _ in range(5)]
        results = [await h.result(timeout=30) for h in handles]
        assert results[:5] == ["gpu"] * 5
        assert results[5:] == [{"here": "plain", "child": "gpu"}] * 5  # the child routed by its own workflow
        assert await plain.run("route.gpu", {}) == "gpu"  # a blocking start here waits for the gpu worker
        cluster = await plain.inspector.cluster_status()
        offers = {w.id: (w.labels, sorted(w.offers)) for w in cluster.workers if w.state == "live"}
        assert offers == {
            "w-plain": ({}, ["deploy.job", "route.any"]),
            "w-gpu": ({"gpu": "a100"}, ["route.gpu"]),
        }
        assert cluster.waiting == []


async def test_a_run_no_live_worker_takes_is_reported_then_taken(
    make_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lockgate.routing")
    async with make_engine(make_app(None, tag="plain"), unroutable_after="200ms") as plain:
        handle = await plain.start("route.eu", {})

        async def reported() -> Any:
            gaps = (await plain.inspector.cluster_status()).waiting
            return [g for g in gaps if g.reported]

        [gap] = await eventually(reported, what="the eu run reported")
        assert (gap.workflow, gap.reason, gap.runs) == ("route.eu", "worker", 1)
        await eventually(lambda: "route.eu" in caplog.text, what="the log line")
        assert "no live worker takes this workflow" in caplog.text
        doctor = {f.check: f for f in (await plain.inspector.doctor(DoctorSettings(worker_grace=0.1))).findings}
        assert doctor["routing"].status == "problem" and "route.eu (1)" in doctor["routing"].summary
        metrics = StoreMetrics(plain.inspector)
        text = (await metrics.render()).decode()
        assert 'lockgate_runs_waiting_worker{reason="worker",version="",workflow="route.eu"} 1.0' in text
        assert 'lockgate_worker_offers{version="",workflow="route.any"} 1.0' in text
        async with make_engine(make_app(None, tag="eu"), labels="zone=eu"):
            assert await handle.result(timeout=30) == "eu"


async def test_a_run_with_a_patch_the_code_lacks_is_not_claimed(make_engine: Any, store_url: str) -> None:
    patched = lg.App()
    unpatched = lg.App()
    for app, patches in ((patched, ["p1"]), (unpatched, [])):

        @app.workflow(name="patchy", patches=patches)
        async def patchy(ctx: lg.Context, p: Job) -> str:
            return "new" if ctx.patch("p1") else "old"

    async with lg.Client(patched, store_url) as client:
        handle = await client.start("patchy", {})
    async with make_engine(unpatched, unroutable_after="100ms") as engine:
        waiting = await eventually(lambda: _waiting_version(engine, handle.run_id), what="waits for a version")
        assert waiting.waiting_version == {"version": None, "offered": [""]}
    async with make_engine(patched) as engine:
        assert await engine.result(handle.run_id, timeout=30) == "new"


async def _waiting_version(engine: lg.Engine, run_id: str | None) -> lg.RunInfo | None:
    assert run_id is not None
    run = await engine.get_run(run_id)
    return run if run.waiting_on == "version" else None


async def test_migrate_version_refuses_bad_input_and_writes_nothing(make_engine: Any) -> None:
    async with make_engine(make_app("1", tag="v1"), workflows=["route.any"]) as engine:  # takes no deploy.job
        handle = await engine.start("deploy.job", {})
        run_id = handle.run_id
        assert run_id is not None
        for kwargs, match in (
            ({"run_id": run_id, "workflow": "deploy.job", "from_version": "1"}, "one run id"),
            ({}, "one run id"),
            ({"workflow": "deploy.job"}, "from_version"),
            ({"workflow": "nope", "from_version": "1"}, "nope"),
            ({"run_id": run_id, "from_version": "0"}, "stamped '1', not '0'"),
            ({"run_id": run_id, "to_version": "1"}, "stamped '1' already"),
        ):
            with pytest.raises((lg.InvalidArgument, lg.UnknownWorkflow), match=match):
                await engine.migrate_version(**{"to_version": "2", **kwargs})
        with pytest.raises(lg.UnknownRun):
            await engine.migrate_version("run_nope", to_version="2")
        dry = await engine.migrate_version(workflow="deploy.job", from_version="1", to_version="2")
        assert (dry.committed, [i.run_id for i in dry.items]) == (False, [run_id])
        assert (await engine.get_run(run_id)).version == "1"
        done = await engine.migrate_version(workflow="deploy.job", from_version="1", to_version="2", commit=True)
        assert [i.outcome for i in done.items] == ["succeeded"]
        assert (await engine.get_run(run_id)).version == "2"
