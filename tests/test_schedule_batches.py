"""The sweep fires a tick's due schedules in batches (``engine/firing_many``): one claim transaction
and one gate offer per batch. A batch must leave the same ledger as firing each slot one by one."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any, cast

import psycopg
import pytest

import lockgate as lg
from lockgate.engine.firing_many import DueSchedule, batchable, fire_many
from lockgate.engine.firing_settle import settle
from lockgate.engine.schedule_book import ScheduleBook
from lockgate.engine.schedule_due import due_slots, fire_schedule
from lockgate.store import schedules as sched_ops
from lockgate.store import workers
from lockgate.store.base import Tx
from lockgate.store.sql_files import load_queries
from lockgate.sweeps import base
from lockgate.sweeps import schedules as sweep
from lockgate.sweeps.base import SteadySweep
from lockgate.testing import TestEnv

# The schedules' payloads, and the tests tick the schedules themselves (no background sweep: an autouse fixture).
from .test_schedules import Day, Go, no_background_sweep  # noqa: F401

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()


def by_day(at: datetime) -> dict[str, str]:
    return {"day": at.strftime("%Y-%m-%d %H:%M")}


# Every policy, with four slots due at once after a stop (backfill="all"), and one slot due.
POLICIES: dict[str, dict[str, Any]] = {
    "skip-4": {"on_overlap": "skip", "backfill": "all"},
    "buffer2-4": {"on_overlap": "buffer", "buffer_limit": 2, "backfill": "all"},
    "buffer9-4": {"on_overlap": "buffer", "buffer_limit": 9, "backfill": "all"},
    "cancel-4": {"on_overlap": "cancel_other", "backfill": "all"},
    "cancel-1": {"on_overlap": "cancel_other"},
    "skip-1": {"on_overlap": "skip"},
}


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="slow")
    async def slow(ctx: lg.Context, p: Day) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.day

    for name, options in POLICIES.items():
        app.schedule(name, workflow=slow, every="10m", payload=by_day, **options)
    return app


async def ledger(env: TestEnv, name: str) -> list[tuple[str, str, str | None]]:
    rows = await env.engine.schedule_firings(name, limit=100)
    return [(f.scheduled_at.strftime("%H:%M"), f.status, f.why) for f in reversed(rows)]


async def run_ticks(env: TestEnv, *, batched: bool) -> dict[str, list[tuple[str, str, str | None]]]:
    """A tick at 12:10, one at 12:45 (12:20 to 12:40 due at once) and one at 12:55 (behind the buffered
    ones of the tick before), batched or one by one; then the ledger records the runs' ends (a cancelled
    run's firing)."""
    rt = sweep.runtime_for(env.engine.worker)
    await sweep.register(rt, orphan_others=True)
    for at in (T0 + 601, T0 + 601 + 35 * 60, T0 + 601 + 45 * 60):
        env.clock.set(at)
        if batched:
            await sweep.fire_due(rt)
        else:
            for state in await env.engine.store.read(sched_ops.due_schedules, at, 100):
                await fire_schedule(rt, rt.schedules[state["name"]], state, at)
        await env.settle()
    await settle(rt)
    return {name: await ledger(env, name) for name in POLICIES}


async def test_a_batched_tick_leaves_the_ledger_firing_one_by_one_leaves(store_url: str, tmp_path: Any) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        batched = await run_ticks(env, batched=True)
    async with TestEnv(make_app(), store=f"sqlite:///{tmp_path}/one-by-one.db", start=T0) as env:
        one_by_one = await run_ticks(env, batched=False)
    assert batched == one_by_one
    assert [s for _, s, _ in batched["buffer2-4"]] == ["started", "buffered", "buffered", "skipped", "skipped"]
    assert [s for _, s, _ in batched["skip-4"]] == ["started", "skipped", "skipped", "skipped", "skipped"]
    assert [s for _, s, _ in batched["buffer9-4"]] == ["started", "buffered", "buffered", "buffered", "buffered"]
    assert [s for _, s, _ in batched["cancel-1"]] == ["cancelled", "cancelled", "started"]  # 12:20, 12:30 missed


