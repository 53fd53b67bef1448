"""The step and finish hot path: what its shortcuts keep of the engine's contract."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.engine import executor
from lockgate.store import coalesce, runs, shared
from lockgate.store import journal as store_journal

from .apps.waits import eventually


class Job(BaseModel):
    n: int = 1


class Go(BaseModel):
    go: bool = True


async def double(n: int) -> int:
    return n * 2


def app_with_steps() -> lg.App:
    app = lg.App()

    @app.workflow(name="steps")
    async def steps(ctx: lg.Context, p: Job) -> int:
        total = 0
        for i in range(p.n):
            total += await ctx.step("double", double, i)
        return total

    @app.workflow(name="with-input")
    async def with_input(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("double", double, p.n, input={"n": p.n}))

    @app.workflow(name="waits")
    async def waits(ctx: lg.Context, p: Job) -> int:
        first = await ctx.step("double", double, p.n)
        await ctx.wait_for_signal("go", Go)
        second = await ctx.step("double", double, first)
        await ctx.wait_for_signal("go", Go)
        return int(first + second)

    return app


async def test_a_first_attempt_that_completes_is_listed_once_with_or_without_input(env_factory: Any) -> None:
    async with env_factory(app_with_steps()) as env:
        plain = await env.engine.start("steps", {"n": 3})
        given = await env.engine.start("with-input", {"n": 5})
        assert await env.engine.result(plain.run_id, timeout=10) == 6
        assert await env.engine.result(given.run_id, timeout=10) == 10
        rows = await env.engine.attempts(plain.run_id)
        assert [(a.step_key, a.attempt, a.status) for a in rows] == [
            ("double#0", 1, "completed"),
            ("double#1", 1, "completed"),
            ("double#2", 1, "completed"),
        ]
        steps = {s.key: s for s in await env.engine.steps(plain.run_id)}
        assert all(a.started_at == steps[a.step_key].started_at for a in rows)
        assert [(a.step_key, a.attempt) for a in await env.engine.attempts(given.run_id)] == [("double#0", 1)]


async def test_coarse_recording_lists_no_attempts(env_factory: Any) -> None:
    async with env_factory(app_with_steps(), recording="coarse") as env:
        handle = await env.engine.start("steps", {"n": 2})
        assert await env.engine.result(handle.run_id, timeout=10) == 2
        assert await env.engine.attempts(handle.run_id) == []
        assert len(await env.engine.steps(handle.run_id)) == 2


async def test_steps_move_progress_at_no_more_than_once_a_second(env_factory: Any) -> None:
    async with env_factory(app_with_steps()) as env:
        handle = await env.engine.start("waits", {"n": 1})
        await env.settle()
        created = await env.engine.store.read(shared.get_run, handle.run_id)
        assert created["waiting_on"] == "signal"
        # The first step fell within a second of the start: the run's row was not rewritten for it.
        assert created["progress_at"] == created["created_at"]
        await env.advance("5s")
        await env.engine.signal(handle.run_id, "go", {})
        await env.settle()
        parked = await env.engine.store.read(shared.get_run, handle.run_id)
        assert parked["waiting_on"] == "signal"
        assert parked["progress_at"] == env.clock.now()  # the second step came 5s later: it moved


async def test_a_fenced_step_writes_neither_its_entry_nor_its_attempt(make_engine: Any) -> None:
    gate = asyncio.Event()
    app = lg.App()

    async def slow(n: int) -> int:
        await gate.wait()
        return n

    @app.workflow(name="fenced")
    async def fenced(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("slow", slow, p.n, input={"n": p.n}))

    async with make_engine(app) as engine:
        handle = await engine.start("fenced", {"n": 1})
        await eventually(lambda: handle.run_id in engine.executing, what="the run executing")
        row = await engine.store.read(shared.get_run, handle.run_id)
        stale = shared.Fence(handle.run_id, row["owner"], int(row["epoch"]))
        await engine.store.write(runs.release_run, stale, engine.clock.now() + 3600)  # the lease moves on
        entry = {"step_key": "slow#0", "kind": "step", "status": "completed", "output": "1", "seq": 0}
        attempt = {
            "run_id": handle.run_id,
            "step_key": "slow#0",
            "attempt": 1,
            "status": "completed",
            "input": "{}",
            "started_at": 1.0,
        }
        try:
            await engine.store.write(store_journal.record_entry, stale, entry, 2.0, attempt=attempt)
        except shared.Fenced:
            pass
        else:
            raise AssertionError("a write under a stale fence went through")
        assert await engine.steps(handle.run_id) == []
        assert await engine.attempts(handle.run_id) == []
        gate.set()


async def test_many_waiters_get_their_results_from_one_engine(make_engine: Any) -> None:
    async with make_engine(app_with_steps(), max_concurrent_runs=20) as engine:
        handles = await asyncio.gather(*(engine.start("steps", {"n": i % 4}) for i in range(200)))
        results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
    assert results == [sum(2 * k for k in range(i % 4)) for i in range(200)]


async def test_a_client_sees_results_of_runs_another_process_executes(store_url: str, make_engine: Any) -> None:
    app = app_with_steps()
    async with make_engine(app) as engine, lg.Client(app, store_url, poll_interval=0.05) as client:
        handles = [await client.start("steps", {"n": 2}) for _ in range(5)]
        assert [await client.result(str(h.run_id), timeout=30) for h in handles] == [2] * 5
        assert engine.executing == []


async def test_a_result_wait_that_times_out_leaves_nothing_behind(make_engine: Any) -> None:
    async with make_engine(app_with_steps()) as engine:
        handle = await engine.start("waits", {"n": 1})
        try:
            await engine.result(handle.run_id, timeout=0.2)
        except lg.ResultTimeout:
            pass
        else:
            raise AssertionError("the run should still wait for its signal")
        assert engine.core.results._waiters == {}
        await engine.signal(handle.run_id, "go", {})
        await engine.signal(handle.run_id, "go", {})
        assert await engine.result(handle.run_id, timeout=10) == 6


async def test_a_blocking_start_runs_here_claimed_as_it_is_created(make_engine: Any) -> None:
    seen: list[tuple[str | None, int]] = []
    app = app_with_steps()

    @app.workflow(name="looks")
    async def looks(ctx: lg.Context, p: Job) -> int:
        row = await engine.store.read(shared.get_run, ctx.run_id)
        seen.append((row["owner"], int(row["epoch"])))
        return int(await ctx.step("double", double, p.n))

    async with make_engine(app) as engine:
        assert await engine.run("looks", {"n": 2}, timeout=10) == 4
        [run] = await engine.list_runs(workflow="looks")
        assert (run.status, run.entries, run.reclaim_count) == ("succeeded", 1, 0)
        assert seen == [(engine.worker_id, 1)]  # claimed once, by this engine, as it was created
        started = await engine.start("looks", {"n": 3}, wait=True)
        assert await started.result(timeout=10) == 6


async def test_a_blocking_start_without_room_waits_for_the_dispatcher(make_engine: Any) -> None:
    release = asyncio.Event()
    app = app_with_steps()

    @app.workflow(name="holder")
    async def holder(ctx: lg.Context, p: Job) -> int:
        async def hold() -> int:
            await release.wait()
            return p.n

        return int(await ctx.step("hold", hold))

    async with make_engine(app, max_concurrent_runs=1) as engine:
        held = await engine.start("holder", {"n": 7})
        await eventually(lambda: held.run_id in engine.executing, what="the holder executing")
        waiting = asyncio.ensure_future(engine.run("steps", {"n": 3}, timeout=30))
        [queued] = await eventually(lambda: engine.list_runs(workflow="steps"), what="the blocking start's run")
        assert (queued.status, queued.owner) == ("running", None)  # created, not claimed: no room
        release.set()
        assert await waiting == 6
        assert await held.result(timeout=10) == 7


async def test_a_step_the_body_ends_after_is_journaled_by_the_end_commit(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's entry rides with the run's next write: a one-step run takes its start's commit and its end's."""
    # A loaded machine can stall the event loop past HOLD between the step and the end, and the entry is then
    # written alone, as designed (test_crash covers that); here the end, not the hold's expiry, must carry it.
    monkeypatch.setattr(executor, "HOLD", 3600.0)
    async with make_engine(app_with_steps()) as engine:
        assert await engine.run("steps", {"n": 1}, timeout=10) == 0  # the first run warms the engine's caches
        # The run's own writes, told from the engine's periodic ones (claim polls, lease renewals, sweeps),
        # which commit on their own clocks: the store's commit counter counts those too.
        ours: contextvars.ContextVar[bool] = contextvars.ContextVar("ours", default=False)
        written: list[tuple[Any, dict[str, Any]]] = []
        write = engine.store.write

        async def writing(op: Any, *args: Any, **kwargs: Any) -> Any:
            if ours.get():  # the start itself, and the tasks it spawned (the run's execution)
                written.append((op, kwargs))
            return await write(op, *args, **kwargs)

        monkeypatch.setattr(engine.store, "write", writing)
        ours.set(True)
        assert await engine.run("steps", {"n": 1}, timeout=10) == 0
        assert len(written) == 2  # the start, and the end: each one transaction
        end, carried = written[-1]
        assert end is runs.finish_run
        assert [e.entry["step_key"] for e in carried["entries"]] == ["double#0"]
        for run in await engine.list_runs(workflow="steps"):
            assert [(s.key, s.status) for s in await engine.steps(run.id)] == [("double#0", "completed")]


