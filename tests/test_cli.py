"""The ``lockgate`` command line against a store and a test app module.

Most calls run the command line in this process (``Lockgate``); a test per verb family runs
``python -m lockgate.cli`` for real, and ``serve`` is always a process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click import formatting as click_formatting
from click.testing import CliRunner

from lockgate.cli import run
from lockgate.store import open_store
from lockgate.store import workers as store_workers

pytestmark = pytest.mark.slow

APP_SOURCE = textwrap.dedent(
    """
    import os

    from pydantic import BaseModel

    import lockgate as lg

    app = lg.App()


    class Num(BaseModel):
        n: int


    class Gate(BaseModel):
        marker: str


    class Note(BaseModel):
        text: str


    class Add(BaseModel):
        by: int


    def double(n: int) -> int:
        return n * 2


    def check(marker: str) -> str:
        if not os.path.exists(marker):
            raise RuntimeError(f"no marker at {marker}")
        return "ok"


    @app.workflow(name="double")
    async def double_wf(ctx: lg.Context, p: Num) -> int:
        return await ctx.step("double", double, p.n)


    @app.workflow(name="gated")
    async def gated(ctx: lg.Context, p: Gate) -> str:
        first = await ctx.step("first", double, 1)
        checked = await ctx.step("check", check, p.marker)
        return f"{first}:{checked}"


    @app.workflow(name="chat")
    async def chat(ctx: lg.Context, p: Num) -> int:
        note = await ctx.wait_for_signal("note", Note)
        total = await ctx.handle_update("add", Add, lambda a: p.n + a.by)
        return total + len(note.text)
    """
)

APP = "cliapp:app"
DEADLINE = 30.0


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


def migrated(store: str) -> str:
    """``store`` made a lockgate database, as ``lockgate migrate`` does: no other verb creates one."""
    if store.startswith("sqlite:"):  # a PostgreSQL test database is a migrated copy already
        with contextlib.redirect_stdout(io.StringIO()):
            assert run(["migrate", "--store", store]) == 0
    return store


class Lockgate:
    """Runs the ``lockgate`` command line with the test app importable and the store in the environment.

    A call runs ``lockgate.cli.run`` in this process (through click's ``CliRunner`` isolation: the
    same code as the script, its stdout, stderr and exit code, without a Python start-up per verb);
    ``process=True`` runs every call as ``python -m lockgate.cli`` instead, as a person would.
    """

    def __init__(self, store: str, cwd: Path, app: str = APP, *, process: bool = False) -> None:
        self.store = store
        self.cwd = cwd
        self.app = app
        self.process = process
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd), os.environ.get("PYTHONPATH")) if p)
        self.env["LOCKGATE_STORE"] = store
        self.env.pop("LOCKGATE_APP", None)
        self.env["COLUMNS"] = "200"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "lockgate.cli", *args]

    def __call__(self, *args: str, code: int | None = 0) -> Result:
        if self.process:
            proc = subprocess.run(
                self.argv(*args), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120
            )
            result = Result(proc.returncode, proc.stdout, proc.stderr)
        else:
            result = self._in_process(list(args))
        if code is not None:
            assert result.code == code, f"lockgate {' '.join(args)} exited {result.code}:\n{result.out}\n{result.err}"
        if result.code != 0:
            assert "Traceback" not in result.err, result.err
        return result

    def _in_process(self, argv: list[str]) -> Result:
        """``run(argv)`` with this CLI's environment, directory and import path; off the loop if one runs here."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._invoke(argv)
        done: list[Result] = []
        failed: list[BaseException] = []

        def target() -> None:
            try:
                done.append(self._invoke(argv))
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=target, name="lockgate-cli")
        thread.start()
        thread.join()
        if failed:
            raise failed[0]
        return done[0]

    def _invoke(self, argv: list[str]) -> Result:
        env: dict[str, str | None] = {name: self.env.get(name) for name in set(self.env) | set(os.environ)}
        env = {name: value for name, value in env.items() if os.environ.get(name) != value}
        path, modules = list(sys.path), set(sys.modules)
        sys.path[:0] = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        try:
            with contextlib.chdir(self.cwd), CliRunner().isolation(env=env) as (out, err, _):
                click_formatting.FORCED_WIDTH = None  # the width a process finds (isolation forces 80)
                try:
                    code = run(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                sys.stdout.flush()
                sys.stderr.flush()
                return Result(code, out.getvalue().decode(), err.getvalue().decode())
        finally:
            sys.path[:] = path
            for name in set(sys.modules) - modules:  # the app modules of this directory, imported afresh next time
                if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(self.cwd)):
                    del sys.modules[name]

    def json(self, *args: str) -> Any:
        return self(*args, "--format", "json").json

    def real(self) -> Lockgate:
        """The same CLI, each call a ``python -m lockgate.cli`` process."""
        other = Lockgate(self.store, self.cwd, self.app, process=True)
        other.env = dict(self.env)
        return other

    def run(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.json("workflows", "show", run_id)["run"]
        return run

    def wait_run(self, run_id: str, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        run: dict[str, Any] = wait_for(lambda: self.run(run_id), predicate, f"run {run_id}")
        return run

    def start(self, workflow: str, payload: dict[str, Any]) -> str:
        handle = self.json("workflows", "start", workflow, "--app", self.app, "--payload", json.dumps(payload))
        assert handle["status"] == "started"
        return str(handle["run_id"])

    @contextmanager
    def serving(self, *extra: str) -> Iterator[subprocess.Popen[str]]:
        """A ``lockgate serve`` process, up once it has logged its start; SIGINT on the way out."""
        log = self.cwd / f"serve-{time.monotonic_ns()}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                self.argv("serve", self.app, *extra), cwd=self.cwd, env=self.env, stderr=err, stdout=err, text=True
            )
        try:
            wait_for(lambda: log.read_text(), lambda text: "started" in text or proc.poll() is not None, "serve")
            assert proc.poll() is None, log.read_text()
            proc.log = log  # type: ignore[attr-defined]
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def wait_for(get: Callable[[], Any], predicate: Callable[[Any], bool], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: condition not met within {timeout}s; last value: {value!r}")
        time.sleep(0.05)


@pytest.fixture
def lg(store_url: str, tmp_path: Path) -> Lockgate:
    """The CLI on each kind of store."""
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    return Lockgate(migrated(store_url), tmp_path)


@pytest.fixture
def lg_process(lg: Lockgate) -> Lockgate:
    """The CLI on each kind of store, each call a process of its own (the script itself, end to end)."""
    return lg.real()


@pytest.fixture
def cli(tmp_path: Path) -> Lockgate:
    """The CLI on a SQLite file, for what does not depend on the store (usage errors, the demo)."""
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    return Lockgate(f"sqlite:///{tmp_path}/lockgate.db", tmp_path)


def workers(store_url: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        store = open_store(store_url)
        await store.open()
        try:
            return await store.read(store_workers.list_workers)
        finally:
            await store.close()

    return asyncio.run(read())


# -- reading and starting ---------------------------------------------------------------------


SERVER_PACKAGES = ("fastapi", "starlette", "uvicorn", "jinja2")


@pytest.mark.parametrize("verb", [["workflows", "list", "--help"], ["migrate", "--help"], ["--version"]])
def test_a_verb_that_serves_nothing_does_not_import_the_server(verb: list[str]) -> None:
    # Every CLI call is a new process: the HTTP server and the dashboard would double its start-up.
    code = (
        "import sys\n"
        "from lockgate.cli import run\n"
        f"run({verb!r})\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(SERVER_PACKAGES)!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout


def test_the_serving_commands_load_when_asked_for(cli: Lockgate) -> None:
    listed = cli("--help").out
    for command in ("serve", "inspect", "demo"):
        assert command in listed
        assert "Usage: lockgate " + command in cli(command, "--help").out
    assert "serve" not in cli("workflows", "--help").out.split("Commands:")[1]


def test_start_then_list_and_show(lg_process: Lockgate) -> None:
    lg = lg_process
    run_id = lg.start("double", {"n": 21})

    listed = lg.json("workflows", "list")
    assert [r["id"] for r in listed["runs"]] == [run_id]
    assert listed["runs"][0]["workflow"] == "double"
    assert listed["runs"][0]["status"] == "running"
    assert listed["runs"][0]["payload"] == {"n": 21}
    assert lg.json("workflows", "list", "--status", "succeeded")["runs"] == []
    assert lg.json("workflows", "list", "--workflow", "chat")["runs"] == []
    assert lg.json("workflows", "list", "--offset", "1")["runs"] == []

    shown = lg.json("workflows", "show", run_id, "--store", lg.store)
    assert set(shown) == {"run", "steps", "attempts", "events", "children"}
    assert shown["run"]["id"] == run_id
    assert shown["run"]["status"] == "running"
    assert shown["steps"] == [] and shown["attempts"] == [] and shown["children"] == []
    assert [e["type"] for e in shown["events"]] == ["run-started"]

    table = lg("workflows", "list").out
    assert run_id in table and "double" in table

    first = lg.json("workflows", "start", "double", "--app", APP, "--payload", '{"n": 1}', "--idempotency-key", "k1")
    again = lg.json("workflows", "start", "double", "--app", APP, "--payload", '{"n": 1}', "--idempotency-key", "k1")
    assert (first["status"], again["status"]) == ("started", "existing")
    assert again["run_id"] == first["run_id"]


def test_lockgate_errors_exit_1_with_one_line(lg: Lockgate) -> None:
    if lg.store.startswith("sqlite"):
        nothing = lg("workflows", "list", "--store", f"sqlite:///{lg.cwd}/missing.db", code=1)
        assert nothing.err.startswith("error: no lockgate database at ")
        (lg.cwd / "notes.txt").write_text("not a database, but long enough to have a header" * 10)
        foreign = lg("workflows", "list", "--store", "sqlite:///notes.txt", code=1)
        assert foreign.err.startswith("error: cannot open SQLite database") and "notes.txt" in foreign.err
    lg.start("double", {"n": 1})
    missing = lg("workflows", "show", "run_nope", code=1)
    assert missing.err.strip() == "error: no run with id 'run_nope'"

    unknown = lg("workflows", "start", "nope", "--app", APP, code=1)
    assert unknown.err.startswith("error: unknown workflow 'nope'; registered: chat, double, gated")

    bad = lg("workflows", "start", "double", "--app", APP, "--payload", '{"m": 1}', code=1)
    assert bad.err.startswith("error: ") and "missing n" in bad.err
    assert bad.out == ""


# -- recovery verbs -------------------------------------------------------------------------------


def test_verbs_on_live_and_ended_runs(lg: Lockgate) -> None:
    run_id = lg.start("double", {"n": 2})

    assert lg.json("workflows", "suspend", run_id, "--reason", "look")["run"]["status"] == "suspended"
    refused = lg("workflows", "suspend", run_id, code=1)
    assert "cannot suspend run" in refused.err and "only a running run can be suspended" in refused.err
    assert lg.json("workflows", "resume", run_id)["run"]["status"] == "running"

    for verb in ("redrive", "discard"):
        refused = lg("workflows", verb, run_id, code=1)
        assert refused.err.startswith(f"error: cannot {verb} run {run_id} (status running)"), refused.err
    refused = lg("workflows", "resume-from-step", run_id, "double", code=1)
    assert "cannot resume-from-step" in refused.err
    refused = lg("workflows", "retry", run_id, "--app", APP, code=1)
    assert "only failed or cancelled runs can be retried" in refused.err

    cancelled = lg.json("workflows", "cancel", run_id, "--reason", "not needed")
    assert cancelled["verb"] == "cancel"
    assert (cancelled["run"]["status"], cancelled["run"]["error_message"]) == ("cancelled", "not needed")
    assert "cannot cancel" in lg("workflows", "cancel", run_id, code=1).err
    assert "a finished run takes no signals" in lg("workflows", "signal", run_id, "note", code=1).err
    never_entered = lg.start("double", {"n": 5})  # no worker here: nothing to undo, cancelled at once
    undone = lg.json("workflows", "cancel", never_entered, "--compensate", "--reason", "undo")
    assert (undone["run"]["status"], undone["run"]["error_message"]) == ("cancelled", "undo")

    retried = lg.json("workflows", "retry", run_id, "--app", APP)
    assert retried["retry_of"] == run_id
    new = lg.run(retried["handle"]["run_id"])
    assert (new["status"], new["retry_of"], new["payload"]) == ("running", run_id, {"n": 2})

    override = lg.json("workflows", "retry", run_id, "--app", APP, "--payload", '{"n": 7}')
    assert lg.run(override["handle"]["run_id"])["payload"] == {"n": 7}
    assert "retry" in lg("workflows", "retry", run_id, "--app", APP, "--payload", '{"n": "x"}', code=1).err


def test_failed_runs_redrive_resume_from_step_discard(lg: Lockgate, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    g1, g2, g3 = (lg.start("gated", {"marker": str(marker)}) for _ in range(3))
    with lg.serving():
        for run_id in (g1, g2, g3):
            failed = lg.wait_run(run_id, lambda r: r["status"] == "failed")
            assert failed["error_tag"] == "RuntimeError"

        dead = lg.json("workflows", "list", "--dead-letter")["runs"]
        assert sorted(r["id"] for r in dead) == sorted([g1, g2, g3])
        first = lg.json("workflows", "discard", g3)
        assert (first["run"]["discarded"], first["already_discarded"]) == (True, False)
        dead = lg.json("workflows", "list", "--dead-letter", "--limit", "1", "--offset", "1")["runs"]
        assert len(dead) == 1 and dead[0]["id"] in (g1, g2)
        assert {r["id"] for r in lg.json("workflows", "list", "--dead-letter")["runs"]} == {g1, g2}
        assert "the run was discarded" in lg("workflows", "redrive", g3, code=1).err

        unknown = lg("workflows", "resume-from-step", g2, "nope", code=1)
        assert "no step 'nope' in its journal; steps: check, first" in unknown.err

        marker.write_text("go")
        # The verb prints the run as it then stands: the worker serving may have run it to its end already.
        assert lg.json("workflows", "redrive", g1)["run"]["status"] in ("running", "succeeded")
        assert lg.json("workflows", "resume-from-step", g2, "first")["run"]["status"] in ("running", "succeeded")
        for run_id in (g1, g2):
            assert lg.wait_run(run_id, lambda r: r["status"] != "running")["output"] == "2:ok"

    shown = lg.json("workflows", "show", g1)
    first = [a for a in shown["attempts"] if a["step_key"] == "first#0"]
    assert len(first) == 1  # redrive replayed the completed step
    assert [e["type"] for e in shown["events"]].count("run-redriven") == 1
    resumed = [a for a in lg.json("workflows", "show", g2)["attempts"] if a["step_key"] == "first#0"]
    assert len(resumed) == 2  # resume-from-step ran it again


# -- serve ---------------------------------------------------------------------------------------


def test_serve_runs_work_and_stops_cleanly_on_sigint(lg: Lockgate) -> None:
    run_id = lg.start("double", {"n": 21})
    with lg.serving("--lease", "2s", "--max-concurrent-runs", "4") as proc:
        assert lg.wait_run(run_id, lambda r: r["status"] == "succeeded")["output"] == 42
        waited = lg.json("workflows", "start", "double", "--app", APP, "--payload", '{"n": 5}', "--wait")
        assert (waited["status"], waited["result"]) == ("started", 10)
        assert [w["stopped_at"] for w in workers(lg.store)] == [None]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == 0
    log = proc.log.read_text()  # type: ignore[attr-defined]
    assert "Traceback" not in log
    started = [line for line in log.splitlines() if "lockgate.serve: worker" in line]
    assert len(started) == 2 and "started" in started[0] and "stopped (SIGINT)" in started[1]
    (worker,) = workers(lg.store)
    assert worker["id"] in started[0] and worker["stopped_at"] is not None


def test_signal_and_update_against_a_serving_process(lg: Lockgate) -> None:
    unserved = lg.start("chat", {"n": 0})
    no_worker = lg("workflows", "update", unserved, "add", "--payload", '{"by": 2}', "--timeout", "300ms", code=1)
    assert "was not answered within" in no_worker.err
    lg("workflows", "cancel", unserved)
    run_id = lg.start("chat", {"n": 1})
    with lg.serving():
        lg.wait_run(run_id, lambda r: r["waiting_on"] == "signal")
        rejected = lg("workflows", "signal", run_id, "note", "--app", APP, "--payload", '{"txt": 1}', code=1)
        assert "missing text" in rejected.err
        sent = lg.json("workflows", "signal", run_id, "note", "--app", APP, "--payload", '{"text": "hello"}')
        assert sent["verb"] == "signal"
        lg.wait_run(run_id, lambda r: r["waiting_on"] == "update")
        answer = lg.json(
            "workflows", "update", run_id, "add", "--app", APP, "--payload", '{"by": 2}', "--timeout", "20"
        )
        assert answer == {"verb": "update", "run_id": run_id, "name": "add", "result": 3}
        assert lg.wait_run(run_id, lambda r: r["status"] != "running")["output"] == 3 + len("hello")
    assert "update-completed" in [e["type"] for e in lg.json("workflows", "show", run_id)["events"]]


# -- usage errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["workflows", "list", "--bogus"], "No such option '--bogus'"),
        (["workflows", "list", "--status", "sleeping"], "'sleeping' is not one of"),
        (["workflows", "list", "--limit", "0"], "--limit"),
        (["workflows", "start", "double", "--app", APP, "--payload", "{n: 1}"], "not valid JSON"),
        (["workflows", "start", "double", "--payload", "{}"], "Missing option '--app'"),
        (["workflows", "start", "double", "--app", "no_such_module:app"], "cannot import module 'no_such_module'"),
        (["workflows", "start", "double", "--app", "cliapp:nope"], "has no attribute 'nope'"),
        (["workflows", "start", "double", "--app", "cliapp:Num"], "not a lockgate App"),
        (["workflows", "start", "double", "--app", APP, "--timeout", "1s"], "--timeout only applies with --wait"),
        (["workflows", "update", "run_x", "add", "--timeout", "soon"], "cannot read 'soon'"),
        (["workflows", "show", "run_x", "--store", "mysql://db"], "unsupported store URL"),
        (["workflows", "show"], "Missing argument 'RUN_ID'"),
        (["serve", APP, "--lease", "5 parsecs"], "cannot read '5 parsecs'"),
        (["serve", APP, "--lease", "100ms"], "at least 500ms"),
        (["workflows", "list", "--dead-letter", "--status", "running"], "dead letters are failed runs"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_bad_arguments_exit_2(cli: Lockgate, args: list[str], needle: str) -> None:
    result = cli(*args, code=2)
    assert result.err.startswith("error: ") and needle in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1
    assert result.out == ""


def test_help_documents_exit_codes(cli: Lockgate) -> None:
    for args in (
        ["--help"],
        ["workflows", "--help"],
        ["workflows", "start", "--help"],
        ["serve", "--help"],
        ["demo", "-h"],
    ):
        assert "Exit codes:" in cli(*args).out


# -- demo ------------------------------------------------------------------------------------------


def test_demo_runs_to_completion(cli: Lockgate, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/demo.db"
    result = cli.real()("demo", "--store", url)
    # the database by its path from the current directory when it is below it
    shown = os.path.relpath(tmp_path / "demo.db", cli.cwd)
    shown = shown if not shown.startswith("..") else f"{tmp_path}/demo.db"
    assert f"lockgate workflows list --store sqlite:///{shown}" in result.out
    listed = cli.json("workflows", "list", "--store", url)["runs"]
    # The demo's schedule fires every two seconds while the scenes run: how often depends on the
    # machine's pace, so its runs are counted apart and the scenes' runs are checked exactly.
    beats = [r for r in listed if r["workflow"] == "demo.heartbeat"]
    runs = [r for r in listed if r["workflow"] != "demo.heartbeat"]
    assert sorted(r["workflow"] for r in runs) == sorted(
        ["demo.checkout", "demo.checkout", "demo.receipt", "demo.receipt", "demo.approval", "demo.quote"]
        + ["demo.reminder", "demo.fulfil", "demo.fulfil", "demo.ship", "demo.expense"]
        + ["demo.narrate"]
        + ["demo.label"] * 5
        + ["demo.sms"] * 3
    )
    # Every run succeeds but the reminder, which the demo's demo.order.cancelled event cancels as it sleeps.
    assert {r["status"] for r in runs if r["workflow"] != "demo.reminder"} == {"succeeded"}
    reminder = next(r for r in runs if r["workflow"] == "demo.reminder")
    ship = next(r for r in runs if r["workflow"] == "demo.ship")
    assert cli.json("workflows", "show", ship["id"], "--store", url)["run"]["output"] == "shipped A-1001"
    expense = next(r for r in runs if r["workflow"] == "demo.expense")
    expensed = cli.json("workflows", "show", expense["id"], "--store", url)["run"]["output"]
    assert expensed == "approved by manager@example.com (emailed link)"
    assert (reminder["status"], reminder["error_message"]) == ("cancelled", "order cancelled")
    assert "demo.reminder A-1004: cancelled by demo.order.cancelled ('order cancelled')" in result.out
    assert any(r["status"] == "succeeded" for r in beats)  # the schedule fired at least once
    firings = cli.json("schedules", "firings", "demo.heartbeat", "--store", url)["firings"]
    fired = {f["status"] for f in firings}
    assert "succeeded" in fired and not {"failed", "cancelled"} & fired
    assert "schedule demo.heartbeat (declared, every 2s)" in result.out
    assert "schedule heartbeat:tenant-4711 (created at runtime, every 2s)" in result.out
    tenant = cli.json("schedules", "firings", "heartbeat:tenant-4711", "--store", url)["firings"]
    assert "succeeded" in {f["status"] for f in tenant}
    # the first checkout's stream, read back once: a body entered again after its park streams nothing twice
    assert "streamed: stock reserved for A-1001 / charged ch_A-1001_4200 / settled / receipt sent" in result.out
    quote = next(r for r in runs if r["workflow"] == "demo.quote")
    assert quote["output"] == 270
    checkout = next(r for r in runs if r["workflow"] == "demo.checkout")
    charges = [
        a
        for a in cli.json("workflows", "show", checkout["id"], "--store", url)["attempts"]
        if "charge" in a["step_key"]
    ]
    assert [a["status"] for a in charges] == ["failed", "failed", "completed"]
    # the gate: 20 edits debounced into one run with the last, 5 labels admitted, 2 of 5 texts dropped
    narrate = next(r for r in runs if r["workflow"] == "demo.narrate")
    assert narrate["payload"] == {"row": "row-7", "text": "draft 20"}
    assert narrate["output"] == "row-7 now reads 'draft 20'"
    # its draft is a durable agent under a key counting a model's tokens: a tool call, then the text; each
    # request reserved 300 and settled at its usage (80 + 12, then 120 + 5)
    drafted = "agent (two model requests and a tool call, each a step)"
    assert f"tokens: the narration's {drafted} settled 217 tokens under key 'model'" in result.out
    narrated = cli.json("workflows", "show", narrate["id"], "--store", url)
    assert sum(1 for a in narrated["attempts"] if "latest_text" in a["step_key"]) == 1, narrated["attempts"]
    flow = {f["workflow"]: f for f in cli.json("workflows", "flow", "--store", url)["flow"]}
    assert (flow["demo.narrate"]["admitted"], flow["demo.narrate"]["collapsed"]) == (1, 19)
    assert (flow["demo.label"]["admitted"], flow["demo.label"]["queued"]) == (5, 0)
    assert (flow["demo.sms"]["admitted"], flow["demo.sms"]["dropped"]) == (3, 2)
    assert "gate decisions" in result.out and "20 edits, 1 run: 19 collapsed" in result.out
    why = next(line.split()[3] for line in result.out.splitlines() if "lockgate workflows why" in line)
    traced = cli.json("workflows", "why", why, "--store", url)
    assert (traced["outcome"], traced["run_id"]) == ("collapsed", narrate["id"])
    # the events: each checkout publishes demo.order.paid once, and its trigger starts one demo.fulfil
    assert f"lockgate events list --store sqlite:///{shown}" in result.out
    assert "then open http://127.0.0.1:8484/ui/runs" in result.out  # the dashboard over the same store
    events = cli.json("events", "list", "--store", url)["events"]
    paid = sorted((e for e in events if e["name"] == "demo.order.paid"), key=lambda e: e["key"]["order_id"])
    checkouts = sorted((r for r in runs if r["workflow"] == "demo.checkout"), key=lambda r: r["payload"]["order_id"])
    assert [e["key"]["order_id"] for e in paid] == ["A-1001", "A-1002"]
    assert [e["source"] for e in paid] == [f"run:{r['id']}" for r in checkouts]
    cancelled = [e for e in events if e["name"] == "demo.order.cancelled"]
    assert [(e["key"], e["source"]) for e in cancelled] == [({"order_id": "A-1004"}, "api")]
    fulfils = {r["id"]: r for r in runs if r["workflow"] == "demo.fulfil"}
    for event in paid:
        deliveries = cli.json("events", "show", event["id"], "--store", url)["deliveries"]
        assert [(d["workflow"], d["status"]) for d in deliveries] == [("demo.fulfil", "started")]
        fulfil = fulfils.pop(deliveries[0]["run_id"])
        assert fulfil["payload"] == event["key"] and fulfil["source"] == "event:demo.order.paid"
    assert cli.json("events", "show", cancelled[0]["id"], "--store", url)["deliveries"] == []

    cli.real()("demo", "--store", url, "--timeout", "40s")  # a second demo starts from an empty database
    again = cli.json("workflows", "list", "--store", url)["runs"]
    assert len([r for r in again if r["workflow"] != "demo.heartbeat"]) == 20


def test_demo_refuses_to_reset_a_database_of_other_runs(cli: Lockgate, tmp_path: Path) -> None:
    url = migrated(f"sqlite:///{tmp_path}/mine.db")
    cli("workflows", "start", "double", "--app", APP, "--store", url, "--payload", '{"n": 1}')
    refused = cli("demo", "--store", url, code=1)
    assert refused.err.startswith("error: refusing to reset") and "--keep" in refused.err
    assert len(cli.json("workflows", "list", "--store", url)["runs"]) == 1


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ('import json\n\ndef helper():\n    return json.loads("{")\n\nhelper()\n', "JSONDecodeError"),
        ("import no_such_dependency_of_theirs\n", "ModuleNotFoundError"),
    ],
)
def test_an_app_that_fails_to_import_shows_only_its_own_frames(
    cli: Lockgate, tmp_path: Path, source: str, error: str
) -> None:
    (tmp_path / "brokenapp.py").write_text(source)
    for args in (["serve", "brokenapp:app"], ["workflows", "start", "x", "--app", "brokenapp:app"]):
        result = subprocess.run(cli.argv(*args), cwd=tmp_path, env=cli.env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert lines[0].startswith(f"error: importing 'brokenapp' failed: {error}"), lines
        assert "brokenapp.py" in result.stderr and "lockgate" not in "\n".join(lines[1:]), result.stderr
        assert len(lines) <= 12, result.stderr