async def test_a_tick_splits_its_due_schedules_into_batches_and_fires_each_slot_once(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "BATCH", 7)
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Day) -> str:
        return p.day

    async with TestEnv(app, store=store_url, start=T0) as env:
        for i in range(40):
            await env.engine.schedules.create(f"t:{i:02d}", workflow="digest", every="1m", payload={"day": str(i)})
        rt = sweep.runtime_for(env.engine.worker)
        sizes: list[int] = []
        real = sweep.fire_many

        async def counted(rt: Any, batch: Any, now: float) -> Any:
            sizes.append(sum(len(d.due.fire) for d in batch))
            return await real(rt, batch, now)

        monkeypatch.setattr(sweep, "fire_many", counted)
        env.clock.set(T0 + 60.2)
        first = await sweep.fire_due(rt)
        again = await sweep.fire_due(rt)  # nothing due any more: each schedule's next_at moved on
        assert sorted(f.schedule for f in first.fired) == [f"t:{i:02d}" for i in range(40)]
        assert {f.status for f in first.fired} == {"started"} and again.fired == []
        assert sizes == [7, 7, 7, 7, 7, 5]
        await env.settle()
        rows = await env.engine.store.read(sched_ops.firing_counts)
        assert sum(int(r["n"]) for r in rows) == 40


async def test_a_schedule_deleted_before_its_batch_claims_fires_nothing(store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Day) -> str:
        return p.day

    async with TestEnv(app, store=store_url, start=T0) as env:
        for name in ("gone", "kept"):
            await env.engine.schedules.create(name, workflow="digest", every="1m", payload={"day": name})
        env.clock.set(T0 + 60.2)
        rt = sweep.runtime_for(env.engine.worker)
        states = await env.engine.store.read(sched_ops.due_schedules, T0 + 60.2, 10)
        defs = await ScheduleBook(rt.schedules).named(env.engine.store, ["gone", "kept"])
        batch = [
            DueSchedule(defs[s["name"]], s, due_slots(defs[s["name"]], float(s["watermark"]), T0 + 60.2))
            for s in states
        ]
        assert all(batchable(d.sched, d.due) for d in batch)
        await env.engine.schedules.delete("gone")
        out = dict(zip([d.sched.name for d in batch], await fire_many(rt, batch, T0 + 60.2), strict=True))
        assert [f.status for f in out["gone"][0]] == ["deleted"]
        assert [f.status for f in out["kept"][0]] == ["started"]
        assert await env.engine.store.read(sched_ops.firings_of, "gone", 10) == []


async def test_the_many_forms_move_firings_and_advance_schedules_as_the_single_ones(store_url: str) -> None:
    """Both dialects' one-statement forms (SQLite runs them only here: its ops write row by row)."""
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Day) -> str:
        return p.day

    odd = T0 + 3600.123456789  # a time JSON with 15 digits would round
    async with TestEnv(app, store=store_url, start=T0) as env:
        for name in ("a", "b"):
            await env.engine.schedules.create(name, workflow="digest", every="1m", payload={"day": name})
        store = env.engine.store
        claims = [
            {
                "schedule": name, "scheduled_at": T0 + 60, "manual": 0, "cause": "cron", "workflow": "digest",
                "source": f"schedule:{name}", "identity": f"digest\x1f{name}", "idempotency_key": name,
                "owner": "w", "lease_until": T0 + 65, "now": T0 + 60,
            }
            for name in ("a", "b")
        ]  # fmt: skip
        won = await store.write(sched_ops.claim_firings, claims)
        ids = sorted(int(r["id"]) for r in won)
        assert len(ids) == 2
        moves = [
            {"id": ids[0], "expect": "claimed", "status": "started", "run_id": "run_a", "started_at": repr(odd)},
            {"id": ids[1], "expect": "buffered", "status": "skipped", "why": "not in that status"},
        ]
        moves = [
            {**dict.fromkeys(("why", "run_id", "ticket", "start_status", "started_at", "finished_at")), **m}
            for m in moves
        ]
        rows = [{"name": "a", "watermark": repr(odd), "missed": 2, "next_at": repr(odd + 60), "revision": 1}]

        async def many(tx: Tx) -> list[Any]:
            moved = await tx.execute("firings_update_many", {"moves": json.dumps(moves)})
            await tx.execute("schedules_advance_many", {"rows": json.dumps(rows), "now": T0 + 61})
            return moved

        assert [int(r["id"]) for r in await store.write(many)] == [ids[0]]
        first, second = [await store.read(sched_ops.firings_of, name, 1) for name in ("a", "b")]
        assert (first[0]["status"], first[0]["run_id"], first[0]["started_at"]) == ("started", "run_a", odd)
        assert second[0]["status"] == "claimed"
        state = await store.read(sched_ops.schedule_state, "a")
        assert state is not None and (state["watermark"], state["missed"], state["next_at"]) == (odd, 2, odd + 60)
        # The ops, whichever form their store runs: the same outcome.
        assert await store.write(
            sched_ops.move_firings, [{"firing_id": ids[1], "expect": "claimed", "status": "started", "started_at": odd}]
        ) == {ids[1]}
        await store.write(
            sched_ops.advance_many, [{"name": "b", "watermark": odd, "missed": 0, "next_at": odd, "revision": 7}], T0
        )  # an older revision than the row's: nothing written
        state = await store.read(sched_ops.schedule_state, "b")
        assert state is not None and state["watermark"] != odd