async def test_a_blocking_start_executes_the_row_it_inserted_without_reading_it(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_engine(app_with_steps()) as engine:
        held: list[dict[str, Any]] = []
        launch = engine.dispatcher.launch
        monkeypatch.setattr(engine.dispatcher, "launch", held.append)
        read = engine.store.read
        ops_read: list[Any] = []

        async def reading(op: Any, *args: Any, **kwargs: Any) -> Any:
            ops_read.append(op)
            return await read(op, *args, **kwargs)

        monkeypatch.setattr(engine.store, "read", reading)
        waiting = asyncio.ensure_future(engine.run("steps", {"n": 2}, timeout=10))
        await eventually(lambda: held, what="the blocking start's run launched")
        assert runs.find_run not in ops_read
        (row,) = held
        stored = await engine.store.read(shared.get_run, row["id"])
        assert stored["owner"] == engine.worker_id
        assert {k: row[k] for k in stored if k in row} == {k: stored[k] for k in stored if k in row}
        read_by_executor = {"id", "workflow", "payload", "version", "patches", "recording", "owner", "epoch", "entries"}
        assert read_by_executor | {"reclaim_count", "parent_id", "progress_at", "slot_scope", "deadline_at"} <= set(row)
        launch(row)
        assert await waiting == 2


async def test_runs_ending_in_one_group_commit_end_as_if_one_by_one(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ends of one group commit share one multi-row insert of their events: rows as the same ends one by one;
    a stale fence among them is refused alone."""
    together_form = coalesce._MANY[runs.finish_run]
    sizes: list[int] = []

    async def spy(tx: Any, calls: Any) -> Any:
        sizes.append(len(calls))
        return await together_form(tx, calls)

    monkeypatch.setitem(coalesce._MANY, runs.finish_run, spy)
    async with lg.Client(app_with_steps(), store_url) as client:
        handles = [await client.start("steps", {"n": 1}) for _ in range(7)]
        now = client.clock.now()
        claimed = await client.store.write(runs.claim_runs, "w-test", now, now + 3600, 7, ["steps"])
        fences = {r["id"]: shared.Fence(r["id"], "w-test", int(r["epoch"])) for r in claimed}
        ids = [h.run_id for h in handles]
        assert set(fences) == set(ids)

        def end(run_id: str, i: int) -> Any:
            entry = {"step_key": "double#0", "kind": "step", "status": "completed", "output": str(i), "seq": 0}
            return client.store.write(
                runs.finish_run,
                fences[run_id],
                now,
                status="succeeded",
                output=str(i),
                entries=[store_journal.Entry(entry, now)],
            )

        stale = shared.Fence(ids[3], "w-other", 1)
        together = await asyncio.gather(
            *(end(run_id, i) for i, run_id in enumerate(ids[:3])),
            client.store.write(runs.finish_run, stale, now, status="succeeded", output="9"),
            return_exceptions=True,
        )
        assert together[:3] == [[], [], []]
        assert isinstance(together[3], shared.Fenced)
        assert sizes[0] == 4  # all four in one commit's many form (refused as a whole, then run one by one)
        for i, run_id in enumerate(ids[3:], start=3):
            assert await end(run_id, i) == []
        for i, run_id in enumerate(ids):
            run = await client.get_run(run_id)
            assert (run.status, run.output, run.owner) == ("succeeded", i, None)
            assert [e.type for e in await client.events(run_id)] == ["run-started", "run-succeeded"]
            assert [(s.key, s.output) for s in await client.steps(run_id)] == [("double#0", i)]


def _held(i: int, now: float) -> list[store_journal.Entry]:
    """Held entries of every shape a run writes: a completed step (with its attempt row), a failed one, a
    pending timer with a due time, an entry whose times are its own."""
    attempt = {
        "run_id": f"placeholder-{i}",
        "step_key": "double#0",
        "attempt": 2,
        "status": "completed",
        "input": '{"n": 1}',
        "started_at": now - 0.25,
        "finished_at": now,
    }
    return [
        store_journal.Entry(
            {"step_key": "double#0", "kind": "step", "status": "completed", "output": str(i), "seq": 0}, now, attempt
        ),
        store_journal.Entry(
            {
                "step_key": "fail#0",
                "kind": "step",
                "status": "failed",
                "error_tag": "ValueError",
                "seq": 1,
                "error_message": f"bad {i} \u00e9\u4e2d",
                "attempts": 3,
            },
            now + 0.1234567891,
        ),
        store_journal.Entry(
            {"step_key": "sleep#0", "kind": "sleep", "status": "pending", "due_at": now + 86_400.123456789, "seq": 2},
            now + 0.2,
        ),
        store_journal.Entry(
            {
                "step_key": "own#0",
                "kind": "step",
                "status": "completed",
                "output": None,
                "seq": 3,
                "started_at": now - 1 / 3,
                "finished_at": None,
            },
            now + 0.3,
        ),
    ]


@pytest.mark.parametrize("rows_in_one", [True, False], ids=["one-statement", "per-row"])
async def test_held_entries_of_many_runs_are_written_by_one_statement_as_one_by_one(
    store_url: str, rows_in_one: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record_held`` (the many-at-once forms' journal write) writes the rows ``record_entries`` writes run by run,
    in one statement or (where a statement per row is cheaper) per row; one run whose lease moved on refuses
    the whole write, which leaves nothing behind."""
    async with lg.Client(app_with_steps(), store_url) as client:

        async def tx_type(tx: Any) -> type:
            return type(tx)

        monkeypatch.setattr(await client.store.write(tx_type), "rows_in_one", rows_in_one)
        handles = [await client.start("steps", {"n": 1}) for _ in range(8)]
        now = client.clock.now()
        claimed = await client.store.write(runs.claim_runs, "w-test", now, now + 3600, 8, ["steps"])
        fences = {r["id"]: shared.Fence(r["id"], "w-test", int(r["epoch"])) for r in claimed}
        ids = [h.run_id for h in handles]

        def held(i: int) -> list[store_journal.Entry]:
            return [e._replace(attempt=e.attempt and {**e.attempt, "run_id": ids[i]}) for e in _held(i % 4, now)]

        for i in range(4):  # one by one
            await client.store.write(store_journal.record_entries, fences[ids[i]], held(i))
        stale = shared.Fence(ids[7], "w-test", fences[ids[7]].epoch + 1)

        async def together(tx: Any, items: list[tuple[shared.Fence, list[store_journal.Entry]]]) -> None:
            await store_journal.record_held(tx, items)

        with pytest.raises(shared.Fenced):
            await client.store.write(together, [(fences[ids[i]], held(i)) for i in range(4, 7)] + [(stale, held(7))])
        for i in range(4, 8):
            assert await client.store.read(store_journal.load_journal, ids[i]) == []
        await client.store.write(together, [(fences[ids[i]], held(i)) for i in range(4, 8)])

        async def rows(i: int) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
            journal = [{**r, "run_id": None} for r in await client.store.read(store_journal.load_journal, ids[i])]
            attempts = [(a.step_key, a.attempt, a.status, a.started_at) for a in await client.attempts(ids[i])]
            return journal, attempts

        for i in range(4):
            alone, many = await rows(i), await rows(i + 4)
            assert many == alone
            assert len(alone[0]) == 4 and alone[1]
        journal = (await rows(5))[0]
        assert [r["due_at"] for r in journal if r["kind"] == "sleep"] == [now + 86_400.123456789]
        assert journal[1]["error_message"] == "bad 1 \u00e9\u4e2d"
        assert (journal[3]["started_at"], journal[3]["finished_at"]) == (now - 1 / 3, None)


async def test_runs_ending_in_one_group_commit_write_their_held_entries_together(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many runs ending (or flushing held entries) in one group commit write their entries together
    (``record_held``: one statement on PostgreSQL)."""
    sizes: list[int] = []
    record_held = store_journal.record_held

    async def spy(tx: Any, held: Any) -> None:
        sizes.append(len(held))
        await record_held(tx, held)

    monkeypatch.setattr(store_journal, "record_held", spy)
    async with lg.Engine(app_with_steps(), store_url) as engine:
        handles = [await engine.start("steps", {"n": 3}) for _ in range(30)]
        assert [await h.result(timeout=30) for h in handles] == [6] * 30
        for h in handles:
            assert [s.key for s in await engine.steps(h.run_id)] == ["double#0", "double#1", "double#2"]
    assert max(sizes) > 1  # some group commit carried several runs' entries
