"""Compensation: ``async with ctx.compensations() as undo:`` on both stores.

A 3-step booking (reserve a flight, reserve a hotel, charge) that fails at each step; a run
cancelled with ``compensate=True`` while parked and while executing here; a compensation that
fails and is resumed; a compensation registered after its block. Every step and compensation
appends a line to an effects file (tests/apps/booking.py), so the counts are what really ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.compensation import Compensations
from lockgate.http import create_app
from lockgate.inspect import connect
from lockgate.store import journal as store_journal
from lockgate.testing import replay_check

from .apps import booking, crashy
from .apps.waits import eventually

pytestmark = pytest.mark.asyncio


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[str]]:
    """What the booking's steps and compensations did, in order, for one tag (``what`` only)."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("LOCKGATE_TEST_EFFECTS", str(path))
    flags = tmp_path / "flags"
    flags.mkdir()
    monkeypatch.setenv("LOCKGATE_TEST_FLAGS", str(flags))

    def done(tag: str) -> list[str]:
        return [line.split(":", 1)[1] for line in crashy.effects(path) if line.startswith(f"{tag}:")]

    return done


def _raise(tag: str, what: str) -> None:
    crashy.flag(f"{tag}.{what}").touch()


async def _kinds(engine: lg.Engine, run_id: str) -> list[tuple[str, str, str]]:
    return [(s.key, s.kind, s.status) for s in await engine.steps(run_id)]


