"""Upgrades: a store written by the first release with a gate (schema 0002), with work in flight,
migrates forward when today's engine opens it, and that work completes.

``fixtures/store-0002.db`` (SQLite) and ``fixtures/store-0002.pg.sql`` (a PostgreSQL database,
dumped) were made by that release (``fixtures/make_store_0002.py`` says how): a run asleep, a
run waiting for a signal, a run holding its key's one concurrency slot, and a start parked at
the gate for that slot.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.store.sql_files import migrations

from .apps.waits import eventually
from .pg import pg_database_url

FIXTURE = Path(__file__).parent / "fixtures" / "store-0002.db"
PG_FIXTURE = Path(__file__).parent / "fixtures" / "store-0002.pg.sql"


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Go(BaseModel):
    ok: bool = True


app = lg.App()


def effect(n: int) -> int:
    return n


@app.workflow(name="up.sleeper")
async def sleeper(ctx: lg.Context, p: Job) -> int:
    first = await ctx.step("before", effect, p.n)
    await ctx.sleep("nap", "5s")
    return first + await ctx.step("after", effect, p.n)  # type: ignore[no-any-return]


@app.workflow(name="up.waiter")
async def waiter(ctx: lg.Context, p: Job) -> bool:
    await ctx.step("before", effect, p.n)
    go = await ctx.wait_for_signal("go", Go)
    return bool(go and go.ok)


@app.workflow(name="up.limited", concurrency=lg.Concurrency(limit=1, key=lambda p: p.key))
async def limited(ctx: lg.Context, p: Job) -> int:
    await ctx.sleep("hold", "5s")
    return p.n


def _copy(tmp_path: Path) -> Path:
    """The fixture, its timers moved so they fall due a second from now, whatever today's date."""
    db = tmp_path / "old.db"
    shutil.copy(FIXTURE, db)
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        made = conn.execute("SELECT MAX(created_at) FROM lockgate_runs").fetchone()[0]
        shift = time.time() - made - 4.0
        conn.execute("UPDATE lockgate_runs SET wake_at = wake_at + ? WHERE wake_at IS NOT NULL", (shift,))
        conn.execute("UPDATE lockgate_journal SET due_at = due_at + ? WHERE due_at IS NOT NULL", (shift,))
    return db


async def test_sleeping_and_waiting_runs_on_the_first_gated_schema_complete_after_the_upgrade(tmp_path: Path) -> None:
    db = _copy(tmp_path)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert [v for (v,) in conn.execute("SELECT version FROM lockgate_migrations ORDER BY version")] == [1, 2]
    async with lg.Engine(app, f"sqlite:///{db}", poll_interval=0.05, lease="2s") as engine:
        found = {r.workflow + str(r.payload["n"]): r for r in await engine.list_runs(limit=10)}
        assert sorted(found) == ["up.limited3", "up.sleeper1", "up.waiter2"]
        await engine.signal(found["up.waiter2"].id, "go", {"ok": True})
        assert await engine.result(found["up.sleeper1"].id, timeout=30) == 2
        assert await engine.result(found["up.waiter2"].id, timeout=30) is True
        steps = await engine.steps(found["up.sleeper1"].id)
        assert [(s.key, s.status) for s in steps] == [
            ("before#0", "completed"),
            ("nap#0", "completed"),
            ("after#0", "completed"),
        ]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM lockgate_migrations ORDER BY version")]
        assert versions == [v for v, _, _ in migrations("sqlite")]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_a_slot_holder_and_a_start_parked_on_the_first_gated_schema_complete_after_the_upgrade(
    tmp_path: Path,
) -> None:
    db = _copy(tmp_path)
    async with lg.Engine(app, f"sqlite:///{db}", poll_interval=0.05, lease="2s", max_reclaims=1) as engine:
        [holder] = await engine.list_runs(workflow="up.limited")

        async def holder_ended() -> str | None:
            status = (await engine.get_run(holder.id)).status
            return status if status in ("succeeded", "suspended", "failed") else None

        assert await eventually(holder_ended, timeout=15, what="the slot holder ended") == "succeeded"
        assert await engine.result(holder.id, timeout=5) == 3

        async def parked_one_done() -> list[lg.RunInfo]:
            runs = [r for r in await engine.list_runs(workflow="up.limited") if r.payload["n"] == 4]
            return runs if runs and runs[0].status == "succeeded" else []

        [parked] = await eventually(parked_one_done, timeout=15, what="the parked start admitted and done")
        assert await engine.result(parked.id, timeout=5) == 4
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM lockgate_pending").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM lockgate_slots").fetchone()[0] == 0


