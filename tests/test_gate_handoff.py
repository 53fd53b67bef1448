"""A freed concurrency slot passes to the next start in line in the commit that frees it (gate/handoff.py).

Runs here hold their slot until a ``go`` signal when ``hold`` is set. Most tests stop
the drainer's passes, so whatever is admitted was admitted by a run's end; the last
ones let it run and check that what the hand-off leaves is still decided in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.gate import handoff as handoff_module
from lockgate.gate.handoff import HandOff, Passed, finish_passing
from lockgate.store import coalesce, runs, shared, workers
from lockgate.store.base import Tx
from lockgate.store.coalesce import Call, run_calls
from lockgate.testing import TestEnv

from .apps.gate_probes import ledger_rows, pending_rows, slot_rows, sql
from .apps.waits import eventually


class Job(BaseModel):
    n: int
    key: str = "k"
    hold: bool = False


class Go(BaseModel):
    pass


def make_app(limit: int = 2, **options: Any) -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Job) -> int:
        if p.hold:
            await ctx.wait_for_signal("go", Go)
        return p.n

    app.workflow(name="conc", concurrency=lg.Concurrency(limit=limit, key=lambda p: p.key), **options)(body)
    return app


def stop_drainer(env: TestEnv, monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """Keep the drainer from admitting anything; the list grows by one per pass it skipped."""
    skipped: list[None] = []

    async def tick() -> None:
        skipped.append(None)

    monkeypatch.setattr(env.engine.drainer, "tick", tick)
    return skipped


def watch_passes(env: TestEnv, monkeypatch: pytest.MonkeyPatch) -> list[Passed]:
    """What each run's end passed on, as the engine learns it."""
    seen: list[Passed] = []
    passed = env.engine.dispatcher.passed
    monkeypatch.setattr(env.engine.dispatcher, "passed", lambda p: (seen.append(p), passed(p)))
    return seen


async def run_of(env: TestEnv, ticket: str) -> str | None:
    """The run a start's ticket was admitted as (``None`` while it is parked)."""
    rows = [r for r in await ledger_rows(env.engine, ticket) if r["outcome"] == "admitted"]
    return rows[-1]["run_id"] if rows else None


async def waits(env: TestEnv, run_id: str) -> bool:
    """Whether the run has reached its ``go`` signal (entered, and parked there)."""
    return (await env.engine.get_run(run_id)).waiting_on == "signal"