async def test_the_batch_statements_are_index_driven_at_20000_schedules(pg_url: str) -> None:
    async with TestEnv(lg.App(), store=pg_url, start=T0):
        pass  # migrated
    queries = load_queries("postgres")
    names = json.dumps([f"idle:{i}" for i in range(1, 400, 3)])
    # Each move names its start: that start's ledger row is looked up by ticket, not scanned for.
    moves = [{"id": i, "expect": "claimed", "status": "started", "ticket": f"tkt_{i}"} for i in range(1, 300)]
    rows = [{"name": f"idle:{i}", "watermark": 1, "missed": 0, "next_at": 2, "revision": 0} for i in range(1, 300)]
    cases = {
        "schedules_lock_many": ({"names": names}, "lockgate_schedules_pkey"),
        # the firings are partitioned by slot: their first partition's indexes, where the slots here are
        "firings_live_of": ({"names": names}, "lockgate_schedule_firings_p0_live"),
        "firings_update_many": ({"moves": json.dumps(moves)}, "lockgate_schedule_firings_p0_pkey"),
        "schedules_advance_many": ({"rows": json.dumps(rows), "now": T0}, "lockgate_schedules_pkey"),
    }
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as pg:
        await pg.execute(
            "INSERT INTO lockgate_schedules (name, workflow, spec, timezone, watermark, next_at, origin, "
            "definition, created_at, updated_at) SELECT 'idle:' || i, 'digest', 'every 1d', 'UTC', 0, 1e10 + i, "
            "'runtime', '{}', 0, 0 FROM generate_series(1, 20000) AS i"
        )
        await pg.execute(
            "INSERT INTO lockgate_schedule_firings (schedule, scheduled_at, manual, cause, workflow, source, "
            "identity, idempotency_key, status, claimed_at) SELECT 'idle:' || (i % 20000), i, 0, 'cron', 'digest', "
            "'s', 'i' || i, 'k' || i, CASE WHEN i % 50 = 0 THEN 'started' ELSE 'succeeded' END, 0 "
            "FROM generate_series(1, 60000) AS i"
        )
        await pg.execute(
            "INSERT INTO lockgate_ledger (ticket, kind, workflow, outcome, at) "
            "SELECT 'tkt_' || i, 'arrival', 'digest', 'admitted', i FROM generate_series(1, 60000) AS i"
        )
        await pg.execute(  # the runs the firings started: a store at this size has them
            "INSERT INTO lockgate_runs (id, workflow, identity, status, payload, created_at, updated_at, progress_at)"
            " SELECT 'run_' || i, 'digest', 'i' || i, 'succeeded', '{}', 0, 0, 0 FROM generate_series(1, 60000) AS i"
        )
        await pg.execute("ANALYZE lockgate_runs")
        await pg.execute("ANALYZE lockgate_schedules")
        await pg.execute("ANALYZE lockgate_schedule_firings")
        await pg.execute("ANALYZE lockgate_ledger")
        for name, (params, index) in cases.items():
            rows = await (await pg.execute("EXPLAIN " + queries[name], params)).fetchall()
            plan = " ".join(r[0] for r in rows)
            # The ledger and the firings are partitioned by time: a lookup by ticket probes each partition, and
            # their default ones (the kept rows) are empty here, where a scan costs nothing: any other scan is a
            # plan to fix.
            kept = ("Seq Scan on lockgate_ledger_kept", "Seq Scan on lockgate_schedule_firings_kept")
            scans = [r[0] for r in rows if "Seq Scan" in r[0] and not any(k in r[0] for k in kept)]
            assert index in plan and not scans, (name, plan)
            if name == "firings_update_many":
                assert "_ticket on lockgate_ledger" in plan, plan  # the ticket index (of each partition)


async def test_a_batch_leaves_out_a_schedule_another_transaction_holds(pg_url: str) -> None:
    """A replica ticking at the same time (or a verb) holds the row: the batch neither waits nor fires it."""
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Day) -> str:
        return p.day

    async with TestEnv(app, store=pg_url, start=T0) as env:
        for name in ("held", "free"):
            await env.engine.schedules.create(name, workflow="digest", every="1m", payload={"day": name})
        env.clock.set(T0 + 60.2)
        rt = sweep.runtime_for(env.engine.worker)
        async with await psycopg.AsyncConnection.connect(pg_url) as other:
            await other.execute("SELECT 1 FROM lockgate_schedules WHERE name = 'held' FOR UPDATE")
            first = await sweep.fire_due(rt)
            assert [(f.schedule, f.status) for f in first.fired] == [("free", "started")]
            await other.rollback()
        second = await sweep.fire_due(rt)  # still due: its watermark and next_at were left alone
        assert [(f.schedule, f.status) for f in second.fired] == [("held", "started")]


