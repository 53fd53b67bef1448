"""Routing and versions with real ``lockgate serve`` processes, on both stores: a rolling deploy from
version 1 to version 2 (incompatible, then compatible) fails no run, and processes with other labels
each execute only the runs whose labels they have."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg

from .apps.routing import make_app
from .apps.waits import eventually

ROOT = Path(__file__).resolve().parents[1]


class Serve:
    """One ``lockgate serve tests.apps.routing:app`` process: its code version and tag from the environment."""

    def __init__(self, name: str, store: str, logs: Path, *args: str, version: str = "", compat: str = "") -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        env = {**os.environ, "ROUTING_VERSION": version, "ROUTING_COMPAT": compat, "ROUTING_TAG": name}
        command = [sys.executable, "-m", "lockgate.cli", "serve", "tests.apps.routing:app", "--store", store]
        command += ["--no-http", "--lease", "2s", "--grace", "1s", "--unroutable-after", "300ms", *args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def stop(self) -> None:
        """SIGTERM, and wait for a clean exit."""
        self.proc.send_signal(signal.SIGTERM)
        await eventually(lambda: self.proc.poll() is not None, timeout=30, what=f"{self.name} stopped")
        assert self.proc.returncode == 0, self.log()


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


async def _live(client: lg.Client, names: set[str]) -> bool:
    """Whether exactly the processes ``names`` are live workers (by their pids)."""
    status = await client.inspector.cluster_status()
    return {w.pid for w in status.workers if w.state == "live"} == names


def _spawn(serving: list[Serve], store: str, tmp_path: Path, name: str, *args: str, **env: str) -> Serve:
    s = Serve(name, store, tmp_path, *args, **env)
    serving.append(s)
    return s


async def _until_live(client: lg.Client, procs: list[Serve]) -> None:
    pids = {p.proc.pid for p in procs if p.proc.poll() is None}
    logs = "\n".join(p.log() for p in procs)
    await eventually(lambda: _live(client, pids), timeout=60, what=f"workers {[p.name for p in procs]} live\n{logs}")


async def _asleep(client: lg.Client, run_ids: list[str]) -> bool:
    found = [await client.get_run(r) for r in run_ids]
    return all(r.status == "running" and r.waiting_on == "signal" and r.owner is None for r in found)


@pytest.mark.parametrize("compatible", [False, True], ids=["incompatible", "compatible"])
async def test_a_rolling_deploy_fails_no_run(
    store_url: str, tmp_path: Path, serving: list[Serve], compatible: bool
) -> None:
    async with lg.Client(make_app("1"), store_url) as old, lg.Client(make_app("2"), store_url) as new:
        a = _spawn(serving, store_url, tmp_path, "a", version="1")
        b = _spawn(serving, store_url, tmp_path, "b", version="1")
        await _until_live(old, [a, b])
        handles = [await old.start("deploy.job", {"wait": True}) for _ in range(6)]  # stamped 1, asleep
        ids = [h.run_id for h in handles if h.run_id is not None]
        c = _spawn(serving, store_url, tmp_path, "c", version="2", compat="1" if compatible else "")  # it boots...
        await eventually(lambda: _asleep(old, ids), timeout=30, what="the v1 runs asleep")  # ...as they fall asleep
        await _until_live(old, [a, b, c])
        await a.stop()  # old workers go one by one while the runs wake
        for run_id in ids[:3]:
            await old.signal(run_id, "go", {})
        fresh = [await new.start("deploy.job", {}) for _ in range(4)]  # stamped 2
        if compatible:
            for h in handles[:3]:
                await h.result(timeout=60)
            await b.stop()  # no v1 code left for the others
        for run_id in ids[3:]:
            await old.signal(run_id, "go", {})
        for h in fresh:
            assert (await h.result(timeout=60))["finished_by"] == {"version": "2", "tag": "c"}
        results = [await h.result(timeout=60) for h in handles]
        assert all(r["started_by"]["version"] == "1" for r in results)
        finished = {(r["finished_by"]["version"], r["finished_by"]["tag"]) for r in results}
        if compatible:  # only v2 code was left when they woke: it took them
            assert finished <= {("1", "a"), ("1", "b"), ("2", "c")}, finished
            assert [r["finished_by"] for r in results[3:]] == [{"version": "2", "tag": "c"}] * 3
            return
        assert finished <= {("1", "a"), ("1", "b")}, finished  # never on the v2 worker
        await b.stop()
        late = await old.start("deploy.job", {})  # stamped 1, and no live code runs 1: it waits

        async def waiting() -> Any:
            run = await old.get_run(late.run_id or "")
            return run.waiting_version if run.waiting_on == "version" else None

        assert await eventually(waiting, timeout=30, what="the late v1 run waits") == {
            "version": "1",
            "offered": ["2"],
        }
        await eventually(lambda: "no live worker runs version '1'" in c.log(), what="the wait reported")
        d = _spawn(serving, store_url, tmp_path, "d", version="1")  # old code back: it takes the run
        assert (await late.result(timeout=60))["finished_by"] == {"version": "1", "tag": "d"}
        await asyncio.gather(c.stop(), d.stop())
        assert {r.status for r in await old.list_runs(limit=100)} == {"succeeded"}


async def test_each_process_executes_only_the_runs_its_labels_match(
    store_url: str, tmp_path: Path, serving: list[Serve]
) -> None:
    async with lg.Client(make_app(None), store_url) as client:
        gpu = _spawn(serving, store_url, tmp_path, "gpu", "--labels", "gpu=a100")
        us = _spawn(serving, store_url, tmp_path, "us", "--labels", "zone=us", "--workflows", "route.any,route.eu")
        await _until_live(client, [gpu, us])
        on_gpu = [await client.start("route.gpu", {}) for _ in range(4)]
        on_any = [await client.start("route.any", {}) for _ in range(4)]
        on_eu = [await client.start("route.eu", {}) for _ in range(3)]  # no live worker has zone=eu
        for h in on_gpu:
            assert await h.result(timeout=60) == "gpu"
        for h in on_any:
            found = await h.result(timeout=60)
            assert found["here"] in ("gpu", "us") and found["child"] == "gpu"

        def reported() -> bool:
            return "run(s) of route.eu due for" in gpu.log() + us.log()

        await eventually(reported, timeout=30, what="the eu runs reported")
        [gap] = (await client.inspector.cluster_status()).waiting
        assert (gap.workflow, gap.reason, gap.runs) == ("route.eu", "worker", 3)
        eu = _spawn(serving, store_url, tmp_path, "eu", "--labels", "zone=eu,gpu=h100", "--exclude", "route.any")
        for h in on_eu:
            assert await h.result(timeout=60) == "eu"
        await asyncio.gather(gpu.stop(), us.stop(), eu.stop())
