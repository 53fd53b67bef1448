"""Domain events, deliveries and schedule firings partitioned by time on PostgreSQL (docs/history.md): made
with the run history's partitions, dropped past their retentions with what outlives them moved first (a pending
delivery and its event, an unfinished firing), a publisher's id one event across partitions; the migration with
a pending delivery and a claimed firing in flight. SQLite keeps its tables."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate import sweeps
from lockgate.engine import events as domain_events
from lockgate.errors import StoreError
from lockgate.store import events as event_ops
from lockgate.store import history, timed
from lockgate.store import schedules as sched_ops
from lockgate.store.sql_files import migrations
from lockgate.sweeps import events as fanout
from lockgate.sweeps import schedules as sweep
from lockgate.sweeps.retention import forget_expired, keep_partitions
from lockgate.testing import TestEnv

HOUR = 3600.0
DAY = 86400.0

app = lg.App()


class PingKey(BaseModel):
    id: str


class PingData(BaseModel):
    n: int


class Slot(BaseModel):
    at: str


ping = app.event("part.ping", key=PingKey, payload=PingData)


@app.workflow(name="part.pinged")
async def pinged(ctx: lg.Context, p: PingData) -> int:
    return p.n


@app.workflow(name="part.tick")
async def tick_wf(ctx: lg.Context, p: Slot) -> str:
    return p.at


app.trigger(on=ping, workflow="part.pinged", payload=lambda ev: {"n": ev.data.n})
app.schedule("hourly", workflow=tick_wf, every="1h", payload=lambda at: {"at": at.isoformat()}, on_overlap="buffer")


@pytest.fixture(autouse=True)
def no_background_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests fan out, fire and retire themselves: the engine starts none of those sweeps."""
    from lockgate.sweeps import retention

    own = (sweep.schedule_sweep, fanout.fanout_sweep, retention.retention_sweep)
    monkeypatch.setattr(sweeps, "SWEEPS", tuple(s for s in sweeps.SWEEPS if s not in own))


def _count(url: str, sql: str, *args: object) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


