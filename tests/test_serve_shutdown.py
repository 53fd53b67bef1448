"""``lockgate serve`` at SIGTERM: the step attempts running finish within ``--grace`` and are journaled;
the run is released at once for the rest, and a restart does not run the finished step again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _count(folder: Path, name: str) -> int:
    path = folder / f"{name}.count"
    return len(path.read_text()) if path.exists() else 0


def _statuses(listed: str) -> list[str]:
    return [run["status"] for run in json.loads(listed)["runs"]]


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_lets_the_running_step_finish_and_journals_it(tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    effects.mkdir()
    store = f"sqlite:///{tmp_path}/lockgate.db"
    env = {**os.environ, "SIDE_EFFECTS": str(effects), "PYTHONPATH": str(ROOT), "SLOW_STEP_SECONDS": "2"}
    lockgate = [sys.executable, "-m", "lockgate.cli"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*lockgate, *args, "--store", store], env=env, capture_output=True, text=True, timeout=60)

    assert cli("migrate").returncode == 0
    started = cli("workflows", "start", "slow.job", "--app", "tests.apps.slow_steps:app", "--payload", '{"n": 4}')
    assert started.returncode == 0, started.stderr
    serve = [*lockgate, "serve", "tests.apps.slow_steps:app", "--store", store, "--no-http", "--lease", "2s"]
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*serve, "--grace", "20s"], env=env, stdout=out, stderr=out, text=True)
        try:
            _until(lambda: _count(effects, "slow-began") == 1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "Traceback" not in text
    assert _count(effects, "slow") == 1 and _count(effects, "second") == 0  # no new attempt began
    assert "1 step attempt(s) finished and journaled while stopping, 0 ended after the grace, 1 run(s) released" in text
    assert "slow.job" in text and " started" in text  # the line as the run started

    with open(log, "w") as out:  # a restart takes the run at once and replays the finished step
        proc = subprocess.Popen([*serve, "-q", "--log-format", "json"], env=env, stdout=out, stderr=out, text=True)
        try:
            _until(lambda: _count(effects, "second") == 1)
            _until(
                lambda: (
                    json.loads(cli("workflows", "list", "--format", "json").stdout)["runs"][0]["status"] == "succeeded"
                )
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert _count(effects, "slow-began") == 1 and _count(effects, "slow") == 1
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    assert not [line for line in lines if line["logger"] == "lockgate.runs"]  # -q


def _serve_and_stop(
    tmp_path: Path, workflow: str, began: str
) -> tuple[Path, Callable[..., Any], list[str], dict[str, str]]:
    """Start ``workflow`` and serve it; SIGTERM once its step began, with a grace shorter than the step."""
    effects = tmp_path / "effects"
    effects.mkdir()
    store = f"sqlite:///{tmp_path}/lockgate.db"
    env = {**os.environ, "SIDE_EFFECTS": str(effects), "PYTHONPATH": str(ROOT), "SLOW_STEP_SECONDS": "4"}
    lockgate = [sys.executable, "-m", "lockgate.cli"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*lockgate, *args, "--store", store], env=env, capture_output=True, text=True, timeout=60)

    assert cli("migrate").returncode == 0
    started = cli("workflows", "start", workflow, "--app", "tests.apps.slow_steps:app", "--payload", '{"n": 4}')
    assert started.returncode == 0, started.stderr
    serve = [*lockgate, "serve", "tests.apps.slow_steps:app", "--store", store, "--no-http", "--lease", "1s"]
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*serve, "--grace", "0.5s"], env=env, stdout=out, stderr=out, text=True)
        try:
            _until(lambda: _count(effects, began) == 1)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
    return log, cli, serve, {"took": f"{took}", **env}


@pytest.mark.slow
def test_a_step_in_a_thread_longer_than_the_grace_keeps_its_run_until_it_returns(tmp_path: Path) -> None:
    log, cli, serve, env = _serve_and_stop(tmp_path, "slow.job", "slow-began")
    effects = Path(env["SIDE_EFFECTS"])
    text = log.read_text()
    assert "Traceback" not in text
    # The process kept the run past the grace: it exited only once the step had returned, journaled.
    assert float(env["took"]) > 2.0 and _count(effects, "slow") == 1 and _count(effects, "second") == 0
    assert "1 step attempt(s) still running in a thread, which cannot be ended: their runs stay leased here" in text
    assert "1 step attempt(s) finished and journaled while stopping, 0 ended after the grace, 1 run(s) released" in text

    env.pop("took")
    with open(log, "w") as out:  # a restart replays the journaled step: it never runs twice
        proc = subprocess.Popen([*serve, "-q"], env=env, stdout=out, stderr=out, text=True)
        try:
            _until(
                lambda: (
                    json.loads(cli("workflows", "list", "--format", "json").stdout)["runs"][0]["status"] == "succeeded"
                )
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    assert _count(effects, "slow-began") == 1 and _count(effects, "slow") == 1 and _count(effects, "second") == 1


@pytest.mark.slow
def test_an_async_step_longer_than_the_grace_is_ended_before_its_run_is_released(tmp_path: Path) -> None:
    log, _, _, env = _serve_and_stop(tmp_path, "slow.async_job", "async-began")
    effects = Path(env["SIDE_EFFECTS"])
    text = log.read_text()
    assert "Traceback" not in text
    assert float(env["took"]) < 3.5  # ended at the grace, not after the 4 s step
    assert "1 step attempt(s) ended (cancelled); their runs are handed back and run again" in text
    assert "0 step attempt(s) finished and journaled while stopping, 1 ended after the grace, 1 run(s) released" in text
    assert _count(effects, "async") == 0  # the process has exited: the step ended there, unfinished


def test_a_corrupt_sqlite_file_stops_serve_with_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    store = f"sqlite:///{db}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lockgate = [sys.executable, "-m", "lockgate.cli"]
    assert subprocess.run([*lockgate, "migrate", "--store", store], env=env, capture_output=True).returncode == 0
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    for start in range(page, len(data), page):  # every page but the first (the header) is garbage now
        data[start : start + page] = bytes([0xA5]) * min(page, len(data) - start)
    db.write_bytes(bytes(data))
    done = subprocess.run(
        [*lockgate, "serve", "tests.apps.slow_steps:app", "--store", store, "--no-http", "--no-migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "corrupt" in done.stderr or "malformed" in done.stderr
    assert done.stderr.count("store unavailable") == 0