async def test_settle_fails_a_firing_past_its_max_runtime_and_cancels_its_run(store_url: str) -> None:
    app = lg.App()

    @app.workflow(name="slow")
    async def slow(ctx: lg.Context, p: Day) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.day

    app.schedule("long", workflow=slow, every="10m", payload=by_day, max_runtime="15m")
    app.schedule("short", workflow=slow, every="10m", payload=by_day, max_runtime="1h")
    async with TestEnv(app, store=store_url, start=T0) as env:
        rt = sweep.runtime_for(env.engine.worker)
        await sweep.register(rt, orphan_others=True)
        env.clock.set(T0 + 601)
        await sweep.fire_due(rt)
        await env.settle()
        env.clock.set(T0 + 601 + 16 * 60)  # 12:26: the 12:10 runs are 16 minutes old
        await sweep.fire_due(rt)
        await env.settle()
        assert (await ledger(env, "long"))[0] == ("12:10", "failed", "max_runtime exceeded")
        assert (await ledger(env, "short"))[0] == ("12:10", "started", None)
        (first,) = [f for f in await env.engine.schedule_firings("long") if f.why == "max_runtime exceeded"]
        assert first.run_id is not None and (await env.engine.get_run(first.run_id)).status == "cancelled"


async def test_the_schedule_sweep_starts_its_ticks_an_interval_apart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A tick's own time is not added to the interval: the next starts an interval after this one began,
    or after a short pause when this one took longer."""
    now = [0.0]
    slept: list[float] = []
    began: list[float] = []
    lengths = iter([0.3, 0.7, 0.1])

    async def fake_sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    async def tick(_: Any) -> None:
        began.append(round(now[0], 6))
        now[0] += next(lengths)

    async def run_once(worker: Any) -> bool:
        await tick(worker)
        if len(began) == 3:
            raise asyncio.CancelledError
        return True

    made = SteadySweep("schedules", 0.5, tick, monotonic=lambda: now[0])
    monkeypatch.setattr(made, "run_once", run_once)
    monkeypatch.setattr(base.asyncio, "sleep", fake_sleep)
    with pytest.raises(asyncio.CancelledError):
        await made.loop(cast(Any, None))
    assert slept == [0.5, 0.2, 0.1]  # 0.5 - 0.3; then 0.7 > 0.5: the least pause, a fifth of the interval
    assert began == [0.5, 1.0, 1.8]
    engine = lg.Engine(lg.App(), f"sqlite:///{tmp_path}/plain.db")
    assert isinstance(sweep.schedule_sweep(engine.worker, engine.sweep_settings), SteadySweep)


async def test_a_replica_stands_down_from_a_live_sweep_lease_without_waiting_for_its_row(pg_url: str) -> None:
    """Another transaction holds the lease row (the holder's renewal riding in a long group commit): a
    replica asking for the lease reads it and stands down at once instead of queueing behind that lock."""
    async with TestEnv(lg.App(), store=pg_url, start=T0) as env:
        store = env.engine.store
        assert await store.write(workers.acquire_sweep, "schedules", "holder", T0, 1.0)
        async with await psycopg.AsyncConnection.connect(pg_url) as other:
            await other.execute("SELECT 1 FROM lockgate_sweep_leases WHERE name = 'schedules' FOR UPDATE")
            asked = store.write(workers.acquire_sweep, "schedules", "replica", T0 + 0.5, 1.0)
            assert not await asyncio.wait_for(asked, timeout=10)  # would wait until `other` ended
            await other.rollback()
        assert await store.write(workers.acquire_sweep, "schedules", "holder", T0 + 0.6, 1.0)  # renewed
        assert await store.write(workers.acquire_sweep, "schedules", "replica", T0 + 1.7, 1.0)  # lapsed: taken


async def test_settle_reads_only_the_oldest_buffered_firing_of_each_schedule(store_url: str) -> None:
    """A backlog's later buffered firings wait behind its oldest: a tick does not read them again."""
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        await run_ticks(env, batched=True)
        rows = await env.engine.store.read(sched_ops.open_firings)
        buffered = [(r["schedule"], r["scheduled_at"]) for r in rows if r["status"] == "buffered"]
        # buffer2-4 and buffer9-4 each hold 12:20 and 12:30 (and more) buffered behind 12:10's live run
        assert buffered == [("buffer2-4", T0 + 1200), ("buffer9-4", T0 + 1200)]
        assert {r["schedule"] for r in rows if r["status"] == "started"} >= {"buffer2-4", "buffer9-4", "skip-4"}