def _scalar(url: str, sql: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[call-overload]
        return None if row is None else row[0]


async def _publish(env: TestEnv, n: int, event_id: str | None = None) -> str:
    rt = env.engine.worker.runtime
    return await domain_events.publish(
        app, rt.store, rt.clock, ping, {"id": f"p{n}"}, {"n": n}, source="test", event_id=event_id
    )


async def _fan_out(env: TestEnv) -> fanout.Delivered:
    rt = env.engine.worker.runtime
    return await fanout.fan_out(fanout.FanOut(rt.store, rt.clock, app, fanout.gate_start(rt)))


def _claim(slot: float, now: float, owner: str = "w-old", lease: float = 5.0) -> dict[str, Any]:
    key = f"hourly@{datetime.fromtimestamp(slot, UTC).isoformat()}"
    return {
        "schedule": "hourly",
        "scheduled_at": slot,
        "manual": 0,
        "cause": "cron",
        "workflow": "part.tick",
        "source": "schedule:hourly",
        "identity": f"part.tick\x1f{key}",
        "idempotency_key": key,
        "owner": owner,
        "lease_until": now + lease,
        "now": now,
    }


def _where(url: str, table: str, column: str, value: object) -> set[str]:
    """The partitions (by suffix) holding ``table``'s rows whose ``column`` is ``value``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE {column} = %s", (value,))
        return {str(name).removeprefix(table + "_") for (name,) in rows.fetchall()}


async def test_they_get_the_history_s_partitions_ahead_across_a_day_boundary(pg_url: str) -> None:
    start = datetime(2031, 3, 9, 22, 0, tzinfo=UTC).timestamp()  # two hours before midnight, UTC
    async with TestEnv(app, store=pg_url, start=start, history_partition="day") as env:
        store = env.engine.store
        assert (await keep_partitions(env.engine.worker, None, DAY))[0] == 2
        ledger = {(p.suffix, p.begins_at, p.ends_at) for p in await store.read(history.ledger_partitions)}
        for table in timed.TABLES:  # the same intervals as the ledger, suffix for suffix
            parts = {(p.suffix, p.begins_at, p.ends_at) for p in await store.read(timed.partitions, table)}
            dated = {p for p in parts if p[0] not in ("p0", "kept")}
            assert {p[0] for p in dated} == {"p203103100000", "p203103110000"}
            assert dated <= ledger
            assert {p[0] for p in parts} - {p[0] for p in dated} == {"p0", "kept"}
        await env.advance("3h")  # past midnight: the 12th is two days ahead
        await keep_partitions(env.engine.worker, None, DAY)
        for table in timed.TABLES:
            ends = sorted(p.ends_at for p in await store.read(timed.partitions, table) if p.ends_at is not None)
            assert ends[-1] == datetime(2031, 3, 13, tzinfo=UTC).timestamp()


async def test_sqlite_has_no_partitions_of_them(tmp_path: Any) -> None:
    async with TestEnv(app, store=f"sqlite:///{tmp_path}/e.db") as env:
        for table in timed.TABLES:
            assert await env.engine.store.read(timed.partitions, table) == []


async def test_a_given_id_is_one_event_across_a_day_boundary(store_url: str) -> None:
    start = datetime(2031, 3, 9, 23, 59, 50, tzinfo=UTC).timestamp()  # ten seconds before midnight
    async with TestEnv(app, store=store_url, start=start, history_partition="day") as env:
        store = env.engine.store
        await store.write(history.make_ahead, start - DAY, DAY, start + 2 * DAY)  # today's partition too
        first = await _publish(env, 1, event_id="hook-delivery-1")
        assert first == "hook-delivery-1"
        await env.advance("20s")  # the next day: another partition of the events
        with pytest.raises(StoreError):
            await _publish(env, 2, event_id="hook-delivery-1")  # the provider's retry: the same event
        assert await _publish(env, 3, event_id="hook-delivery-2") == "hook-delivery-2"
        made = await _publish(env, 4)  # an id lockgate makes: no record of it apart
        event = await store.read(event_ops.get_event, first)
        assert event is not None and event["occurred_at"] == start  # the first one, as it was
        assert len(await store.read(event_ops.list_events, None, None, 10)) == 3
        if store.dialect == "postgres":
            url = env.store_url
            assert _where(url, "lockgate_events", "id", first) == {"p203103090000"}
            assert _where(url, "lockgate_events", "id", "hook-delivery-2") == {"p203103100000"}
            ids = "SELECT COUNT(*) FROM lockgate_event_ids WHERE id = %s"
            assert [_count(url, ids, i) for i in (first, "hook-delivery-2", made)] == [1, 1, 0]
            # each delivery sits with its event
            assert _where(url, "lockgate_deliveries", "event_id", first) == {"p203103090000"}


async def test_retention_drops_their_partitions_but_moves_a_pending_delivery_and_its_event(pg_url: str) -> None:
    now = datetime(2031, 3, 9, 10, 10, tzinfo=UTC).timestamp()
    options = {"retention": "1h", "event_retention": "1h", "delivery_retention": "1h", "history_partition": "hour"}
    async with TestEnv(app, store=pg_url, start=now, **options) as env:
        store = env.engine.store
        await store.write(history.make_ahead, now - 2 * HOUR, HOUR, now + 3 * HOUR)
        done = await _publish(env, 1)
        given = await _publish(env, 2, event_id="hook-2")
        assert (await _fan_out(env)).started == 2
        waiting = await _publish(env, 3)  # its delivery stays pending: no fan-out after it
        hour = "p203103091000"
        assert _where(pg_url, "lockgate_events", "id", waiting) == {hour}
        await env.advance("3h")
        forgotten = await forget(env)
        # the hour's partitions of both tables dropped (the first partitions too: past retention, empty)
        assert forgotten.timed_partitions_dropped >= 2
        assert (forgotten.events, forgotten.deliveries) == (0, 0)  # nothing deleted one by one
        for table in ("lockgate_events", "lockgate_deliveries"):
            assert hour not in {p.suffix for p in await store.read(timed.partitions, table)}
        for gone in (done, given):
            assert await store.read(event_ops.get_event, gone) is None
            assert await store.read(event_ops.list_deliveries, gone) == []
        assert _count(pg_url, "SELECT COUNT(*) FROM lockgate_event_ids WHERE id = 'hook-2'") == 0
        # the pending delivery and its event moved to the default partitions, and are delivered after
        assert _where(pg_url, "lockgate_events", "id", waiting) == {"kept"}
        assert _where(pg_url, "lockgate_deliveries", "event_id", waiting) == {"kept"}
        assert (await _fan_out(env)).started == 1
        (delivery,) = await store.read(event_ops.list_deliveries, waiting)
        assert delivery["status"] == "started"
        assert await env.engine.result(delivery["run_id"], timeout=10) == 3
        # once its delivery is past retention, the event goes one by one with it
        await env.advance("2h")
        forgotten = await forget(env)
        assert (forgotten.events, forgotten.deliveries) == (1, 1)
        assert await store.read(event_ops.get_event, waiting) is None
        # the id a publisher gave is free again once its event is past retention, as before
        assert await _publish(env, 4, event_id="hook-2") == "hook-2"


async def test_retention_drops_firing_partitions_but_moves_the_unfinished_and_late_claimed(pg_url: str) -> None:
    now = datetime(2031, 3, 9, 10, 10, tzinfo=UTC).timestamp()
    async with TestEnv(app, store=pg_url, start=now, retention="1h", history_partition="hour") as env:
        store = env.engine.store
        await store.write(history.make_ahead, now - 2 * HOUR, HOUR, now + 3 * HOUR)
        slots = [now - 600 + 60 * i for i in range(3)]  # three slots of this hour
        ids = []
        for slot in slots:
            row = await store.write(sched_ops.claim_firing, _claim(slot, slot))
            assert row is not None
            ids.append(int(row["id"]))
        finished = {"firing_id": ids[0], "expect": "claimed", "status": "skipped", "why": "test", "finished_at": now}
        assert await store.write(sched_ops.move_firings, [finished]) == {ids[0]}
        await env.advance("3h")
        # a backfill of a slot of that hour, recorded now: finished, but claimed since the cutoff
        late = await store.write(sched_ops.claim_firing, _claim(now - 300, env.clock.now()))
        assert late is not None
        moved = {"firing_id": int(late["id"]), "expect": "claimed", "status": "skipped", "why": "backfill"}
        assert await store.write(sched_ops.move_firings, [moved]) == {int(late["id"])}
        forgotten = await forget(env)
        assert forgotten.timed_partitions_dropped >= 1
        hour = "p203103091000"
        assert hour not in {p.suffix for p in await store.read(timed.partitions, timed.FIRINGS)}
        left = {int(r["id"]): r for r in await store.read(sched_ops.firings_of, "hourly", 10)}
        assert sorted(left) == sorted([ids[1], ids[2], int(late["id"])])  # the finished one went with the drop
        for fid in left:
            assert _where(pg_url, "lockgate_schedule_firings", "id", fid) == {"kept"}
        # still a claim: the unique claim of its slot holds in the default partition
        assert await store.write(sched_ops.claim_firing, _claim(slots[1], env.clock.now())) is None
        # finished and past retention, they go one by one (the schedule sweep's pass)
        done = [{"firing_id": i, "expect": "claimed", "status": "skipped", "why": "test"} for i in ids[1:]]
        await store.write(sched_ops.move_firings, done)
        await env.advance("2h")
        assert await sweep.forget_firings(sweep.runtime_for(env.engine.worker), env.clock.now() - HOUR) == 3
        assert await store.read(sched_ops.firings_of, "hourly", 10) == []


async def forget(env: TestEnv) -> Any:
    engine = env.engine
    return await forget_expired(
        engine.worker,
        engine.retention,
        event_retention=engine.event_retention,
        delivery_retention=engine.delivery_retention,
        history_partition=HOUR,
    )


def _before_0054(url: str) -> None:
    """Turn a migrated store back into what it was before migration 0053: events, deliveries and firings in
    plain tables (0007's and 0008's), no ids apart, 0052's lockgate_history_add, versions 53-55 not applied.
    Rows are kept."""
    texts = {version: sql for version, _, sql in migrations("postgres")}
    history_add = re.search(r"CREATE OR REPLACE FUNCTION lockgate_history_add.*?\n\$\$;", str(texts[52]), re.S)
    assert history_add is not None
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for table in ("lockgate_events", "lockgate_deliveries", "lockgate_schedule_firings"):
            conn.execute(f"ALTER TABLE {table} RENAME TO old_partitioned")  # type: ignore[arg-type]
            conn.execute(
                f"CREATE TABLE {table} (LIKE old_partitioned INCLUDING DEFAULTS INCLUDING IDENTITY)"  # type: ignore[arg-type]
            )
            conn.execute(f"INSERT INTO {table} SELECT * FROM old_partitioned")  # type: ignore[arg-type]
            conn.execute("DROP TABLE old_partitioned")
        conn.execute(
            "SELECT setval(pg_get_serial_sequence('lockgate_schedule_firings', 'id'),"
            " (SELECT coalesce(max(id), 0) + 1 FROM lockgate_schedule_firings), false)"
        )
        conn.execute("ALTER TABLE lockgate_events ADD PRIMARY KEY (id)")
        conn.execute("CREATE INDEX lockgate_events_name ON lockgate_events (name, occurred_at)")
        conn.execute("CREATE INDEX lockgate_events_at ON lockgate_events (occurred_at)")
        conn.execute(
            "CREATE INDEX lockgate_events_unswept ON lockgate_events (occurred_at) WHERE cancel_swept_at IS NULL"
        )
        conn.execute(
            "CREATE TRIGGER lockgate_events_wake AFTER INSERT ON lockgate_events FOR EACH STATEMENT"
            " EXECUTE FUNCTION lockgate_wake('events')"
        )
        conn.execute("ALTER TABLE lockgate_deliveries ADD PRIMARY KEY (id)")
        conn.execute("ALTER TABLE lockgate_deliveries ADD UNIQUE (event_id, trigger_name)")
        conn.execute(
            "CREATE INDEX lockgate_deliveries_pending ON lockgate_deliveries (created_at) WHERE status = 'pending'"
        )
        conn.execute(
            "CREATE INDEX lockgate_deliveries_key ON lockgate_deliveries (workflow, idempotency_key)"
            " WHERE status = 'started'"
        )
        conn.execute("CREATE INDEX lockgate_deliveries_at ON lockgate_deliveries (created_at)")
        conn.execute("ALTER TABLE lockgate_schedule_firings ADD PRIMARY KEY (id)")
        conn.execute("ALTER TABLE lockgate_schedule_firings ADD UNIQUE (schedule, scheduled_at, manual)")
        conn.execute(
            "CREATE INDEX lockgate_schedule_firings_live ON lockgate_schedule_firings (schedule, scheduled_at)"
            " WHERE status IN ('claimed', 'buffered', 'started')"
        )
        conn.execute("CREATE INDEX lockgate_schedule_firings_recent ON lockgate_schedule_firings (schedule, id)")
        conn.execute("CREATE INDEX lockgate_schedule_firings_claimed ON lockgate_schedule_firings (claimed_at)")
        conn.execute("DROP TABLE lockgate_event_ids")
        conn.execute(history_add[0])  # type: ignore[call-overload]
        for function in (
            "lockgate_timed_tables()",
            "lockgate_timed_catch_up(text)",
            "lockgate_timed_add(text, bigint, bigint, text)",
            "lockgate_timed_retire(text, text, double precision, text)",
        ):
            conn.execute(f"DROP FUNCTION {function}")  # type: ignore[arg-type]
        conn.execute("DELETE FROM lockgate_migrations WHERE version IN (53, 54, 55)")


async def test_the_migration_partitions_them_with_a_pending_delivery_and_a_claimed_firing(pg_url: str) -> None:
    now = time.time()
    async with TestEnv(app, store=pg_url, start=now) as env:
        store = env.engine.store
        await sweep.register(sweep.runtime_for(env.engine.worker), orphan_others=True)
        delivered = await _publish(env, 1, event_id="hook-old")
        assert (await _fan_out(env)).started == 1
        pending = await _publish(env, 2)  # its delivery pending across the upgrade
        slot = now - 120  # a claim whose claimant went away: its lease lapses after the upgrade
        claimed = await store.write(sched_ops.claim_firing, _claim(slot, now, lease=30))
        assert claimed is not None
    _before_0054(pg_url)
    kind = "SELECT relkind FROM pg_class WHERE relname = '{}'"
    for table in timed.TABLES:
        assert _scalar(pg_url, kind.format(table)) == "r"  # plain tables
    async with TestEnv(app, store=pg_url, start=now + 1) as env:  # migrates, then goes on
        store = env.engine.store
        for table in timed.TABLES:
            assert _scalar(pg_url, kind.format(table)) == "p"  # partitioned, the old rows in the first partition
        assert _where(pg_url, "lockgate_events", "id", pending) == {"p0"}
        assert _where(pg_url, "lockgate_deliveries", "event_id", pending) == {"p0"}
        assert _where(pg_url, "lockgate_schedule_firings", "id", int(claimed["id"])) == {"p0"}
        with pytest.raises(StoreError):  # an id given before the upgrade is still taken
            await _publish(env, 3, event_id="hook-old")
        assert (await store.read(event_ops.get_event, delivered) or {}).get("id") == delivered
        # the pending delivery is delivered, once
        assert (await _fan_out(env)).started == 1
        (delivery,) = await store.read(event_ops.list_deliveries, pending)
        assert delivery["status"] == "started"
        assert await env.engine.result(delivery["run_id"], timeout=10) == 2
        assert (await _fan_out(env)).started == 0
        # the claimed firing is taken over once its lease lapses, and its run completes
        rt = sweep.runtime_for(env.engine.worker)
        env.clock.set(now + 60)
        await sweep.fire_due(rt)
        await env.settle()
        await sweep.fire_due(rt)
        firings = [f for f in await store.read(sched_ops.firings_of, "hourly", 10) if f["scheduled_at"] == slot]
        assert [f["status"] for f in firings] == ["succeeded"]
        assert await env.engine.result(firings[0]["run_id"], timeout=5) == datetime.fromtimestamp(slot, UTC).isoformat()


async def test_a_slot_claimed_past_the_partitions_moves_into_the_partition_made_for_it(pg_url: str) -> None:
    """A slot claimed days ahead (a backfill reaching into the future) lands in the default partition; the
    partition of its interval, made later, takes it over (PostgreSQL would not make one over it), and the
    partitions of the intervals before it are made as ever."""
    now = datetime(2031, 3, 9, 10, 10, tzinfo=UTC).timestamp()
    async with TestEnv(app, store=pg_url, start=now, history_partition="day") as env:
        store = env.engine.store
        await keep_partitions(env.engine.worker, None, DAY)  # the 10th and 11th
        ahead = datetime(2031, 3, 14, 6, 0, tzinfo=UTC).timestamp()
        claimed = await store.write(sched_ops.claim_firing, _claim(ahead, now))
        assert claimed is not None
        assert _where(pg_url, "lockgate_schedule_firings", "id", int(claimed["id"])) == {"kept"}
        for days in ("2d", "1d"):  # the 11th, then the 12th: the 14th is made ahead then
            await env.advance(days)
            await keep_partitions(env.engine.worker, None, DAY)
        suffixes = {p.suffix for p in await store.read(timed.partitions, timed.FIRINGS)}
        assert {"p203103120000", "p203103130000", "p203103140000"} <= suffixes
        assert _where(pg_url, "lockgate_schedule_firings", "id", int(claimed["id"])) == {"p203103140000"}
        assert await store.write(sched_ops.claim_firing, _claim(ahead, env.clock.now())) is None  # still its slot
