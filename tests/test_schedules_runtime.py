"""Runtime schedules on real stores: created, changed, paused and deleted by calls, fired by the same
sweep, claim and ledger as declared ones. The tests move a ``FakeClock`` and tick by hand."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate import sweeps
from lockgate.engine.firing import fire
from lockgate.engine.schedule_book import ScheduleBook
from lockgate.inspect import Inspector
from lockgate.store import schedules as sched_ops
from lockgate.store.sql_files import load_queries
from lockgate.sweeps import schedules as sweep
from lockgate.testing import TestEnv

T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()  # a Thursday, before the spring-forward (Mar 29)


class Digest(BaseModel):
    tenant: str


class Go(BaseModel):
    ok: bool = True


@pytest.fixture(autouse=True)
def no_background_sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sweeps, "SWEEPS", tuple(s for s in sweeps.SWEEPS if s is not sweep.schedule_sweep))
    yield


def make_app(declared: bool = False) -> lg.App:
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Digest) -> str:
        return p.tenant

    @app.workflow(name="digest.slow")
    async def slow(ctx: lg.Context, p: Digest) -> str:
        await ctx.wait_for_signal("go", Go)
        return p.tenant

    if declared:
        app.schedule("nightly", workflow="digest", cron="0 3 * * *", payload={"tenant": "all"})
    return app


async def tick(env: TestEnv) -> sweep.Tick:
    rt = sweep.runtime_for(env.engine.worker)
    result = await sweep.fire_due(rt)
    await env.settle()
    await sweep.fire_due(rt)  # record the ends of the runs that finished
    return result


async def ledger(env: TestEnv, name: str) -> list[tuple[str, str, str | None]]:
    rows = await env.engine.schedule_firings(name, limit=500)
    return [(f.scheduled_at.strftime("%m-%d %H:%M"), f.status, f.why) for f in reversed(rows)]


async def test_a_created_schedule_fires_on_the_clock_and_reads_back(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        made = await env.engine.schedules.create(
            "digest:tenant-4711",
            workflow="digest",
            cron="0 8 * * 1",
            timezone="Europe/Berlin",
            payload={"tenant": "4711"},
            note="weekly digest",
        )
        assert made.origin == "runtime" and made.cron == "0 8 * * 1" and made.timezone == "Europe/Berlin"
        assert made.next_at == datetime(2026, 3, 30, 6, 0, tzinfo=UTC)  # Monday 08:00 CEST
        assert made.note == "weekly digest" and made.payload == {"tenant": "4711"} and not made.paused
        await tick(env)
        assert await ledger(env, "digest:tenant-4711") == []
        env.clock.set(datetime(2026, 3, 30, 6, 0, 0, 200000, tzinfo=UTC).timestamp())
        fired = await tick(env)
        assert [f.status for f in fired.fired] == ["started"]
        await tick(env)  # a second tick fires nothing again
        assert await ledger(env, "digest:tenant-4711") == [("03-30 06:00", "succeeded", None)]
        (firing,) = await env.engine.schedule_firings("digest:tenant-4711")
        assert await env.engine.result(firing.run_id or "") == "4711"
        assert firing.source == "schedule:digest:tenant-4711" and firing.cause == "cron"
        again = await env.engine.schedules.get("digest:tenant-4711")
        assert again.next_at == datetime(2026, 4, 6, 6, 0, tzinfo=UTC)
        page = await env.engine.schedules.list(prefix="digest:")
        assert [s.id for s in page.items] == ["digest:tenant-4711"] and page.cursor is None


async def test_if_exists_error_skip_update(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        schedules = env.engine.schedules
        await schedules.create("t1", workflow="digest", every="1h", payload={"tenant": "a"})
        with pytest.raises(lg.ScheduleExists, match="'t1' exists already"):
            await schedules.create("t1", workflow="digest", every="2h", payload={"tenant": "a"})
        kept = await schedules.create("t1", workflow="digest", every="2h", payload={"tenant": "b"}, if_exists="skip")
        assert kept.every == 3600 and kept.payload == {"tenant": "a"} and kept.revision == 1
        same = await schedules.create("t1", workflow="digest", every="1h", payload={"tenant": "a"}, if_exists="update")
        assert same.revision == 1  # the same options: nothing written
        moved = await schedules.create(
            "t1", workflow="digest", cron="*/30 * * * *", payload={"tenant": "b"}, if_exists="update"
        )
        assert moved.revision == 2 and moved.cron == "*/30 * * * *" and moved.every is None
        assert moved.payload == {"tenant": "b"}
        env.clock.advance("30m")
        await tick(env)
        assert await ledger(env, "t1") == [("03-26 12:30", "succeeded", None)]


async def test_many_tenants_page_by_cursor_and_filter(env_factory: Any) -> None:
    async with env_factory(make_app(True), start=T0) as env:
        for i in range(7):
            await env.engine.schedules.create(f"digest:{i}", workflow="digest", every="1d", payload={"tenant": str(i)})
        await env.engine.schedules.pause("digest:3")
        await sweep.register(sweep.runtime_for(env.engine.worker), orphan_others=True)
        seen: list[str] = []
        cursor = None
        while True:
            page = await env.engine.schedules.list(prefix="digest:", limit=3, cursor=cursor)
            seen += [s.id for s in page.items]
            if page.cursor is None:
                break
            cursor = page.cursor
        assert seen == [f"digest:{i}" for i in range(7)]
        assert [s.id for s in (await env.engine.schedules.list(paused=True)).items] == ["digest:3"]
        everything = (await env.engine.schedules.list(workflow="digest")).items
        assert {s.origin for s in everything} == {"declared", "runtime"} and len(everything) == 8
        declared = await env.engine.schedules.get("nightly")
        assert declared.origin == "declared" and declared.cron == "0 3 * * *"


async def test_update_of_cron_and_time_zone_across_the_dst_change(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        s = env.engine.schedules
        await s.create("d", workflow="digest", cron="0 8 * * *", timezone="Europe/Berlin", payload={"tenant": "d"})
        env.clock.set(datetime(2026, 3, 27, 7, 0, 1, tzinfo=UTC).timestamp())  # 08:00 Berlin (CET)
        await tick(env)
        # The 28th's 08:00 Berlin is due, and no tick has reached it when the rule changes: the
        # update fires it (once), then the new rule's slots start after the update.
        env.clock.set(datetime(2026, 3, 28, 7, 0, 0, 300000, tzinfo=UTC).timestamp())
        changed = await s.update("d", cron="30 8 * * *", timezone="Europe/London")
        assert changed.revision == 2 and changed.next_at == datetime(2026, 3, 28, 8, 30, tzinfo=UTC)
        await tick(env)
        for day in (28, 29, 30):  # London moves to BST on the 29th: 08:30 BST is 07:30 UTC
            hour = 8 if day == 28 else 7
            env.clock.set(datetime(2026, 3, day, hour, 30, 1, tzinfo=UTC).timestamp())
            await tick(env)
            await tick(env)
        unchanged = await s.update("d", timezone="Europe/London")  # the same rule: nothing written, nothing fired
        assert unchanged.revision == 2
        assert await ledger(env, "d") == [
            ("03-27 07:00", "succeeded", None),
            ("03-28 07:00", "succeeded", None),
            ("03-28 08:30", "succeeded", None),
            ("03-29 07:30", "succeeded", None),
            ("03-30 07:30", "succeeded", None),
        ]


async def test_update_back_to_a_slot_already_fired_never_fires_it_twice(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        s = env.engine.schedules
        await s.create("x", workflow="digest", every="1h", payload={"tenant": "x"})
        env.clock.set(T0 + 3600 + 0.2)
        await tick(env)
        await s.update("x", every="30m")  # 13:00 is a slot of both rules, fired already
        await s.update("x", every="1h")
        await tick(env)
        env.clock.set(T0 + 2 * 3600 + 0.2)
        await tick(env)
        assert [at for at, _, _ in await ledger(env, "x")] == ["03-26 13:00", "03-26 14:00"]


async def test_delete_while_a_firing_is_in_flight(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        s = env.engine.schedules
        await s.create("gone", workflow="digest.slow", every="1h", payload={"tenant": "g"}, on_overlap="buffer")
        env.clock.set(T0 + 3600 + 0.2)
        await tick(env)
        env.clock.set(T0 + 2 * 3600 + 0.2)
        await tick(env)  # the 14:00 firing waits behind the live 13:00 run
        assert [st for _, st, _ in await ledger(env, "gone")] == ["started", "buffered"]
        await s.delete("gone")
        with pytest.raises(lg.UnknownSchedule):
            await s.get("gone")
        with pytest.raises(lg.UnknownSchedule):
            await s.delete("gone")
        (live, _) = sorted(await env.engine.schedule_firings("gone"), key=lambda f: f.scheduled_at)
        await env.engine.signal(live.run_id or "", "go", {})
        env.clock.set(T0 + 3 * 3600 + 0.2)
        await tick(env)
        assert await ledger(env, "gone") == [
            ("03-26 13:00", "succeeded", None),  # the run went on and its end is recorded
            ("03-26 14:00", "skipped", "schedule deleted"),
        ]


async def test_a_sweep_holding_a_deleted_schedule_claims_nothing(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        await env.engine.schedules.create("late", workflow="digest", every="1h", payload={"tenant": "l"})
        rt = sweep.runtime_for(env.engine.worker)
        (row,) = await env.engine.store.read(sched_ops.schedules_named, ["late"])
        sched = ScheduleBook({}).of_row(row)
        assert sched is not None
        await env.engine.schedules.delete("late")
        fired = await fire(rt, sched, T0 + 3600, "cron")
        assert fired.status == "deleted" and await env.engine.store.read(sched_ops.firings_of, "late", 10) == []


async def test_pause_and_unpause_a_runtime_schedule(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        s = env.engine.schedules
        await s.create("p", workflow="digest", every="1h", payload={"tenant": "p"}, paused=True)
        assert (await s.get("p")).paused and (await s.get("p")).next_at is None
        env.clock.set(T0 + 3600 + 0.2)
        await tick(env)
        assert await ledger(env, "p") == []
        await s.unpause("p")
        await tick(env)
        assert await ledger(env, "p") == []  # the slot of the pause is not caught up
        env.clock.set(T0 + 2 * 3600 + 0.2)
        await tick(env)
        await s.pause("p", reason="tenant on hold")
        env.clock.set(T0 + 3 * 3600 + 0.2)
        await tick(env)
        assert await ledger(env, "p") == [("03-26 14:00", "succeeded", None)]
        assert (await s.get("p")).paused_reason == "tenant on hold"


async def test_run_now_and_backfill_apply_to_runtime_schedules(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        # A run that waits for a signal: 09:00's is still live when 10:00 is claimed, however fast the engine.
        await env.engine.schedules.create("r", workflow="digest.slow", every="1h", payload={"tenant": "r"})
        start, end = datetime(2026, 3, 26, 9, 0, tzinfo=UTC), datetime(2026, 3, 26, 10, 0, tzinfo=UTC)
        done = await env.engine.backfill_schedule("r", start, end, commit=True)
        assert [d.outcome for d in done] == ["started", "skipped"]  # 10:00 overlaps 09:00's live run
        assert (await env.engine.run_schedule("r")).status == "started"  # a manual run ignores the overlap


async def test_start_and_end_bound_the_slots(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        start = datetime(2026, 3, 26, 14, 0, tzinfo=UTC)
        end = datetime(2026, 3, 26, 15, 0, tzinfo=UTC)
        made = await env.engine.schedules.create(
            "b", workflow="digest", every="1h", payload={"tenant": "b"}, start_at=start, end_at=end
        )
        assert made.next_at == start
        for hours in range(1, 6):
            env.clock.set(T0 + hours * 3600 + 0.2)
            await tick(env)
        assert [at for at, _, _ in await ledger(env, "b")] == ["03-26 14:00", "03-26 15:00"]
        assert (await env.engine.schedules.get("b")).next_at is None  # ended


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"cron": "61 * * * *"}, lg.InvalidSchedule, "cron: not a valid cron expression"),
    ({"every": "0s"}, lg.InvalidSchedule, "every: must be a whole number of seconds"),
    ({"every": "1h", "cron": "* * * * *"}, lg.InvalidSchedule, "cron: give exactly one"),
    ({"every": "1h", "timezone": "Mars/Olympus"}, lg.InvalidSchedule, "timezone: unknown time zone"),
    ({"every": "1h", "payload": {"tenant": 5}}, lg.InvalidSchedule, "payload: no valid payload"),
    ({"every": "1h", "payload": lambda at: {}}, lg.InvalidSchedule, "payload: a runtime schedule's payload is data"),
    (
        {"every": "1h", "start_at": datetime(2026, 4, 2, tzinfo=UTC), "end_at": datetime(2026, 4, 1, tzinfo=UTC)},
        lg.InvalidSchedule,
        "end_at: must be after start_at",
    ),
    ({"every": "1h", "start_at": datetime(2026, 4, 2)}, lg.InvalidSchedule, "start_at: must be an aware datetime"),
    ({"every": "1h", "workflow": "nope"}, lg.InvalidSchedule, "workflow: no workflow 'nope'"),
    ({"every": "1h", "id": ""}, lg.InvalidSchedule, "id: must not be empty"),
    ({"every": "1h", "id": "a\nb"}, lg.InvalidSchedule, "id: 'a\\\\nb' holds"),
    ({"every": "1h", "on_overlap": "queue"}, lg.InvalidSchedule, "on_overlap: must be"),
    ({"every": "1h", "if_exists": "replace"}, lg.InvalidSchedule, "if_exists: must be"),
]


async def test_bad_input_is_refused_naming_the_field_and_writes_nothing(env_factory: Any) -> None:
    async with env_factory(make_app(True), start=T0) as env:
        s = env.engine.schedules
        for options, error, match in BAD:
            given = {"workflow": "digest", "payload": {"tenant": "t"}, **options}
            schedule_id = given.pop("id", "bad")
            with pytest.raises(error, match=match):
                await s.create(schedule_id, **given)
        assert [x.id for x in (await s.list()).items] == ["nightly"]
        await sweep.register(sweep.runtime_for(env.engine.worker), orphan_others=True)
        with pytest.raises(lg.ScheduleNotOwned, match="cannot update schedule 'nightly': it is declared"):
            await s.update("nightly", cron="0 4 * * *")
        with pytest.raises(lg.ScheduleNotOwned, match="cannot delete schedule 'nightly'"):
            await s.delete("nightly")
        with pytest.raises(lg.ScheduleNotOwned):
            await s.create("nightly", workflow="digest", every="1h", payload={"tenant": "t"}, if_exists="update")
        with pytest.raises(lg.ScheduleExists, match="declared"):
            await s.create("nightly", workflow="digest", every="1h", payload={"tenant": "t"})
        with pytest.raises(lg.UnknownSchedule):
            await s.update("missing", every="2h")
        await s.create("ok", workflow="digest", every="1h", payload={"tenant": "t"})
        with pytest.raises(lg.InvalidSchedule, match="payload"):
            await s.update("ok", payload={"tenant": None})
        with pytest.raises(lg.InvalidSchedule, match="no such option"):
            await s.update("ok", colour="red")
        assert (await s.get("ok")).revision == 1 and (await s.get("nightly")).cron == "0 3 * * *"
        assert [x.id for x in (await s.list()).items] == ["nightly", "ok"]


async def test_conn_commits_the_schedule_with_the_callers_rows(store_url: str) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        s = env.engine.schedules
        if store_url.startswith("sqlite"):
            lite = sqlite3.connect(store_url.removeprefix("sqlite:///"))
            lite.execute("CREATE TABLE tenants (id TEXT PRIMARY KEY)")
            lite.commit()
            lite.execute("INSERT INTO tenants VALUES ('t1')")
            made = await s.create("digest:t1", workflow="digest", every="1d", payload={"tenant": "t1"}, conn=lite)
            assert made.id == "digest:t1" and made.revision == 1
            lite.rollback()
            with pytest.raises(lg.UnknownSchedule):
                await s.get("digest:t1")
            lite.execute("INSERT INTO tenants VALUES ('t2')")
            await s.create("digest:t2", workflow="digest", every="1d", payload={"tenant": "t2"}, conn=lite)
            lite.commit()
            lite.close()
        else:
            async with await psycopg.AsyncConnection.connect(store_url) as pg:
                await pg.execute("CREATE TABLE tenants (id TEXT PRIMARY KEY)")
                await pg.commit()
                await pg.execute("INSERT INTO tenants VALUES ('t1')")
                await s.create("digest:t1", workflow="digest", every="1d", payload={"tenant": "t1"}, conn=pg)
                await pg.rollback()
                await pg.execute("INSERT INTO tenants VALUES ('t2')")
                await s.create("digest:t2", workflow="digest", every="1d", payload={"tenant": "t2"}, conn=pg)
                await pg.commit()
        assert [x.id for x in (await s.list()).items] == ["digest:t2"]


async def test_conn_updates_the_schedule_with_the_callers_rows(store_url: str) -> None:
    async with TestEnv(make_app(), store=store_url, start=T0) as env:
        s = env.engine.schedules
        await s.create("digest:t1", workflow="digest", every="1d", payload={"tenant": "t1"})
        if store_url.startswith("sqlite"):
            lite = sqlite3.connect(store_url.removeprefix("sqlite:///"))
            lite.execute("BEGIN")
            seen = await s.update("digest:t1", every="2d", conn=lite)
            assert seen.every == 172800 and seen.revision == 2  # the row as the open transaction holds it
            lite.rollback()
            assert (await s.get("digest:t1")).revision == 1
            lite.execute("BEGIN")
            await s.update("digest:t1", payload={"tenant": "t9"}, conn=lite)
            lite.commit()
            lite.close()
        else:
            async with await psycopg.AsyncConnection.connect(store_url) as pg:
                seen = await s.update("digest:t1", every="2d", conn=pg)
                assert seen.every == 172800 and seen.revision == 2
                await pg.rollback()
                assert (await s.get("digest:t1")).revision == 1
                await s.update("digest:t1", payload={"tenant": "t9"}, conn=pg)
                await pg.commit()
        after = await s.get("digest:t1")
        assert after.revision == 2 and after.payload == {"tenant": "t9"} and after.every == 86400


async def test_schedules_are_listed_a_page_at_a_time(env_factory: Any) -> None:
    async with env_factory(make_app(declared=True), start=T0) as env:
        for i in range(5):
            await env.engine.schedules.create(f"digest:t{i}", workflow="digest", every="1m", payload={"tenant": "t"})
        env.clock.set(T0 + 60.5)
        await tick(env)
        inspector = Inspector(env.engine.store, env.engine.app, env.clock)
        seen: list[str] = []
        cursor = None
        while True:
            page, cursor = await inspector.schedule_page(limit=2, cursor=cursor)
            assert len(page) <= 2
            seen += [i.name for i in page]
            if cursor is None:
                break
        everything = await inspector.schedules()
        assert seen == [i.name for i in everything]  # the declared ones and the five, in order, once each
        page, after = await inspector.schedule_page(limit=10, prefix="digest:")
        assert [i.name for i in page] == [f"digest:t{i}" for i in range(5)] and after is None
        assert all(i.firings == {"succeeded": 1} or i.firings == {"started": 1} for i in page)
        with pytest.raises(lg.InvalidArgument, match="limit"):
            await inspector.schedule_page(limit=0)


async def test_the_sweep_looks_only_at_schedules_due(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        for i in range(300):
            await env.engine.schedules.create(f"idle:{i}", workflow="digest", every="1d", payload={"tenant": "i"})
        await env.engine.schedules.create("soon", workflow="digest", every="1m", payload={"tenant": "s"})
        env.clock.set(T0 + 60.2)
        fired = await tick(env)
        assert fired.looked_at == 1 and [f.schedule for f in fired.fired] == ["soon"]
        env.clock.set(T0 + 90)
        assert (await tick(env)).looked_at == 0


def test_an_app_without_declared_schedules_still_sweeps_runtime_ones(tmp_path: Any) -> None:
    engine = lg.Engine(make_app(), f"sqlite:///{tmp_path}/plain.db")
    made = sweep.schedule_sweep(engine.worker, engine.sweep_settings)
    assert made is not None and made.name == "schedules"


async def test_two_replicas_racing_a_due_runtime_slot_fire_it_once(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        for i in range(20):
            await env.engine.schedules.create(f"r{i}", workflow="digest", every="1h", payload={"tenant": str(i)})
        env.clock.set(T0 + 3600 + 0.2)
        base = sweep.runtime_for(env.engine.worker)
        replicas = [type(base)(base.runtime, f"w{i}") for i in range(3)]
        ticks = await asyncio.gather(*(sweep.fire_due(r) for r in replicas))
        started = [f for t in ticks for f in t.fired if f.status == "started"]
        assert len(started) == 20 and len({f.schedule for f in started}) == 20


async def test_the_due_read_is_an_index_range_however_many_schedules_wait(store_url: str) -> None:
    """20,000 idle schedules: the sweep's read of the due ones searches the index on next_at."""
    async with TestEnv(make_app(), store=store_url, start=T0):
        pass  # migrated
    sql = load_queries("sqlite" if store_url.startswith("sqlite") else "postgres")["schedules_due"]
    fill = (
        "INSERT INTO lockgate_schedules (name, workflow, spec, timezone, watermark, next_at, origin, definition, "
        "created_at, updated_at) SELECT 'idle:' || i, 'digest', 'every 1d', 'UTC', 0, 1e10 + i, 'runtime', '{}', 0, 0 "
    )
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as lite:
            lite.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) " + fill + "FROM n"
            )
            lite.execute("ANALYZE")
            plan = " ".join(str(r[3]) for r in lite.execute("EXPLAIN QUERY PLAN " + sql, {"now": T0, "limit": 10}))
        assert "USING INDEX lockgate_schedules_due" in plan, plan
    else:
        async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as pg:
            await pg.execute(fill + "FROM generate_series(1, 20000) AS i")
            await pg.execute("ANALYZE lockgate_schedules")
            rows = await (await pg.execute("EXPLAIN " + sql, {"now": T0, "limit": 10})).fetchall()
            plan = " ".join(r[0] for r in rows)
        assert "Index Scan using lockgate_schedules_due" in plan and "Seq Scan" not in plan, plan


async def test_doctor_reports_runtime_schedules_the_sweep_fell_behind_on(env_factory: Any) -> None:
    async with env_factory(make_app(), start=T0) as env:
        await env.engine.schedules.create("late:1", workflow="digest", every="1m", payload={"tenant": "l"})
        await env.engine.schedules.create("idle:1", workflow="digest", every="1d", payload={"tenant": "i"})
        inspector = env.engine.client.inspector
        report = {f.check: f for f in (await inspector.doctor()).findings}
        assert report["schedules"].status == "ok"
        env.clock.advance("10m")  # no sweep ticked: late:1 is behind, idle:1 is not due
        report = {f.check: f for f in (await inspector.doctor()).findings}
        assert report["schedules"].status == "problem", report["schedules"]
        assert [d["schedule"] for d in report["schedules"].details] == ["late:1"]
        await tick(env)
        report = {f.check: f for f in (await inspector.doctor()).findings}
        assert report["schedules"].status == "ok"
