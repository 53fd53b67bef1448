"""The drainer re-offers parked rows in chunks: one operation per chunk, decisions in order, nothing lost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

import lockgate as lg
from lockgate.gate.drainer import CHUNK
from lockgate.store import journal, shared
from lockgate.testing import TestEnv

from .apps.gate import parked, runs
from .apps.gate_probes import ledger_rows, pending_rows, sql


class Job(BaseModel):
    n: int
    hold: bool = False


class Go(BaseModel):
    pass


def make_app() -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Job) -> int:
        if p.hold:
            await ctx.wait_for_signal("go", Go)
        return p.n

    app.workflow(name="plain", timeouts=lg.Timeouts(finish="1h"))(body)
    app.workflow(name="conc", concurrency=lg.Concurrency(limit=3))(body)
    return app


async def _drain_rows(env: TestEnv) -> list[dict[str, Any]]:
    return await sql(
        env.store_url, "SELECT ticket, workflow, outcome, run_id FROM lockgate_ledger WHERE kind = 'drain' ORDER BY id"
    )


async def test_an_unpaused_backlog_larger_than_a_chunk_is_admitted_whole(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        e = env.engine
        await e.pause("plain")
        handles = [await e.start("plain", {"n": i}) for i in range(CHUNK * 2 + 7)]
        assert {h.status for h in handles} == {"queued"}
        assert await e.unpause("plain") == len(handles)
        await e.drainer.tick()
        assert await parked(e, "plain") == 0
        started = [r for r in await _drain_rows(env) if r["outcome"] == "admitted"]
        assert [r["ticket"] for r in started] == [h.ticket for h in handles]  # the ledger tells them in order
        found = {r.id for r in await runs(e, "plain")}
        assert sorted(found) == sorted(r["run_id"] for r in started)
        for h, decision in zip(handles, started, strict=True):
            run = await e.store.read(shared.get_run, decision["run_id"])
            # what the pipeline's own admission writes: the arrival's ticket, payload and finish deadline
            assert (run["ticket"], run["identity"]) == (h.ticket, run["id"])
            assert run["status"] in ("running", "succeeded")  # the engine may already have run it
            assert run["deadline_at"] == run["created_at"] + 3600
            assert (await e.store.read(journal.list_events, run["id"]))[0]["type"] == "run-started"
        payloads = [json.loads(r["payload"])["n"] for r in await sql(env.store_url, _PAYLOADS)]
        assert payloads == list(range(len(handles)))
        await env.settle()
        assert {r.status for r in await runs(e, "plain")} == {"succeeded"}


_PAYLOADS = "SELECT payload FROM lockgate_runs WHERE workflow = 'plain' ORDER BY id"


async def test_a_chunk_with_a_refusing_row_still_admits_the_others(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        e = env.engine
        await e.pause("plain")
        handles = [await e.start("plain", {"n": i}) for i in range(20)]
        bad = handles[9]
        # a parked row whose re-offer fails (a report without keys whose payload no longer parses)
        await sql(
            env.store_url, "UPDATE lockgate_pending SET keys = NULL, payload = 'not json' WHERE ticket = ?", bad.ticket
        )
        await e.unpause("plain")
        await e.drainer.tick()
        [left] = await pending_rows(env.store_url)
        assert left["ticket"] == bad.ticket
        admitted = {r["ticket"] for r in await _drain_rows(env) if r["outcome"] == "admitted"}
        assert admitted == {h.ticket for h in handles} - {bad.ticket}
        assert len(await runs(e, "plain")) == 19
        # the row stays parked, as it was: another pass tries it again and fails the same way
        await e.drainer.tick()
        assert [r["ticket"] for r in await pending_rows(env.store_url)] == [bad.ticket]


async def test_concurrency_room_is_exact_within_a_chunk(env_factory: Any) -> None:
    """Delayed starts falling due together pass the concurrency stage one after another in one transaction."""
    async with env_factory(make_app()) as env:
        e = env.engine
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=1)
        handles = [await e.start("conc", {"n": i, "hold": True}, at=at) for i in range(10)]
        assert {h.deferral.mode for h in handles if h.deferral is not None} == {"delayed"}
        env.clock.advance(60)
        await e.drainer.tick()
        await env.settle()
        live = [r for r in await runs(e, "conc") if r.status in ("running", "suspended")]
        assert len(live) == 3
        modes = [r["mode"] for r in await pending_rows(env.store_url)]
        assert modes == ["concurrency"] * 7
        decided = [(r["ticket"], r["outcome"]) for r in await _drain_rows(env)]
        assert decided == [(h.ticket, "admitted") for h in handles[:3]] + [(h.ticket, "queued") for h in handles[3:]]


async def test_held_and_unheld_rows_in_one_chunk_are_decided_in_order(env_factory: Any) -> None:
    async with env_factory(make_app()) as env:
        e = env.engine
        at = datetime.fromtimestamp(env.clock.now(), tz=UTC) + timedelta(minutes=1)
        handles = []
        for i in range(8):
            handles.append(await e.start("plain", {"n": i}, at=at))
            handles.append(await e.start("conc", {"n": i, "hold": True}, at=at))
        env.clock.advance(60)
        await e.drainer.tick()
        decided = await _drain_rows(env)
        assert [r["ticket"] for r in decided] == [h.ticket for h in handles]
        outcomes = [(r["workflow"], r["outcome"]) for r in decided]
        expected = [("plain", "admitted"), ("conc", "admitted")] * 3
        expected += [("plain", "admitted"), ("conc", "queued")] * 5
        assert outcomes == expected


async def test_a_row_cancelled_before_its_chunk_is_not_admitted(env_factory: Any, monkeypatch: Any) -> None:
    async with env_factory(make_app()) as env:
        e = env.engine

        async def held_elsewhere() -> bool:
            return False

        # Only the tick below drains: woken by the unpause, the background drainer could otherwise
        # admit the backlog before the cancellation is written (as if another replica held the lease).
        monkeypatch.setattr(e.drainer, "_hold_lease", held_elsewhere)
        await e.pause("plain")
        handles = [await e.start("plain", {"n": i}) for i in range(5)]
        await e.unpause("plain")
        await e.cancel_start(handles[2].ticket, "not needed")
        await e.drainer.tick()
        assert len(await runs(e, "plain")) == 4
        outcomes = [r["outcome"] for r in await ledger_rows(e, handles[2].ticket)]
        assert outcomes == ["queued", "released", "cancelled"]


async def test_rows_waiting_for_a_slot_take_freed_slots_in_arrival_order(env_factory: Any) -> None:
    """Freed slots go to the rows waiting for them, first come first served, each with its slot row."""
    async with env_factory(make_app()) as env:
        e = env.engine
        handles = [await e.start("conc", {"n": i, "hold": True}) for i in range(8)]
        await env.settle()
        assert [h.status for h in handles] == ["started"] * 3 + ["queued"] * 5
        for h in handles[:2]:
            assert h.run_id is not None
            await e.signal(h.run_id, "go", {})
        await env.settle()
        await e.drainer.tick()
        await env.settle()
        admitted = [r for r in await _drain_rows(env) if r["outcome"] == "admitted"]
        assert [r["ticket"] for r in admitted] == [h.ticket for h in handles[3:5]]
        live = {r.id for r in await runs(e, "conc") if r.status == "running"}
        assert len(live) == 3
        slots = await sql(env.store_url, "SELECT run_id, scope, key FROM lockgate_slots ORDER BY run_id")
        assert {s["run_id"] for s in slots} == live
        assert {(s["scope"], s["key"]) for s in slots} == {("wf:conc", "")}
        assert [r["mode"] for r in await pending_rows(env.store_url)] == ["concurrency"] * 3
