"""Crash safety with real processes: SIGKILL mid-step, dead-worker takeover, crash loops.

Worker processes run ``python -m tests.apps.runner`` over ``tests/apps/crashy.py``; each
step execution appends a line to a side-effect file, so the counts below are what really
ran, across processes. Runners hold leases for an hour: a run that moves on within the
test's deadline was released because its process died, not because a lease ran out.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store import runs
from lockgate.store import workers as store_workers

from .apps import crashy
from .apps.waits import eventually

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


class Workers:
    """Worker subprocesses on one store, with a side-effect file and flag directory.

    ``app``: the app the workers run (``tests.apps.runner``'s own by default); ``env``: more of their
    environment (a key, say)."""

    app: str | None = None
    env: ClassVar[dict[str, str]] = {}

    def __init__(self, store_url: str, tmp: Path) -> None:
        self.store_url = store_url
        self.effects = tmp / "effects.log"
        self.flags = tmp / "flags"
        self.flags.mkdir()
        self.logs = tmp / "workers"
        self.logs.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, *, max_reclaims: int = 3, lease: str = "1h") -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            **self.env,
            "LOCKGATE_TEST_EFFECTS": str(self.effects),
            "LOCKGATE_TEST_FLAGS": str(self.flags),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
        }
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        cmd = [sys.executable, "-m", "tests.apps.runner", "--store", self.store_url]
        cmd += ["--app", self.app] if self.app is not None else []
        cmd += ["--max-reclaims", str(max_reclaims), "--lease", lease]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def raise_flag(self, name: str) -> None:
        crashy.flag(name, self.flags).touch()

    def count(self, line: str) -> int:
        return crashy.count(line, self.effects)

    def output(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.logs.iterdir()))

    async def until(self, probe: Any, what: str, timeout: float = 60.0) -> Any:
        try:
            return await eventually(probe, timeout=timeout, interval=0.05, what=what)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nworker output:\n{self.output()}") from None

    async def result(self, client: lg.Client, run_id: str, timeout: float = 60.0) -> Any:
        """The run's result; a run that does not end in time fails with what the workers printed."""
        try:
            return await client.result(run_id, timeout=timeout)
        except lg.ResultTimeout as exc:
            run = await client.get_run(run_id)
            held = f"owner {run.owner}, entries {run.entries}, reclaims {run.reclaim_count}"
            raise TimeoutError(f"{exc} ({held})\nworker output:\n{self.output()}") from None

    async def exited(self, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
        try:
            code = await asyncio.to_thread(proc.wait, timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"worker {proc.pid} did not exit\n{self.output()}") from None
        if code == 1:  # an error, not an exit a test asks for: what it printed shows with the failure
            print(f"worker {proc.pid} exited 1:\n{self.output()}")
        return code

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        # SIGKILL through the Popen: it never signals a pid it has reaped already, which another process may
        # hold by now (a test suite starts thousands of processes).
        proc.kill()
        proc.wait(timeout=30)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(proc)


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[Workers]:
    with Workers(store_url, tmp_path) as pool:
        yield pool


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[lg.Client]:
    async with lg.Client(crashy.app, store_url, poll_interval=0.05) as c:
        yield c


async def _journal(client: lg.Client, run_id: str) -> list[tuple[str, str]]:
    return [(s.key, s.status) for s in await client.steps(run_id)]


async def _status(client: lg.Client, run_id: str, status: str) -> lg.RunInfo | None:
    run = await client.get_run(run_id)
    return run if run.status == status else None


def _types(events: list[lg.EventInfo]) -> list[str]:
    return [e.type for e in events if e.type.startswith("run-")]


async def test_sigkill_mid_step_reruns_only_the_interrupted_step(workers: Workers, client: lg.Client) -> None:
    h = await client.start("crash.steps", {"tag": "r1"})
    assert h.run_id is not None
    first = workers.spawn()
    await workers.until(lambda: workers.count("r1:two") == 1, "step two entered")
    assert await _journal(client, h.run_id) == [("one#0", "completed")]
    workers.kill(first)

    held = await client.get_run(h.run_id)
    assert (held.status, held.entries) == ("running", 1)
    assert held.owner is not None  # the dead process still holds an hour-long lease
    workers.raise_flag("r1.release-two")
    workers.spawn()
    assert await workers.result(client, h.run_id) == "123"

    assert (workers.count("r1:one"), workers.count("r1:two"), workers.count("r1:three")) == (1, 2, 1)
    assert workers.count("r1:body") == 2
    run = await client.get_run(h.run_id)
    assert (run.entries, run.reclaim_count, run.owner) == (2, 1, None)
    assert _types(await client.events(h.run_id)) == ["run-started", "run-succeeded"]
    assert await _journal(client, h.run_id) == [
        ("one#0", "completed"),
        ("two#0", "completed"),
        ("three#0", "completed"),
    ]


async def test_a_clean_shutdown_mid_step_releases_the_run_without_counting_a_crash(
    workers: Workers, client: lg.Client
) -> None:
    h = await client.start("crash.steps", {"tag": "g1"})
    assert h.run_id is not None
    first = workers.spawn()
    await workers.until(lambda: workers.count("g1:two") == 1, "step two entered")
    first.send_signal(signal.SIGTERM)
    released = await workers.until(lambda: _unowned(client, h.run_id), "run released by the closing worker")
    assert released.status == "running"
    workers.raise_flag("g1.release-two")  # lets the closing worker's step thread end, so the process can exit
    assert await workers.exited(first) == 0
    workers.spawn()
    assert await workers.result(client, h.run_id) == "123"
    run = await client.get_run(h.run_id)
    assert (run.entries, run.reclaim_count) == (2, 0)  # a shutdown is not a crash
    assert (workers.count("g1:one"), workers.count("g1:two"), workers.count("g1:three")) == (1, 2, 1)


async def _unowned(client: lg.Client, run_id: str) -> lg.RunInfo | None:
    run = await client.get_run(run_id)
    return run if run.owner is None else None


async def test_a_step_result_is_written_while_the_body_waits_on_something_else(
    workers: Workers, client: lg.Client
) -> None:
    """A completed step's entry waits for the run's next write to carry it, but not longer than ``HOLD``:
    a body that goes on to wait for something outside the engine does not leave its step undone."""
    h = await client.start("crash.after_step", {"tag": "d1"})
    assert h.run_id is not None
    first = workers.spawn()
    await workers.until(lambda: workers.count("d1:after-one") == 1, "body past step one")
    await workers.until(
        lambda: _journal_is(client, h.run_id, [("one#0", "completed")]), "step one's entry written alone"
    )
    workers.kill(first)  # the body is past step one and nothing else was written

    workers.raise_flag("d1.release-body")
    workers.spawn()
    assert await workers.result(client, h.run_id) == "13"
    assert workers.count("d1:one") == 1  # replayed from the journal, not run again
    assert workers.count("d1:after-one") == 2
    assert workers.count("d1:three") == 1


async def _journal_is(client: lg.Client, run_id: str, expected: list[tuple[str, str]]) -> bool:
    return await _journal(client, run_id) == expected


async def _live_workers(client: lg.Client, n: int) -> bool:
    rows = await client.store.read(store_workers.list_workers)
    return len([w for w in rows if w["stopped_at"] is None]) == n


async def test_a_running_worker_takes_over_when_another_dies(workers: Workers, client: lg.Client) -> None:
    """Failover without a restart: the survivor claims the run once the dead worker's lease runs out."""
    h = await client.start("crash.steps", {"tag": "f1"})
    assert h.run_id is not None
    first = workers.spawn(lease="2s")
    await workers.until(lambda: workers.count("f1:two") == 1, "step two entered")
    workers.spawn(lease="2s")
    await workers.until(lambda: _live_workers(client, 2), "second worker registered")
    workers.kill(first)
    workers.raise_flag("f1.release-two")
    assert await workers.result(client, h.run_id) == "123"
    assert (workers.count("f1:one"), workers.count("f1:two"), workers.count("f1:three")) == (1, 2, 1)
    run = await client.get_run(h.run_id)
    assert (run.entries, run.reclaim_count) == (2, 1)


async def test_a_dead_local_worker_is_released_at_boot_a_live_one_is_not(
    env_factory: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_TEST_EFFECTS", str(tmp_path / "effects.log"))
    monkeypatch.setenv("LOCKGATE_TEST_FLAGS", str(tmp_path))
    for tag in ("dead", "alive"):
        crashy.flag(f"{tag}.release-two", tmp_path).touch()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)  # its pid names no process now
    host = socket.gethostname()

    env = env_factory(crashy.app)
    async with lg.Client(crashy.app, store_url, clock=env.clock) as setup:
        run_ids = {}
        for tag, worker, pid in (("dead", "wkr_dead_here", gone.pid), ("alive", "wkr_alive_here", os.getppid())):
            h = await setup.start("crash.steps", {"tag": tag})
            now = env.clock.now()
            await setup.store.write(store_workers.register_worker, worker, host, pid, now)
            [claimed] = await setup.store.write(runs.claim_runs, worker, now, now + 3600, 1, ["crash.steps"])
            assert claimed["id"] == h.run_id
            run_ids[tag] = h.run_id

    async with env:
        assert await env.engine.result(run_ids["dead"], timeout=30) == "123"
        await env.settle()
        alive = await env.engine.get_run(run_ids["alive"])
        assert (alive.status, alive.owner) == ("running", "wkr_alive_here")
        dead = await env.engine.get_run(run_ids["dead"])
        assert (dead.entries, dead.reclaim_count) == (2, 1)  # the dead worker's entry counts as unfinished
        workers = {w["id"]: w for w in await env.engine.store.read(store_workers.list_workers)}
        assert workers["wkr_dead_here"]["stopped_at"] is not None
        assert workers["wkr_alive_here"]["stopped_at"] is None
    assert crashy.count("alive:one", tmp_path / "effects.log") == 0


async def test_a_run_of_a_worker_elsewhere_is_taken_over_after_its_lease(
    env_factory: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCKGATE_TEST_EFFECTS", str(tmp_path / "effects.log"))
    monkeypatch.setenv("LOCKGATE_TEST_FLAGS", str(tmp_path))
    crashy.flag("far.release-two", tmp_path).touch()
    env = env_factory(crashy.app)
    async with lg.Client(crashy.app, store_url, clock=env.clock) as setup:
        h = await setup.start("crash.steps", {"tag": "far"})
        now = env.clock.now()
        await setup.store.write(store_workers.register_worker, "wkr_elsewhere", "elsewhere.invalid", os.getpid(), now)
        [claimed] = await setup.store.write(runs.claim_runs, "wkr_elsewhere", now, now + 60, 1, ["crash.steps"])
        assert claimed["id"] == h.run_id

    async with env:
        await env.settle()
        await env.advance("59s")
        run = await env.engine.get_run(h.run_id)
        assert (run.status, run.owner, run.entries) == ("running", "wkr_elsewhere", 1)
        assert crashy.count("far:body", tmp_path / "effects.log") == 0
        await env.advance("2s")
        assert await env.engine.result(h.run_id, timeout=30) == "123"
        run = await env.engine.get_run(h.run_id)
        assert (run.entries, run.reclaim_count) == (2, 1)
    assert crashy.count("far:one", tmp_path / "effects.log") == 1


async def test_a_crash_loop_suspends_the_run_and_resume_gives_a_fresh_budget(
    workers: Workers, client: lg.Client
) -> None:
    h = await client.start("crash.loop", {"tag": "L", "die_times": 3})
    assert h.run_id is not None
    for n in (1, 2):
        proc = workers.spawn(max_reclaims=2)
        assert await workers.exited(proc) == 17
        assert workers.count("L:boom") == n
    survivor = workers.spawn(max_reclaims=2)
    run = await workers.until(lambda: _status(client, h.run_id, "suspended"), "run suspended as crash-looped")
    assert run.error_tag == "WorkflowCrashLooped"
    assert "max_reclaims=2" in (run.error_message or "")
    events = await client.events(h.run_id)
    [looped] = [e for e in events if e.type == "run-crashlooped"]
    assert looped.data == {"reclaims": 2}
    assert _types(events)[-2:] == ["run-crashlooped", "run-suspended"]
    assert workers.count("L:body") == 2  # the third claim suspended the run instead of entering it
    assert survivor.poll() is None

    await client.resume(h.run_id)  # a fresh budget: one more crash is tolerated
    assert await workers.exited(survivor) == 17
    assert workers.count("L:boom") == 3
    workers.spawn(max_reclaims=2)
    assert await workers.result(client, h.run_id) == "boom"
    assert workers.count("L:body") == 4
    events = await client.events(h.run_id)
    assert _types(events).count("run-crashlooped") == 1
    assert _types(events)[-2:] == ["run-resumed", "run-succeeded"]


async def test_a_clean_park_resets_the_crash_count(workers: Workers, client: lg.Client) -> None:
    h = await client.start("crash.park_between", {"tag": "P", "die_times": 1})
    assert h.run_id is not None
    assert await workers.exited(workers.spawn(max_reclaims=2)) == 17  # dies in step a
    assert await workers.exited(workers.spawn(max_reclaims=2)) == 17  # a passes, parks, dies in step b
    assert (workers.count("P:a"), workers.count("P:b")) == (2, 1)
    workers.spawn(max_reclaims=2)  # two deaths in a row without the park would have crash-looped
    assert await workers.result(client, h.run_id) == "ok"
    assert (workers.count("P:a"), workers.count("P:b"), workers.count("P:body")) == (2, 2, 4)
    assert "run-crashlooped" not in _types(await client.events(h.run_id))


class Flaky(BaseModel):
    tag: str


class Reshaped(BaseModel):
    tag: str
    region: str  # a field the runs started before it was added do not have


class Go(BaseModel):
    ok: bool = True


async def test_a_lease_lapsing_in_engine_time_does_not_reenter_a_running_body(env_factory: Any) -> None:
    """A retry backoff longer than the lease, under a clock that jumps: one entry, one retry."""
    calls: list[str] = []
    app = lg.App()

    def flaky() -> str:
        calls.append("flaky")
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    @app.workflow(name="crash.backoff")
    async def backoff(ctx: lg.Context, p: Flaky) -> str:
        return str(await ctx.step("flaky", flaky, retry=lg.Retry(max_attempts=3, base_delay="10m", jitter=False)))

    async with env_factory(app) as env:  # the default lease, 15s, is far shorter than the backoff
        h = await env.engine.start("crash.backoff", {"tag": "b"})
        await env.settle()
        await env.advance("10m")
        assert await env.engine.result(h.run_id, timeout=10) == "ok"
        run = await env.engine.get_run(h.run_id)
        assert (run.entries, run.reclaim_count) == (1, 0)
        assert calls == ["flaky", "flaky"]
        attempts = [(a.attempt, a.status) for a in await env.engine.attempts(h.run_id)]
        assert attempts == [(1, "failed"), (2, "completed")]


async def test_a_run_whose_entry_keeps_failing_ends_crash_looped(env_factory: Any) -> None:
    """Before its body runs (here: the payload no longer decodes), not forever: it is parked for an operator."""

    def app_with(model: type[BaseModel]) -> lg.App:
        app = lg.App()

        async def body(ctx: lg.Context, p: Any) -> str:
            await ctx.wait_for_signal("go", Go)
            return "done"

        body.__annotations__["p"] = model
        app.workflow(name="crash.reshaped")(body)
        return app

    async with env_factory(app_with(Flaky)) as env:
        h = await env.engine.start("crash.reshaped", {"tag": "r"})
        await env.settle()
        assert (await env.engine.get_run(h.run_id)).waiting_on == "signal"

    async with env_factory(app_with(Reshaped), max_reclaims=2) as env:
        await env.engine.signal(h.run_id, "go", {})
        await env.settle()
        run = await env.engine.get_run(h.run_id)
        assert (run.status, run.owner, run.reclaim_count) == ("running", None, 0)  # released, retried later
        await env.advance("16s")
        assert (await env.engine.get_run(h.run_id)).reclaim_count == 1
        await env.advance("16s")
        run = await env.engine.get_run(h.run_id)
        assert (run.status, run.error_tag) == ("suspended", "WorkflowCrashLooped")
        assert "run-crashlooped" in _types(await env.engine.events(h.run_id))


@pytest.mark.parametrize(("options", "named"), [({"max_reclaims": 0}, "max_reclaims"), ({"lease": "100ms"}, "lease")])
async def test_bad_crash_safety_options_are_refused(make_engine: Any, options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        make_engine(crashy.app, **options)