@pytest.mark.parametrize(
    ("fail", "ran"),
    [
        ("flight", ["flight"]),
        ("hotel", ["flight", "hotel", "release-flight"]),
        ("payment", ["flight", "hotel", "payment", "release-hotel", "release-flight"]),
    ],
)
async def test_a_failure_at_each_step_undoes_what_succeeded_in_reverse(
    make_engine: Any, effects: Callable[[str], list[str]], fail: str, ran: list[str]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.trip", {"tag": fail, "fail": fail})
        with pytest.raises(lg.RunFailed) as caught:
            await engine.result(h.run_id, timeout=30)
        assert caught.value.error_tag == "Declined"  # the original error, re-raised after the undo
        assert effects(fail) == ran
        if fail != "flight":  # work undone is not redriven into going on
            with pytest.raises(lg.RunNotEligible, match="compensations ran"):
                await engine.redrive(h.run_id)
        kinds = await _kinds(engine, h.run_id)
        undone = [(key, status) for key, kind, status in kinds if kind == "compensation"]
        assert undone == [(f"{w}#0", "completed") for w in ran if w.startswith("release")]


async def test_a_booking_that_succeeds_runs_no_compensation(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        assert await engine.run("booking.trip", {"tag": "ok"}, timeout=30) == "flight-ok,hotel-ok,payment-ok"
    assert effects("ok") == ["flight", "hotel", "payment", "confirm"]


async def test_cancel_with_compensation_of_a_parked_run(
    make_engine: Any, store_url: str, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.trip", {"tag": "c1", "wait_paid": True})
        await eventually(lambda: _waiting(engine, h.run_id), what="parked on the signal", timeout=30)
        await engine.cancel(h.run_id, "customer left", compensate=True)
        with pytest.raises(lg.RunCancelled) as caught:
            await engine.result(h.run_id, timeout=30)
        assert "customer left" in str(caught.value)
        assert effects("c1") == ["flight", "hotel", "payment", "release-hotel", "release-flight"]
        types = [e.type for e in await engine.events(h.run_id)]
        assert types.index("cancel-requested") < types.index("run-cancelled")
        steps = [s.key for s in await engine.steps(h.run_id)]
        assert store_journal.CANCEL_KEY in steps  # the request is kept in the journal, for every replay
        transport = httpx.ASGITransport(app=create_app(engine.client))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            page = await http.get(f"/ui/runs/{h.run_id}")
        assert page.status_code == 200 and "release-hotel#0" in page.text and "cancel requested" in page.text
        with pytest.raises(lg.RunNotEligible):
            await engine.cancel(h.run_id, compensate=True)
    async with connect(store_url) as inspector:  # the deploy-time check reads the request as no step of the body's
        export = await inspector.export_run(h.run_id)
    verdict = await replay_check(booking.app, export)
    assert not verdict.breaks, verdict.to_dict()


async def _waiting(engine: lg.Engine, run_id: str) -> bool:
    run = await engine.get_run(run_id)
    return run.waiting_on == "signal" and run.owner is None


async def test_cancel_with_compensation_while_a_step_runs_here(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    """The step in flight completes and is recorded; its compensation runs too; the next step never starts."""
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.trip", {"tag": "c2", "hold": "hotel"})
        await eventually(lambda: "hotel" in effects("c2"), what="hotel step entered", timeout=30)
        await engine.cancel(h.run_id, compensate=True)
        _raise("c2", "hotel")
        with pytest.raises(lg.RunCancelled):
            await engine.result(h.run_id, timeout=30)
        assert effects("c2") == ["flight", "hotel", "release-hotel", "release-flight"]


async def test_cancel_with_compensation_from_another_client_reaches_the_holder_when_it_parks(
    make_engine: Any, store_url: str, effects: Callable[[str], list[str]]
) -> None:
    """A client that does not execute the run cannot tell its holder: the park sees the request and makes it due."""
    async with make_engine(booking.app) as engine, lg.Client(booking.app, store_url, poll_interval=0.05) as client:
        h = await engine.start("booking.trip", {"tag": "c4", "hold": "hotel", "wait_paid": True})
        await eventually(lambda: "hotel" in effects("c4"), what="hotel step entered", timeout=30)
        await client.cancel(h.run_id, "elsewhere", compensate=True)
        _raise("c4", "hotel")
        with pytest.raises(lg.RunCancelled):
            await client.result(h.run_id, timeout=30)
        # the holder went on to the charge before it parked (it has no undo here); both reservations released
        assert effects("c4") == ["flight", "hotel", "payment", "release-hotel", "release-flight"]


async def test_cancel_with_compensation_of_a_run_never_entered_cancels_it_at_once(store_url: str) -> None:
    async with lg.Client(booking.app, store_url) as client:  # no worker: the run is never entered
        h = await client.start("booking.trip", {"tag": "c3"})
        assert h.run_id is not None
        await client.cancel(h.run_id, compensate=True)
        assert (await client.get_run(h.run_id)).status == "cancelled"


async def test_a_failing_compensation_suspends_the_run_with_both_errors_and_resume_finishes_the_undo(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.trip", {"tag": "f1", "fail": "payment", "broken": ["release-hotel"]})
        run = await eventually(lambda: _status(engine, h.run_id, "suspended"), what="suspended", timeout=30)
        assert run.error_tag == "CompensationFailed"
        message = run.error_message or ""
        assert "release-hotel" in message and "the provider refused" in message
        assert "Declined" in message and "payment declined" in message
        # retried by its policy (2 attempts), then stopped there: release-flight waits for it
        assert effects("f1") == ["flight", "hotel", "payment", "release-hotel", "release-hotel"]
        events = [e for e in await engine.events(h.run_id) if e.type == "run-suspended"]
        assert events and events[-1].data["reason"] == "compensation"

        _raise("f1", "fixed")
        await engine.resume(h.run_id)
        with pytest.raises(lg.RunFailed) as caught:
            await engine.result(h.run_id, timeout=30)
        assert caught.value.error_tag == "Declined"  # the payment was not charged again: its failure stays
        assert effects("f1")[5:] == ["release-hotel", "release-flight"]


async def test_resume_after_an_undo_keeps_the_failure_it_undid_after(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    """suspend_on_failure: the block undid its work, then the run was suspended; resume does not charge again."""
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.suspending", {"tag": "s1", "fail": "payment"})
        await eventually(lambda: _status(engine, h.run_id, "suspended"), what="suspended", timeout=30)
        assert effects("s1") == ["flight", "hotel", "payment", "release-hotel", "release-flight"]
        await engine.resume(h.run_id)
        await eventually(lambda: _status(engine, h.run_id, "suspended"), what="suspended again", timeout=30)
        assert effects("s1") == ["flight", "hotel", "payment", "release-hotel", "release-flight"]


async def test_nested_blocks_undo_inner_first_and_wait_for_a_failed_inner_compensation(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.nested", {"tag": "n1", "fail": "payment", "broken": ["release-flight"]})
        await eventually(lambda: _status(engine, h.run_id, "suspended"), what="suspended", timeout=30)
        undone = ["release-hotel", "release-flight", "release-flight"]  # the outer block's undo waits
        assert effects("n1") == ["seats", "flight", "hotel", "payment", *undone]
        _raise("n1", "fixed")
        await engine.resume(h.run_id)
        with pytest.raises(lg.RunFailed):
            await engine.result(h.run_id, timeout=30)
        assert effects("n1")[7:] == ["release-flight", "release-seats"]


async def test_cancel_with_compensation_of_a_run_suspended_by_a_compensation(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.trip", {"tag": "f2", "fail": "payment", "broken": ["release-hotel"]})
        await eventually(lambda: _status(engine, h.run_id, "suspended"), what="suspended", timeout=30)
        _raise("f2", "fixed")
        await engine.cancel(h.run_id, "give up", compensate=True)
        with pytest.raises(lg.RunCancelled):
            await engine.result(h.run_id, timeout=30)
        assert effects("f2")[5:] == ["release-hotel", "release-flight"]


async def _status(engine: lg.Engine, run_id: str, status: str) -> lg.RunInfo | None:
    run = await engine.get_run(run_id)
    return run if run.status == status else None


async def test_a_compensation_registered_after_its_block_is_a_typed_error(
    make_engine: Any, effects: Callable[[str], list[str]]
) -> None:
    async with make_engine(booking.app) as engine:
        h = await engine.start("booking.late", {"tag": "l1"})
        with pytest.raises(lg.RunFailed) as caught:
            await engine.result(h.run_id, timeout=30)
        assert caught.value.error_tag == "CompensationClosed"
        assert "release-flight" in str(caught.value)
    assert effects("l1") == ["flight"]


async def test_undo_add_outside_an_open_block_and_bad_arguments() -> None:
    async def step(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args)

    undo = Compensations(step, _nothing, lambda: None)
    with pytest.raises(lg.CompensationClosed, match="was not entered"):
        undo.add("x", print)
    async with undo:
        with pytest.raises(lg.InvalidArgument, match="non-empty"):
            undo.add("", print)
        with pytest.raises(lg.InvalidArgument, match="callable"):
            undo.add("x", "print")  # type: ignore[arg-type]
        with pytest.raises(lg.InvalidArgument, match=r"an lg\.Retry"):
            undo.add("x", print, retry=3)  # type: ignore[arg-type]
        assert undo.registered == []
    with pytest.raises(lg.CompensationClosed, match="has exited"):
        undo.add("x", print)


def _nothing() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
async def test_kill_9_during_a_compensation_does_not_run_a_completed_one_again(
    store_url: str, tmp_path: Path, effects: Callable[[str], list[str]]
) -> None:
    """A worker process dies inside the second compensation; the next one replays the first from the journal."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn() -> subprocess.Popen[bytes]:
        paths = (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        log = (tmp_path / f"worker-{len(procs)}.log").open("wb")
        cmd = [sys.executable, "-m", "tests.apps.runner", "--store", store_url, "--app", "tests.apps.booking:app"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        procs.append(proc)
        return proc

    try:
        async with lg.Client(booking.app, store_url, poll_interval=0.05) as client:
            h = await client.start("booking.trip", {"tag": "k1", "fail": "payment", "hold": "release-flight"})
            assert h.run_id is not None
            first = spawn()
            await eventually(lambda: "release-flight" in effects("k1"), what="second compensation entered", timeout=60)
            steps = {s.key: (s.kind, s.status) for s in await client.steps(h.run_id)}
            assert steps["release-hotel#0"] == ("compensation", "completed")  # durable before the next one began
            first.kill()  # SIGKILL (a Popen never signals a pid it has reaped, which may be reused)
            first.wait(timeout=30)

            _raise("k1", "release-flight")
            spawn()
            with pytest.raises(lg.RunFailed) as caught:
                await client.result(h.run_id, timeout=60)
            assert caught.value.error_tag == "Declined"
            # the interrupted compensation runs again; the completed one does not
            assert effects("k1") == ["flight", "hotel", "payment", "release-hotel", "release-flight", "release-flight"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
