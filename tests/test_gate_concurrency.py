"""Concurrency at the gate: per-key limits, pools, total and burst, slots and their reclaiming.

Runs in these tests enter an ``InFlight`` counter in their first step, wait for a
``go`` signal, and leave it in their last step, so the counter's peak is the most
bodies that were ever in flight together. Every observation also checks the slots
table against the runs table: each live gated run holds exactly one slot and no
ended run keeps one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate_probes import InFlight, pending_rows, slot_rows, sql
from .apps.waits import eventually


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Go(BaseModel):
    ok: bool = True


def gated_app(track: InFlight, *names: str, group: str | None = None, **concurrency: Any) -> lg.App:
    """Workflows ``names`` under one concurrency declaration; each body is counted under ``group`` or its key."""
    app = lg.App()
    options: dict[str, Any] = {"key": lambda p: p.key, **concurrency}
    timeouts = options.pop("timeouts", None)
    for name in names or ("cc",):

        async def body(ctx: lg.Context, p: Job) -> int:
            where = group or p.key
            await ctx.step("enter", track.enter, where)
            await ctx.wait_for_signal("go", Go)
            await ctx.step("leave", track.leave, where)
            return p.n

        app.workflow(name=name, concurrency=lg.Concurrency(**options), timeouts=timeouts)(body)
    return app


async def check_slots(env: TestEnv | lg.Engine, limit: int, *, by: str = "key") -> Counter[str]:
    """Slots match live gated runs one to one, and no key (or scope) holds more than ``limit``.

    One statement reads both tables, so the check sees a single committed state even while runs end.
    """
    url = env.store_url if isinstance(env, TestEnv) else env.store.url
    rows = await sql(
        url,
        "SELECT s.run_id AS slot, r.id AS run, s.scope, s.key FROM lockgate_slots s "
        "LEFT JOIN lockgate_runs r ON r.id = s.run_id AND r.status IN ('running', 'suspended') "
        "UNION ALL "
        "SELECT NULL, r.id, r.slot_scope, r.slot_key FROM lockgate_runs r "
        "WHERE r.slot_scope IS NOT NULL AND r.status IN ('running', 'suspended') "
        "AND NOT EXISTS (SELECT 1 FROM lockgate_slots s WHERE s.run_id = r.id)",
    )
    unmatched = [r for r in rows if r["slot"] is None or r["run"] is None]
    assert unmatched == [], f"slots and live gated runs differ: {unmatched}"
    per = Counter(str(r[by]) for r in rows)
    assert all(n <= limit for n in per.values()), per
    return per


async def waiting_runs(engine: lg.Client, workflow: str | None = None) -> list[lg.RunInfo]:
    """Running runs parked on their ``go`` signal, oldest first."""
    runs = await engine.list_runs(workflow=workflow, status="running", limit=500)
    return sorted((r for r in runs if r.waiting_on == "signal"), key=lambda r: (r.created_at, r.id))


async def release(env: TestEnv, run_id: str) -> None:
    """Let one run finish, then let the drainer hand its slot on."""
    await env.engine.signal(run_id, "go", {})
    await env.settle()
    await env.engine.drainer.tick()
    await env.settle()


async def drive_to_end(env: TestEnv, track: InFlight, limit: int, total: int, *, by: str = "key") -> None:
    """Release the oldest waiting run until ``total`` runs succeeded, checking the limit at every step."""
    for _ in range(total * 3):
        await check_slots(env, limit, by=by)
        done = await env.engine.list_runs(status="succeeded", limit=500)
        if len(done) == total:
            break
        waiting = await waiting_runs(env.engine)
        assert waiting, f"nothing in flight and only {len(done)} of {total} done: {await pending_rows(env.store_url)}"
        await release(env, waiting[0].id)
    else:
        raise AssertionError("runs did not all finish")
    assert await pending_rows(env.store_url) == []
    assert await slot_rows(env.store_url) == []
    assert all(n == 0 for n in track.live.values()), track.live


# -- per key ---------------------------------------------------------------------------------


async def test_never_more_than_limit_in_flight_per_key(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=2)) as env:
        handles = [await env.engine.start("cc", {"key": "a", "n": i}) for i in range(5)]
        handles += [await env.engine.start("cc", {"key": "b", "n": 10 + i}) for i in range(3)]
        assert [h.status for h in handles] == ["started"] * 2 + ["queued"] * 3 + ["started"] * 2 + ["queued"]
        for h in handles:
            if h.status == "queued":
                assert h.run_id is None
                assert h.deferral is not None and h.deferral.mode == "concurrency"
                assert h.deferral.key == ("a" if handles.index(h) < 5 else "b")
                assert h.deferral.due_at is None  # admitted on a freed slot, not at a time
        await env.settle()
        assert track.live == {"a": 2, "b": 2}
        assert await check_slots(env, 2) == {"a": 2, "b": 2}
        await drive_to_end(env, track, limit=2, total=8)
        assert track.peak == {"a": 2, "b": 2}
        assert track.entered == {"a": 5, "b": 3}
        outputs = sorted([await env.engine.result(r.id) for r in await env.engine.list_runs(limit=50)])
        assert outputs == [0, 1, 2, 3, 4, 10, 11, 12]


async def test_a_full_key_does_not_hold_another_key(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        first = await env.engine.start("cc", {"key": "a"})
        held = await env.engine.start("cc", {"key": "a"})
        other = await env.engine.start("cc", {"key": "b"})
        assert (first.status, held.status, other.status) == ("started", "queued", "started")
        await env.settle()
        assert await check_slots(env, 1) == {"a": 1, "b": 1}


async def test_queued_starts_are_admitted_in_arrival_order_as_slots_free(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        handles = [await env.engine.start("cc", {"n": i}) for i in range(4)]
        await env.settle()
        admitted: list[int] = []
        for _ in range(4):
            (run,) = await waiting_runs(env.engine)
            admitted.append(run.payload["n"])
            await release(env, run.id)
        assert admitted == [0, 1, 2, 3]
        assert [(await env.engine.trace(h.ticket)).state for h in handles] == ["succeeded"] * 4


async def test_a_terminal_run_frees_its_slot_when_it_ends(env_factory: Any) -> None:
    """The slot row goes in the transaction that ends the run: no drainer pass is needed for it."""
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        first = await env.engine.start("cc", {"key": "a"})
        await env.engine.start("cc", {"key": "a"})
        await env.settle()
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [first.run_id]
        await env.engine.signal(first.run_id, "go", {})
        assert await env.engine.result(first.run_id, timeout=10) == 0
        # read at once: the run's end and its slot's release are one commit
        ended = await sql(
            env.store_url,
            "SELECT r.status, s.run_id AS slot FROM lockgate_runs r LEFT JOIN lockgate_slots s ON s.run_id = r.id "
            "WHERE r.id = ?",
            first.run_id,
        )
        assert ended == [{"status": "succeeded", "slot": None}]
        await env.engine.drainer.tick()
        await env.settle()
        (second,) = await waiting_runs(env.engine)
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [second.id]


# -- pools ---------------------------------------------------------------------------------


async def test_a_pool_is_one_budget_across_workflows(env_factory: Any) -> None:
    track = InFlight()
    app = gated_app(track, "pool.a", "pool.b", group="openai", limit=3, pool="openai", key=None)
    async with env_factory(app) as env:
        handles = []
        for i in range(5):
            handles.append(await env.engine.start("pool.a", {"n": i}))
            handles.append(await env.engine.start("pool.b", {"n": 100 + i}))
        assert Counter(h.status for h in handles) == {"started": 3, "queued": 7}
        await env.settle()
        assert await check_slots(env, 3, by="scope") == {"pool:openai": 3}
        assert {s["workflow"] for s in await slot_rows(env.store_url)} == {"pool.a", "pool.b"}
        await drive_to_end(env, track, limit=3, total=10, by="scope")
        assert track.peak == {"openai": 3}
        assert track.entered == {"openai": 10}
        by_workflow = Counter(r.workflow for r in await env.engine.list_runs(status="succeeded", limit=50))
        assert by_workflow == {"pool.a": 5, "pool.b": 5}


async def test_the_key_partitions_a_pool(env_factory: Any) -> None:
    track = InFlight()
    app = gated_app(track, "pool.a", "pool.b", limit=1, pool="crm")
    async with env_factory(app) as env:
        a1 = await env.engine.start("pool.a", {"key": "t1"})
        b1 = await env.engine.start("pool.b", {"key": "t1"})
        b2 = await env.engine.start("pool.b", {"key": "t2"})
        a2 = await env.engine.start("pool.a", {"key": "t2"})
        assert [h.status for h in (a1, b1, b2, a2)] == ["started", "queued", "started", "queued"]
        assert b1.deferral is not None and b1.deferral.key == "t1"
        await env.settle()
        assert await check_slots(env, 1) == {"t1": 1, "t2": 1}
        await drive_to_end(env, track, limit=1, total=4)
        assert track.peak == {"t1": 1, "t2": 1}


# -- total and burst ---------------------------------------------------------------------------


async def test_total_caps_every_key_together(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, group="all", limit=2, total=3)) as env:
        statuses = [(await env.engine.start("cc", {"key": k})).status for k in ("a", "a", "b", "b", "c")]
        # a, a, b fill the total of 3; the second b and c wait although their keys are under the limit
        assert statuses == ["started", "started", "started", "queued", "queued"]
        await env.settle()
        assert await check_slots(env, 2) == {"a": 2, "b": 1}
        await drive_to_end(env, track, limit=3, total=5, by="scope")
        assert track.peak["all"] == 3


async def test_burst_borrows_idle_room_while_the_total_is_not_reached(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1, total=3, burst=2)) as env:
        a = [await env.engine.start("cc", {"key": "a"}) for _ in range(3)]
        # a borrows one slot past its limit of 1, up to burst=2; its third start waits
        assert [h.status for h in a] == ["started", "started", "queued"]
        b = await env.engine.start("cc", {"key": "b"})
        assert b.status == "started"  # the total (3) is now reached
        c = await env.engine.start("cc", {"key": "c"})
        assert c.status == "queued"  # c holds nothing, but there is no room left under the total
        await env.settle()
        assert await check_slots(env, 2) == {"a": 2, "b": 1}
        await drive_to_end(env, track, limit=2, total=5)
        assert track.peak == {"a": 2, "b": 1, "c": 1}


async def test_burst_cannot_borrow_once_the_total_is_reached(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1, total=2, burst=3)) as env:
        statuses = [(await env.engine.start("cc", {"key": "a"})).status for _ in range(3)]
        assert statuses == ["started", "started", "queued"]  # burst 3 allows a third, the total of 2 does not
        await env.settle()
        assert await check_slots(env, 2, by="scope") == {"wf:cc": 2}


# -- reclaiming slots ------------------------------------------------------------------------


async def test_the_drainer_reclaims_the_slot_of_a_deleted_run(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        gone = await env.engine.start("cc", {"n": 1})
        waiting = await env.engine.start("cc", {"n": 2})
        await env.settle()
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [gone.run_id]
        # The engine's own drainer may reclaim it as soon as the delete commits (PostgreSQL tells it): the
        # slot is looked at once this tick is done.
        await sql(env.store_url, "DELETE FROM lockgate_runs WHERE id = ?", gone.run_id)
        await env.engine.drainer.tick()
        assert gone.run_id not in [s["run_id"] for s in await slot_rows(env.store_url)]
        await env.engine.drainer.tick()
        await env.settle()
        trace = await env.engine.trace(waiting.ticket)
        assert trace.state == "running" and trace.run_id is not None
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [trace.run_id]


async def test_the_drainer_reclaims_the_slot_of_a_run_ended_without_freeing_it(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        broken = await env.engine.start("cc", {"n": 1})
        waiting = await env.engine.start("cc", {"n": 2})
        await env.settle()
        # the slots counted by the statement that ends the run, in its snapshot: read after it, the count would
        # race the engine's own drainer, which may reclaim the slot as soon as the end is committed
        [ended] = await sql(
            env.store_url,
            "UPDATE lockgate_runs SET status = 'failed', waiting_on = NULL, wake_at = NULL WHERE id = ?"
            " RETURNING (SELECT COUNT(*) FROM lockgate_slots) AS slots",
            broken.run_id,
        )
        assert ended["slots"] == 1
        await env.engine.drainer.tick()
        await env.engine.drainer.tick()
        await env.settle()
        trace = await env.engine.trace(waiting.ticket)
        assert trace.state == "running"
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [trace.run_id]


async def test_a_run_past_its_finish_timeout_fails_and_gives_up_its_slot(env_factory: Any) -> None:
    track = InFlight()
    app = gated_app(track, limit=1, timeouts=lg.Timeouts(finish="1m"))
    async with env_factory(app) as env:
        slow = await env.engine.start("cc", {"n": 1})
        waiting = await env.engine.start("cc", {"n": 2})
        await env.settle()
        (slot,) = await slot_rows(env.store_url)
        run = await env.engine.get_run(slow.run_id or "")
        assert slot["expires_at"] == run.raw["deadline_at"]  # the slot's backstop is the finish deadline
        await env.advance("61s")
        await env.engine.drainer.tick()
        await env.engine.drainer.tick()
        await env.settle()
        run = await env.engine.get_run(slow.run_id or "")
        assert (run.status, run.error_tag) == ("failed", "FinishTimeout")
        trace = await env.engine.trace(waiting.ticket)
        assert trace.state == "running"
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [trace.run_id]


async def test_an_expired_slot_is_reclaimed_even_if_its_run_looks_live(env_factory: Any) -> None:
    """A slot past its backstop (the finish deadline) is freed by the drainer whatever the run row says."""
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        held = await env.engine.start("cc", {"n": 1})
        await env.engine.start("cc", {"n": 2})
        await env.settle()
        await sql(env.store_url, "UPDATE lockgate_slots SET expires_at = ? WHERE run_id = ?", 0.0, held.run_id)
        await env.engine.drainer.tick()
        assert held.run_id not in [s["run_id"] for s in await slot_rows(env.store_url)]


async def test_cancelling_a_running_run_frees_its_slot(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        first = await env.engine.start("cc", {"n": 1})
        waiting = await env.engine.start("cc", {"n": 2})
        await env.settle()
        await env.engine.cancel(first.run_id or "", reason="not needed")
        await track.leave("k")  # the cancelled body never reaches its leave step
        # Its slot is freed; the drainer, woken by the free, may have handed it to the parked start already.
        held = [s["run_id"] for s in await slot_rows(env.store_url)]
        assert first.run_id not in held and len(held) <= 1
        await env.engine.drainer.tick()
        await env.settle()
        assert (await env.engine.trace(waiting.ticket)).state == "running"
        await drive_to_end(env, track, limit=1, total=1)


async def test_a_suspended_run_keeps_its_slot(env_factory: Any) -> None:
    """Suspension parks a run with its journal; it is still admitted-and-not-finished, so it keeps its slot.

    Resuming continues under that same slot; only ending the run (here: a cancel) frees it.
    """
    track = InFlight()
    async with env_factory(gated_app(track, limit=1)) as env:
        first = await env.engine.start("cc", {"n": 1})
        waiting = await env.engine.start("cc", {"n": 2})
        await env.settle()
        await env.engine.suspend(first.run_id or "", reason="investigating")
        await env.engine.drainer.tick()
        await env.settle()
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [first.run_id]
        assert (await env.engine.trace(waiting.ticket)).state == "parked"
        await check_slots(env, 1)
        await env.engine.resume(first.run_id or "")
        await env.settle()
        assert [s["run_id"] for s in await slot_rows(env.store_url)] == [first.run_id]
        await env.engine.suspend(first.run_id or "")
        await env.engine.cancel(first.run_id or "", reason="done investigating")
        await track.leave("k")
        assert await slot_rows(env.store_url) == []
        await env.engine.drainer.tick()
        await env.settle()
        assert (await env.engine.trace(waiting.ticket)).state == "running"


# -- the real drainer, in real time ----------------------------------------------------------------


def entered(track: InFlight, group: str, count: int) -> Callable[[], bool]:
    """A probe: at least ``count`` bodies of ``group`` have entered."""
    return lambda: track.entered[group] >= count


def released_app(track: InFlight, gates: dict[int, asyncio.Event], **concurrency: Any) -> lg.App:
    """Bodies hold their step until the test sets their event (real time, no fake clock)."""
    app = lg.App()
    group = concurrency.pop("group", None)

    for name in concurrency.pop("names", ("rt",)):

        async def body(ctx: lg.Context, p: Job) -> int:
            async def work() -> int:
                where = group or p.key
                await track.enter(where)
                try:
                    await gates.setdefault(p.n, asyncio.Event()).wait()
                finally:
                    await track.leave(where)
                return p.n

            return int(await ctx.step("work", work))

        app.workflow(name=name, concurrency=lg.Concurrency(**concurrency))(body)
    return app


async def test_the_real_drainer_admits_queued_starts_as_slots_free(make_engine: Any) -> None:
    track = InFlight()
    gates: dict[int, asyncio.Event] = {}
    async with make_engine(released_app(track, gates, limit=2, key=lambda p: p.key)) as engine:
        handles = [await engine.start("rt", {"key": "a", "n": i}) for i in range(6)]
        assert [h.status for h in handles] == ["started"] * 2 + ["queued"] * 4
        for n in range(6):
            await eventually(entered(track, "a", n + 1), what=f"run {n} entered its step")
            assert track.live["a"] <= 2
            await check_slots(engine, 2)
            gates.setdefault(n, asyncio.Event()).set()
        runs = [(await engine.trace(h.ticket)).run_id for h in handles]
        assert [await engine.result(r, timeout=15) for r in runs if r] == list(range(6))
        assert track.peak["a"] == 2
        assert await slot_rows(engine.store.url) == []


async def test_the_real_drainer_shares_a_pool_between_two_workflows(make_engine: Any) -> None:
    track = InFlight()
    gates: dict[int, asyncio.Event] = {}
    app = released_app(track, gates, names=("rt.a", "rt.b"), group="openai", limit=3, pool="openai")
    async with make_engine(app) as engine:
        handles = []
        for i in range(5):
            handles.append(await engine.start("rt.a", {"n": i}))
            handles.append(await engine.start("rt.b", {"n": 10 + i}))
        assert Counter(h.status for h in handles) == {"started": 3, "queued": 7}
        # one queue for the pool, in arrival order across both workflows
        for i, n in enumerate(n for pair in zip(range(5), range(10, 15), strict=True) for n in pair):
            await eventually(entered(track, "openai", i + 1), what=f"run {n} entered its step")
            assert track.live["openai"] <= 3
            await check_slots(engine, 3, by="scope")
            gates.setdefault(n, asyncio.Event()).set()
        runs = [(await engine.trace(h.ticket)).run_id for h in handles]
        assert sorted([await engine.result(r, timeout=15) for r in runs if r]) == [*range(5), *range(10, 15)]
        assert track.peak["openai"] == 3
        assert track.entered["openai"] == 10
        assert await slot_rows(engine.store.url) == []


async def test_a_redriven_run_counts_against_its_key_again(env_factory: Any) -> None:
    """A failed run gave up its slot; redriving it takes one again, so the gate sees it in flight.

    The redrive is an operator's act and is not queued: with the key already full it briefly
    runs over the limit, and new arrivals wait until the key is back under it.
    """
    broken = {"yes": True}
    app = lg.App()

    def work(n: int) -> int:
        if broken["yes"]:
            raise RuntimeError("provider down")
        return n

    @app.workflow(name="cc", concurrency=lg.Concurrency(limit=1))
    async def body(ctx: lg.Context, p: Job) -> int:
        await ctx.step("work", work, p.n, retry=lg.Retry(max_attempts=1))
        await ctx.wait_for_signal("go", Go)
        return p.n

    async with env_factory(app) as env:
        failed = await env.engine.start("cc", {"n": 1})
        await env.settle()
        assert (await env.engine.get_run(failed.run_id or "")).status == "failed"
        broken["yes"] = False
        second = await env.engine.start("cc", {"n": 2})
        third = await env.engine.start("cc", {"n": 3})
        assert (second.status, third.status) == ("started", "queued")
        await env.engine.redrive(failed.run_id or "")
        await env.settle()
        assert sorted(s["run_id"] for s in await slot_rows(env.store_url)) == sorted([failed.run_id, second.run_id])
        await check_slots(env, 2)
        await release(env, second.run_id or "")
        assert (await env.engine.trace(third.ticket)).state == "parked"  # the redriven run still holds the key
        await release(env, failed.run_id or "")
        assert (await env.engine.trace(third.ticket)).state == "running"
        await check_slots(env, 1)


async def test_a_key_pause_holds_starts_already_waiting_for_a_slot(env_factory: Any) -> None:
    track = InFlight()
    async with env_factory(gated_app(track, limit=1), start=1_800_000_000.0) as env:
        first = await env.engine.start("cc", {"key": "k", "n": 1})
        waiting = await env.engine.start("cc", {"key": "k", "n": 2})
        await env.settle()
        until = datetime.fromtimestamp(1_800_000_000 + 3600, UTC)
        await env.engine.pause_key("k", until=until, reason="provider asked us to back off")
        await release(env, first.run_id or "")
        held = await env.engine.trace(waiting.ticket)
        assert (held.state, held.control, held.key) == ("parked", "key-paused", "k")
        assert held.estimated_admission == until
        assert await slot_rows(env.store_url) == []
        await env.advance("1h")
        await env.engine.drainer.tick()
        await env.settle()
        assert (await env.engine.trace(waiting.ticket)).state == "running"
        await check_slots(env, 1)