async def test_an_ending_run_admits_and_claims_the_next_start_in_its_own_commit(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with env_factory(make_app(limit=2)) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        handles = [await e.start("conc", {"n": i, "hold": True}) for i in range(5)]
        assert [h.status for h in handles] == ["started"] * 2 + ["queued"] * 3
        await env.settle()
        first = handles[0].run_id
        assert first is not None
        await e.signal(first, "go", {})
        assert await e.result(first, timeout=10) == 0
        successor = await run_of(env, handles[2].ticket)
        assert successor is not None  # read at once: admitted by the commit that ended the first run
        (ended,) = await sql(env.store_url, "SELECT finished_at FROM lockgate_runs WHERE id = ?", first)
        (row,) = await sql(env.store_url, "SELECT * FROM lockgate_runs WHERE id = ?", successor)
        assert row["created_at"] == ended["finished_at"]
        assert (row["epoch"], row["entries"]) == (1, 1)
        claimed = seen[0].claimed  # claimed by this engine as it was created, and launched here
        assert claimed is not None and (claimed["id"], claimed["owner"]) == (successor, e.worker_id)
        assert {s["run_id"] for s in await slot_rows(env.store_url)} == {handles[1].run_id, successor}
        drain = [r for r in await ledger_rows(e, handles[2].ticket) if r["kind"] == "drain"]
        assert [(r["outcome"], r["control"], r["key"], r["run_id"]) for r in drain] == [
            ("admitted", "concurrency", "k", successor)
        ]
        assert [r["ticket"] for r in await pending_rows(env.store_url)] == [h.ticket for h in handles[3:]]
        await eventually(lambda: waits(env, successor), what="the claimed run at its signal")
        # each end passes its slot on, in arrival order, until the queue is empty
        order = [first]
        for h in handles[1:]:
            run_id = h.run_id or await run_of(env, h.ticket)
            assert run_id is not None, f"{h.ticket} was not admitted when its turn came"
            await eventually(lambda r=run_id: waits(env, r), what=f"run {run_id} at its signal")
            await e.signal(run_id, "go", {})
            await e.result(run_id, timeout=10)
            order.append(run_id)
        assert await pending_rows(env.store_url) == []
        assert await slot_rows(env.store_url) == []
        assert len(set(order)) == 5


async def test_the_claimed_row_is_the_row_stored(env_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run an end claims is executed from the row the op built, not read back: it must be the stored one."""
    async with env_factory(make_app(limit=1, timeouts=lg.Timeouts(finish="1h"))) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        handles = [await e.start("conc", {"n": i, "hold": i == 0}) for i in range(2)]
        await env.settle()
        assert handles[0].run_id is not None
        held: list[dict[str, Any]] = []
        launch = e.dispatcher.launch
        successor = handles[1].ticket  # its run waits here until compared; the first run resumes as usual
        monkeypatch.setattr(
            e.dispatcher,
            "launch",
            lambda row, journal=None: held.append(row) if row["ticket"] == successor else launch(row, journal),
        )
        await e.signal(handles[0].run_id, "go", {})
        # the successor may be launched as the claim's COMMIT goes out, before the end's answer: wait for both
        await eventually(lambda: held and seen, what="a claimed successor and its claim's commit")
        claimed = held[0]  # held back here, it is launched again as the commit answers: the same row
        assert all(row is claimed for row in held)
        assert seen[0].claimed is claimed
        (stored,) = await sql(env.store_url, "SELECT * FROM lockgate_runs WHERE id = ?", claimed["id"])
        assert stored["owner"] == e.worker_id
        assert {k: claimed[k] for k in stored if k in claimed} == {k: stored[k] for k in stored if k in claimed}
        read = {"id", "workflow", "payload", "version", "patches", "recording", "owner", "epoch", "entries"}
        assert read | {"reclaim_count", "deadline_at", "slot_scope", "slot_key", "parent_id", "progress_at"} <= set(
            claimed
        )
        launch(claimed)
        assert await e.result(claimed["id"], timeout=10) == 1


async def _held(client: lg.Client, key: str, n: int) -> list[shared.Fence]:
    """``n`` runs of key ``key`` started and claimed by a worker of the test's own."""
    handles = [await client.start("conc", {"n": i, "key": key, "hold": True}) for i in range(n)]
    now = client.clock.now()
    claimed = await client.store.write(runs.claim_runs, "w-test", now, now + 3600, n, ["conc"])
    by_id = {r["id"]: r for r in claimed}
    assert set(by_id) == {h.run_id for h in handles}
    return [shared.Fence(r["id"], "w-test", int(r["epoch"])) for r in by_id.values()]


def _hand_off(client: lg.Client, key: str) -> HandOff:
    defn = client.app.get("conc")
    return HandOff("wf:conc", key, 3, defn.gate, client.new_run_row(defn, "{}"), "w-test", 3600.0)


async def test_runs_ending_in_one_commit_pass_their_slots_as_if_one_by_one(store_url: str) -> None:
    """The many-at-once form (runs of one key ending in one group commit) admits and claims what the same ends
    committed one by one admit and claim: here key ``a`` ends together, key ``b`` one by one."""
    async with lg.Client(make_app(limit=3), store_url) as client:
        fences = {key: await _held(client, key, 3) for key in ("a", "b")}
        parked = {key: [await client.start("conc", {"n": 10 + i, "key": key}) for i in range(5)] for key in "ab"}
        now = client.clock.now()
        ends = [
            Call(finish_passing, (f, now, _hand_off(client, "a")), {"status": "succeeded", "output": "1"})
            for f in fences["a"]
        ]

        async def together(tx: Tx) -> list[Passed]:
            return await run_calls(tx, ends)

        passed = {"a": await client.store.write(together)}
        passed["b"] = [
            await client.store.write(finish_passing, f, now, _hand_off(client, "b"), status="succeeded", output="1")
            for f in fences["b"]
        ]
        for key in "ab":
            tickets = [h.ticket for h in parked[key]]
            assert [p.claimed["ticket"] if p.claimed else None for p in passed[key]] == tickets[:3]
            assert all(p.settled and p.unclaimed == 0 and p.stopped == [] for p in passed[key])
            live = await sql(
                store_url,
                "SELECT ticket, owner, epoch, entries FROM lockgate_runs WHERE slot_key = ? AND status = 'running'",
                key,
            )
            assert sorted(r["ticket"] for r in live) == sorted(tickets[:3])
            assert {(r["owner"], r["epoch"], r["entries"]) for r in live} == {("w-test", 1, 1)}
            assert [r["ticket"] for r in await pending_rows(store_url) if r["hold_key"] == key] == tickets[3:]
            assert len([s for s in await slot_rows(store_url) if s["key"] == key]) == 3
            admitted = await sql(
                store_url,
                "SELECT ticket FROM lockgate_ledger WHERE kind = 'drain' AND outcome = 'admitted' AND key = ? "
                "ORDER BY id",
                key,
            )
            assert [r["ticket"] for r in admitted] == tickets[:3]


async def test_a_start_the_hand_off_cannot_decide_stops_it_and_the_drainer_keeps_the_order(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start with an idempotency key at the head of the line is the pipeline's to decide: nothing behind it
    passes it; the drainer then admits it first."""
    async with env_factory(make_app(limit=1)) as env:
        e = env.engine
        skipped = stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        first = await e.start("conc", {"n": 0, "hold": True})
        keyed = await e.start("conc", {"n": 1, "hold": True}, idempotency_key="once")
        plain = await e.start("conc", {"n": 2, "hold": True})
        assert (keyed.status, plain.status) == ("queued", "queued")
        await env.settle()
        assert first.run_id is not None
        await e.signal(first.run_id, "go", {})
        await e.result(first.run_id, timeout=10)
        await eventually(lambda: seen, what="the end's hand-off")
        assert (seen[0].claimed, seen[0].settled) == (None, False)  # stopped at the keyed start: the drainer's
        assert await run_of(env, keyed.ticket) is None and await run_of(env, plain.ticket) is None
        assert skipped  # the drainer was asked to decide
        monkeypatch.undo()
        await e.drainer.tick()
        assert await run_of(env, keyed.ticket) is not None
        assert await run_of(env, plain.ticket) is None
        assert [r["ticket"] for r in await pending_rows(env.store_url)] == [plain.ticket]


async def test_a_paused_key_keeps_the_freed_slot_from_passing_on(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with env_factory(make_app(limit=1)) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        first = await e.start("conc", {"n": 0, "hold": True})
        second = await e.start("conc", {"n": 1})
        await env.settle()
        await e.pause_key("k", reason="provider down")
        assert first.run_id is not None
        await e.signal(first.run_id, "go", {})
        await e.result(first.run_id, timeout=10)
        assert seen == []  # the end did not try: the key is paused
        assert await slot_rows(env.store_url) == []
        assert [r["ticket"] for r in await pending_rows(env.store_url)] == [second.ticket]
        monkeypatch.undo()
        await e.unpause_key("k")
        await e.drainer.tick()
        run_id = await run_of(env, second.ticket)
        assert run_id is not None and await e.result(run_id, timeout=10) == 1


async def test_a_start_past_its_start_timeout_is_not_admitted_by_an_end(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with env_factory(make_app(limit=1, timeouts=lg.Timeouts(start="1m"))) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        first = await e.start("conc", {"n": 0, "hold": True})
        late = await e.start("conc", {"n": 1})
        await env.settle()
        env.clock.advance("2m")
        assert first.run_id is not None
        await e.signal(first.run_id, "go", {})
        await e.result(first.run_id, timeout=10)
        await eventually(lambda: seen, what="the end's hand-off")
        assert (seen[0].claimed, seen[0].settled) == (None, False)
        monkeypatch.undo()
        await e.drainer.tick()
        assert [r["outcome"] for r in await ledger_rows(e, late.ticket)] == ["queued", "expired"]


async def test_an_end_whose_lease_was_lost_admits_nothing(store_url: str) -> None:
    async with lg.Client(make_app(limit=1), store_url) as client:
        (fence,) = await _held(client, "a", 1)
        waiting = await client.start("conc", {"n": 1, "key": "a"})
        stale = shared.Fence(fence.run_id, fence.owner, fence.epoch + 1)
        with pytest.raises(shared.Fenced):
            now = client.clock.now()
            await client.store.write(finish_passing, stale, now, _hand_off(client, "a"), status="succeeded")
        assert [r["ticket"] for r in await pending_rows(store_url)] == [waiting.ticket]
        assert [s["run_id"] for s in await slot_rows(store_url)] == [fence.run_id]
        (run,) = await sql(store_url, "SELECT status, owner FROM lockgate_runs WHERE id = ?", fence.run_id)
        assert run == {"status": "running", "owner": "w-test"}


def holding_app(release: dict[int, asyncio.Event], limit: int = 3) -> lg.App:
    """Runs of one key whose step holds until ``release[n]`` is set."""

    async def hold(n: int) -> int:
        await release[n].wait()
        return n

    app = lg.App()

    @app.workflow(name="conc", concurrency=lg.Concurrency(limit=limit))
    async def body(ctx: lg.Context, p: Job) -> int:
        return int(await ctx.step("hold", hold, p.n))

    return app


async def test_a_worker_past_its_share_of_a_key_leaves_the_next_run_to_workers_that_hear_of_it(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With three live workers and a limit of three, a worker already executing two runs of the key does not
    claim the start its ending run admits where the others are woken for it (PostgreSQL): the run is created
    unclaimed, for whichever worker asks first, so a key's work spreads. Where they would find it only at their
    next poll (SQLite), the ending worker claims it and executes it at once."""
    release = {n: asyncio.Event() for n in range(4)}
    async with env_factory(holding_app(release)) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        now = env.clock.now()
        for other in ("wkr_other_1", "wkr_other_2"):  # two more workers alive: this one's share is one slot
            await e.store.write(workers.register_with_lease, other, "elsewhere", 1, now, 15.0)
        handles = [await e.start("conc", {"n": n}) for n in range(4)]
        assert [h.status for h in handles] == ["started"] * 3 + ["queued"]
        await eventually(lambda: len(e.executing) == 3, what="three runs executing")
        release[0].set()
        await eventually(lambda: seen, what="the first end's hand-off")
        run_id = await run_of(env, handles[3].ticket)
        assert run_id is not None
        if e.store.cross_process_wakeups:
            assert (seen[0].claimed, seen[0].unclaimed, seen[0].settled) == (None, 1, True)
        else:
            claimed = seen[0].claimed
            assert claimed is not None and (claimed["id"], claimed["owner"]) == (run_id, e.worker_id)
            assert (seen[0].unclaimed, seen[0].settled) == (0, True)
        for n in (1, 2, 3):
            release[n].set()
        assert await e.result(run_id, timeout=10) == 3


async def test_a_worker_without_room_leaves_the_next_run_to_any_worker(
    env_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stopping (draining) claims nothing more: the run its end admits is created unclaimed."""
    release = {n: asyncio.Event() for n in range(3)}
    async with env_factory(holding_app(release, limit=2)) as env:
        e = env.engine
        stop_drainer(env, monkeypatch)
        seen = watch_passes(env, monkeypatch)
        handles = [await e.start("conc", {"n": n}) for n in range(3)]
        assert [h.status for h in handles] == ["started"] * 2 + ["queued"]
        attempting = lambda: sum(x.attempting for x in e.dispatcher.executions.values()) == 2  # noqa: E731
        await eventually(attempting, what="two runs inside their step")
        e.dispatcher.draining = True  # as ``close(grace=...)`` sets it: no new run is taken on here
        release[0].set()
        await eventually(lambda: seen, what="the first end's hand-off")
        assert (seen[0].claimed, seen[0].unclaimed) == (None, 1)
        run_id = await run_of(env, handles[2].ticket)
        assert run_id is not None  # admitted into the freed slot all the same, for any worker to claim


async def test_runs_ending_together_with_one_lease_lost_end_one_by_one(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stale fence among runs ending in one group commit: the others end and pass their slots on, in
    order; the stale one is refused and keeps its slot."""
    tried: list[int] = []
    together = handoff_module._finish_passing_many

    async def spy(tx: Tx, calls: Any) -> list[Passed]:
        tried.append(len(calls))
        return await together(tx, calls)

    monkeypatch.setattr(handoff_module, "_finish_passing_many", spy)
    monkeypatch.setitem(coalesce._MANY, finish_passing, spy)
    async with lg.Client(make_app(limit=3), store_url) as client:
        fences = await _held(client, "a", 3)
        parked = [await client.start("conc", {"n": 10 + i, "key": "a"}) for i in range(3)]
        stale = shared.Fence(fences[1].run_id, fences[1].owner, fences[1].epoch + 1)
        now = client.clock.now()
        handoff = _hand_off(client, "a")
        ends = [Call(finish_passing, (f, now, handoff), {"status": "succeeded"}) for f in (fences[0], stale, fences[2])]
        futures = [client.store.write(call.op, *call.args, **call.kwargs) for call in ends]
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(outcomes[1], shared.Fenced)
        claimed = [o.claimed["ticket"] for o in outcomes if isinstance(o, Passed) and o.claimed]
        assert claimed == [h.ticket for h in parked[:2]]
        assert [r["ticket"] for r in await pending_rows(store_url)] == [parked[2].ticket]
        slots = {s["run_id"] for s in await slot_rows(store_url)}
        assert fences[1].run_id in slots and fences[0].run_id not in slots and len(slots) == 3
        assert tried[0] == 3  # they were tried together first, then one by one


async def _gate_wakeups(store_url: str, act: Any) -> list[str]:
    """The wake-up channels another process hears while ``act()`` runs (PostgreSQL's LISTEN/NOTIFY)."""
    import json

    import psycopg

    async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as listener:
        await listener.execute("LISTEN lockgate")
        await act()
        await listener.execute("SELECT 1")  # notifications committed before this have arrived
        heard: list[str] = []
        async for note in listener.notifies(timeout=0.5, stop_after=20):
            heard.append(json.loads(note.payload)[1])
        return heard


async def test_a_slot_passed_on_wakes_no_other_drainer_unless_it_leaves_work(
    store_url: str, store_kind: str
) -> None:
    """A hand-off that decides its key's whole line raises no 'gate' wake-up (nobody else has anything to drain);
    one that stops at a start it cannot decide raises one, as a plain slot release does."""
    if store_kind != "postgres":
        pytest.skip("only PostgreSQL wakes other processes from its triggers")
    async with lg.Client(make_app(limit=3), store_url) as client:
        fences = await _held(client, "a", 3)
        assert (await client.start("conc", {"n": 10, "key": "a"})).status == "queued"
        now = client.clock.now()

        async def settled() -> None:
            passed = await client.store.write(
                finish_passing, fences[0], now, _hand_off(client, "a"), status="succeeded", output="1"
            )
            assert passed.settled and passed.claimed is not None

        assert "gate" not in await _gate_wakeups(store_url, settled)
        waiting = await client.start("conc", {"n": 11, "key": "a"}, idempotency_key="the pipeline decides this one")
        assert waiting.status == "queued"

        async def unsettled() -> None:
            passed = await client.store.write(
                finish_passing, fences[1], now, _hand_off(client, "a"), status="succeeded", output="1"
            )
            assert not passed.settled and passed.claimed is None

        assert "gate" in await _gate_wakeups(store_url, unsettled)


def test_a_worker_whose_runs_end_together_keeps_its_share_and_leaves_the_rest() -> None:
    """Ten runs of one worker ending in one commit: it claims its share (4 of a limit of 10 over 3 workers) in
    their place, not none (each saw nine others of its own still running), and leaves the other six."""
    plan = make_app(limit=10).validate()["conc"].gate
    ends = [(Passed([]), HandOff("wf:conc", "k", 10, plan, {}, "w-1", 15.0, held=9, room=200), 0.0) for _ in range(10)]
    claimers = handoff_module._claimers(ends, share=4)
    assert [handoff.owner for _, handoff in claimers] == ["w-1"] * 4
    # one run ending beside three others of its worker still running: it stays within its share
    one = [(Passed([]), HandOff("wf:conc", "k", 10, plan, {}, "w-1", 15.0, held=3, room=200), 0.0)]
    assert len(handoff_module._claimers(one, share=4)) == 1
    past = [(Passed([]), HandOff("wf:conc", "k", 10, plan, {}, "w-1", 15.0, held=4, room=200), 0.0)]
    assert handoff_module._claimers(past, share=4) == []