@pytest.fixture
def old_pg(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database restored from the PostgreSQL fixture, its timers moved to fall due 4 s after now."""
    for url in pg_database_url(request, migrated=False):
        # psql's meta-commands (\restrict) are for psql; the rest is plain SQL
        script = "\n".join(line for line in PG_FIXTURE.read_text().splitlines() if not line.startswith("\\"))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(script)  # type: ignore[call-overload]  # the fixture's own statements
            conn.execute("SET search_path = public")
            made = conn.execute("SELECT MAX(created_at) FROM lockgate_runs").fetchone()[0]  # type: ignore[index]
            shift = time.time() - made - 4.0
            conn.execute("UPDATE lockgate_runs SET wake_at = wake_at + %s WHERE wake_at IS NOT NULL", (shift,))
            conn.execute("UPDATE lockgate_journal SET due_at = due_at + %s WHERE due_at IS NOT NULL", (shift,))
        yield url


VERSIONS = "SELECT string_agg(version::text, ',' ORDER BY version) FROM lockgate_migrations"


def _pg_scalar(url: str, sql: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[call-overload]
        return None if row is None else row[0]


async def test_runs_in_flight_on_the_first_gated_postgres_schema_complete_after_the_upgrade(old_pg: str) -> None:
    assert _pg_scalar(old_pg, VERSIONS) == "1,2"
    async with lg.Engine(app, old_pg, poll_interval=0.05, lease="2s", max_reclaims=1) as engine:
        found = {r.workflow + str(r.payload["n"]): r for r in await engine.list_runs(limit=10)}
        assert sorted(found) == ["up.limited3", "up.sleeper1", "up.waiter2"]
        await engine.signal(found["up.waiter2"].id, "go", {"ok": True})
        assert await engine.result(found["up.sleeper1"].id, timeout=30) == 2
        assert await engine.result(found["up.waiter2"].id, timeout=30) is True
        assert await engine.result(found["up.limited3"].id, timeout=30) == 3
        steps = await engine.steps(found["up.sleeper1"].id)
        assert [(s.key, s.status) for s in steps] == [
            ("before#0", "completed"),
            ("nap#0", "completed"),
            ("after#0", "completed"),
        ]

        async def parked_one_done() -> list[lg.RunInfo]:
            runs = [r for r in await engine.list_runs(workflow="up.limited") if r.payload["n"] == 4]
            return runs if runs and runs[0].status == "succeeded" else []

        [parked] = await eventually(parked_one_done, timeout=20, what="the parked start admitted and done")
        assert await engine.result(parked.id, timeout=5) == 4
    assert _pg_scalar(old_pg, VERSIONS) == ",".join(str(v) for v, _, _ in migrations("postgres"))
    assert _pg_scalar(old_pg, "SELECT COUNT(*) FROM lockgate_pending") == 0
    assert _pg_scalar(old_pg, "SELECT COUNT(*) FROM lockgate_slots") == 0
    # The history became partitioned (migration 0038): the runs made before it keep their rows in the first
    # partition, the table as it was; the parked start, a run only after the upgrade, has its own elsewhere.
    assert _pg_scalar(old_pg, "SELECT relkind FROM pg_class WHERE relname = 'lockgate_journal'") == "p"
    old_steps = "SELECT COUNT(*) FROM lockgate_journal_p0 WHERE run_id = %s"
    assert _pg_scalar(old_pg, old_steps.replace("%s", f"'{found['up.sleeper1'].id}'")) == 3
    assert _pg_scalar(old_pg, old_steps.replace("%s", f"'{parked.id}'")) == 0
    # The ledger became partitioned by time (0052): the decisions made before it in the first partition, the
    # parked start's drain after it elsewhere; flow()'s counts went on counting both.
    assert _pg_scalar(old_pg, "SELECT relkind FROM pg_class WHERE relname = 'lockgate_ledger'") == "p"
    old_rows = "SELECT COUNT(*) FROM lockgate_ledger_p0 WHERE kind <> 'drain'"
    all_rows = old_rows.replace("lockgate_ledger_p0 ", "lockgate_ledger ")
    assert _pg_scalar(old_pg, old_rows) == _pg_scalar(old_pg, all_rows)
    drained = f"SELECT COUNT(*) FROM lockgate_ledger WHERE kind = 'drain' AND run_id = '{parked.id}'"
    assert _pg_scalar(old_pg, drained) == 1
    assert _pg_scalar(old_pg, drained.replace("lockgate_ledger ", "lockgate_ledger_p0 ")) == 0
    counted = "SELECT SUM(n) FROM lockgate_flow_counts"
    assert _pg_scalar(old_pg, counted) == _pg_scalar(old_pg, "SELECT COUNT(*) FROM lockgate_ledger")
