"""A burst of arrivals in one group commit: arrivals held by flow controls are decided together, exactly as one by one.

``offer_many`` (the many-at-once form of ``pipeline.offer``) decides a run of fresh
arrivals that nothing but their flow controls can hold (per-key concurrency limits, a
throttle or a rate limit, a debounce, a batch, alone or combined) with a few statements
for the whole run, and passes every other offer through ``offer``. The tests here give the same
offers to two fresh stores of one kind, one by one in one transaction on one and through
the many form on the other, and compare what each decided and wrote; others drive a real
burst of ``start`` calls through the store's group commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.gate.admission import control_keys
from lockgate.gate.pipeline import Decision, Offer, offer, offer_many
from lockgate.store import coalesce, gate
from lockgate.store.base import Row, Tx
from lockgate.testing import TestEnv

from .apps.gate_probes import pending_rows, sql
from .apps.waits import eventually
from .pg import pg_database_url

NOW = 1_800_000_000.0


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Go(BaseModel):
    ok: bool = True


class Jobs(BaseModel):
    items: list[Job]


def make_app() -> lg.App:
    app = lg.App()

    async def body(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    def key(p: Job) -> str:
        return p.key

    app.workflow(
        name="cc", concurrency=lg.Concurrency(limit=2, key=key), timeouts=lg.Timeouts(start="1h", finish="2h")
    )(body)
    app.workflow(name="pooled", concurrency=lg.Concurrency(limit=2, key=key, pool="shared"))(body)
    app.workflow(name="win", throttle=lg.Throttle(limit=1, period="1h"), concurrency=lg.Concurrency(limit=5))(body)
    app.workflow(name="rl", rate_limit=lg.RateLimit(limit=2, period="10s", key=key))(body)
    app.workflow(name="th", throttle=lg.Throttle(limit=2, period="10s", key=key), timeouts=lg.Timeouts(start="1h"))(
        body
    )
    app.workflow(name="thp", throttle=lg.Throttle(limit=3, period="10s", key=key, pool="provider"))(body)
    app.workflow(name="rlp", rate_limit=lg.RateLimit(limit=3, period="10s", key=key, pool="quota"))(body)
    app.workflow(
        name="ths", throttle=lg.Throttle(limit=4, period="10s", key=key), concurrency=lg.Concurrency(limit=1, key=key)
    )(body)
    app.workflow(
        name="thsp",
        throttle=lg.Throttle(limit=3, period="10s", key=key, pool="provider"),
        concurrency=lg.Concurrency(limit=2, key=key, pool="shared"),
    )(body)
    app.workflow(
        name="rls",
        rate_limit=lg.RateLimit(limit=3, period="10s", key=key),
        concurrency=lg.Concurrency(limit=1, key=key),
    )(body)
    app.workflow(
        name="rlsp",
        rate_limit=lg.RateLimit(limit=3, period="10s", key=key, pool="quota"),
        concurrency=lg.Concurrency(limit=2, key=key, pool="shared"),
    )(body)
    app.workflow(name="deb", debounce=lg.Debounce(period="10s", key=key))(body)
    app.workflow(name="debf", debounce=lg.Debounce(period="10s", key=key, timeout="15s", keep="first"))(body)

    async def gathered(ctx: lg.Context, p: Jobs) -> int:
        return len(p.items)

    app.workflow(name="deba", debounce=lg.Debounce(period="10s", key=key, keep="all"))(gathered)
    app.workflow(name="bat", batch=lg.Batch(item=Job, max_size=3, timeout="10s", key=key))(gathered)
    app.workflow(name="bat1", batch=lg.Batch(item=Job, max_size=1, timeout="10s", key=key))(gathered)
    # Controls combined: each arrival meets its rules in the stages' order, in one run with the others.
    app.workflow(name="bare")(body)
    app.workflow(
        name="rldeb",
        rate_limit=lg.RateLimit(limit=3, period="10s", key=key),
        debounce=lg.Debounce(period="10s", key=key),
    )(body)
    app.workflow(
        name="thdeb", throttle=lg.Throttle(limit=1, period="10s", key=key), debounce=lg.Debounce(period="10s", key=key)
    )(body)
    app.workflow(
        name="batcc",
        batch=lg.Batch(item=Job, max_size=2, timeout="10s", key=key),
        concurrency=lg.Concurrency(limit=1, key=key),
    )(gathered)
    app.workflow(  # a full batch takes a slot of the pool that "pooled" arrivals beside it count
        name="batp",
        batch=lg.Batch(item=Job, max_size=2, timeout="10s", key=key),
        concurrency=lg.Concurrency(limit=2, key=key, pool="shared"),
    )(gathered)
    app.workflow(
        name="bat1th",
        batch=lg.Batch(item=Job, max_size=1, timeout="10s", key=key),
        throttle=lg.Throttle(limit=2, period="10s", key=key),
    )(gathered)
    return app


@pytest.fixture
def twin_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second fresh store of the test's store kind."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path}/twin.db"
    else:
        yield from pg_database_url(request)


@pytest.fixture
def many_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many offers each call of the many form was given (the store's group commits use it)."""
    sizes: list[int] = []

    async def counted(tx: Tx, calls: Any) -> list[Any]:
        sizes.append(len(calls))
        return await offer_many(tx, calls)

    monkeypatch.setitem(coalesce._MANY, offer, counted)
    return sizes


@pytest.fixture
def set_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[gate.Slot]]:
    """The slots each set-based read of the many form asked about."""
    asked: list[list[gate.Slot]] = []
    read = gate.slot_queues

    async def counted(tx: Tx, slots: list[gate.Slot]) -> dict[gate.Slot, tuple[bool, int]]:
        asked.append(list(slots))
        return await read(tx, slots)

    monkeypatch.setattr(gate, "slot_queues", counted)
    return asked


@pytest.fixture
def group_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The group keys each set-based read of the many form asked about."""
    asked: list[list[str]] = []
    read = gate.open_groups

    async def counted(tx: Tx, group_keys: list[str]) -> dict[str, Row]:
        asked.append(list(group_keys))
        return await read(tx, group_keys)

    monkeypatch.setattr(gate, "open_groups", counted)
    return asked


@pytest.fixture
def window_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, str, int]]]:
    """The windows each set-based read of the many form asked about."""
    asked: list[list[tuple[str, str, int]]] = []
    read = gate.window_queues

    async def counted(tx: Tx, windows: list[tuple[str, str, int]]) -> dict[gate.Slot, gate.WindowQueue]:
        asked.append(list(windows))
        return await read(tx, windows)

    monkeypatch.setattr(gate, "window_queues", counted)
    return asked


# -- offers built as admission builds them, with ids of our own -------------------------------


class Maker:
    """Offers of one app with fixed tickets and run ids, so two stores can be given the very same ones."""

    def __init__(self, client: lg.Client, pauses: dict[str, Row] | None = None) -> None:
        self.client = client
        self.pauses = pauses if pauses is not None else {}
        self.made = 0

    def __call__(
        self, workflow: str, key: str, *, idem: str | None = None, at: float | None = None, dt: float = 0.001
    ) -> tuple[Offer, float]:
        self.made += 1
        i = self.made
        defn = self.client.app.get(workflow)
        model = Job(key=key, n=i)
        ticket = f"tkt_{i:04d}"
        run = self.client.new_run_row(defn, model, run_id=f"run_{i:04d}", idempotency_key=idem, ticket=ticket)
        run["retry_of"] = None
        o = Offer(
            defn=defn,
            plan=defn.gate,
            ticket=ticket,
            payload=model.model_dump_json(),
            keys=control_keys(defn, defn.gate, model),
            priority=i % 3,
            fair=None,
            identity=run["identity"] if idem is not None else None,
            idempotency_key=idem,
            run=run,
            at=at,
            pauses=self.pauses,
        )
        return o, NOW + i * dt


async def _one_by_one(tx: Tx, offers: list[tuple[Offer, float]]) -> list[Decision]:
    return [await offer(tx, o, now) for o, now in offers]


async def _together(tx: Tx, offers: list[tuple[Offer, float]]) -> list[Decision]:
    return await offer_many(tx, [((o, now), {}) for o, now in offers])


async def _free(tx: Tx, run_id: str) -> None:
    await gate.free_slot(tx, run_id)


async def _state(url: str) -> dict[str, Any]:
    """Everything the gate wrote, with generated pending ids named by their ticket and seqs by ledger rank."""
    ledger = await sql(url, "SELECT * FROM lockgate_ledger ORDER BY id")
    pending = await sql(url, "SELECT * FROM lockgate_pending ORDER BY seq")
    rank = {r["id"]: i for i, r in enumerate(ledger)}
    names = {r["id"]: r["ticket"] for r in pending}
    for r in ledger:  # a parked row gone since (a batch offered when full): named by the arrival that parked it
        if r["pending_id"] is not None:
            names.setdefault(r["pending_id"], r["ticket"])
    runs = await sql(url, "SELECT * FROM lockgate_runs ORDER BY ticket")
    # A run made when a parked row is offered (a full batch) gets a fresh id: named by its first ticket.
    names.update({r["id"]: f"run:{r['ticket']}" for r in runs if not re.fullmatch(r"run_\d{4}", r["id"])})
    return {
        "ledger": [
            {
                **r,
                "id": rank[r["id"]],
                "pending_id": names.get(r["pending_id"], r["pending_id"]),
                "run_id": names.get(r["run_id"], r["run_id"]),
            }
            for r in ledger
        ],
        "pending": [{**r, "id": names[r["id"]], "seq": rank[r["seq"]]} for r in pending],
        "runs": [{**r, "id": names.get(r["id"], r["id"])} for r in runs],
        "events": [
            {**r, "run_id": names.get(r["run_id"], r["run_id"])}
            for r in await sql(url, "SELECT run_id, type, at, data FROM lockgate_run_events ORDER BY id")
        ],
        "slots": sorted(  # a full batch's run (a fresh id) named as in ``runs``
            (
                {**r, "run_id": names.get(r["run_id"], r["run_id"])}
                for r in await sql(url, "SELECT * FROM lockgate_slots")
            ),
            key=lambda r: str(r["run_id"]),
        ),
        "hits": await sql(url, "SELECT scope, key, at, n FROM lockgate_window_hits ORDER BY id"),
        "names": names,
    }


def _named(decisions: list[Decision], names: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for d in decisions:
        row = dataclasses.asdict(d)
        row["pending_id"] = names.get(d.pending_id or "", d.pending_id)
        row["run_id"] = names.get(d.run_id or "", d.run_id)
        out.append(row)
    return out


async def _both(
    url: str,
    twin: str,
    before: list[tuple[Offer, float]],
    burst: list[tuple[Offer, float]],
    *,
    free: list[str] = (),
    pauses: dict[str, Row] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Give ``before`` one by one to both stores (then free ``free``'s slots, and write ``pauses``, the offers'
    snapshot), then ``burst``: one by one on ``twin``, through the many form on ``url``. Checks both decided
    and wrote the same; the decisions."""
    app = make_app()
    decided = []
    for where, op in ((twin, _one_by_one), (url, _together)):
        async with lg.Client(app, where) as client:
            await client.store.write(_one_by_one, before)
            for run_id in free:
                await client.store.write(_free, run_id)
            for p in (pauses or {}).values():
                await client.store.write(gate.pause, p["scope"], p["reason"], p["until"], NOW - 60)
            decided.append(await client.store.write(op, burst))
    alone, together = await _state(twin), await _state(url)
    assert together["ledger"] == alone["ledger"]
    assert together["pending"] == alone["pending"]
    for table in ("runs", "events", "slots", "hits"):
        assert together[table] == alone[table], table
    named = _named(decided[1], together["names"])
    assert named == _named(decided[0], alone["names"])
    return named, together


# -- the many form decides as one by one ------------------------------------------------------


async def test_a_mixed_burst_is_decided_and_written_as_one_by_one(
    store_url: str, twin_url: str, set_reads: list[list[gate.Slot]]
) -> None:
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    # Before: key c full; key d full with one start waiting, then a slot freed (room, but a start waits ahead).
    before = [make("cc", "c"), make("cc", "c"), make("cc", "d"), make("cc", "d"), make("cc", "d")]
    burst = [
        make("cc", "a"),
        make("cc", "b"),
        make("cc", "a"),
        make("cc", "c"),  # full: parked
        make("cc", "d"),  # room, but one waits ahead: parked
        make("cc", "a"),  # a's third: parked
        make("cc", "e"),
        make("cc", "e", idem="once"),  # an identity: one by one, and it takes e's second slot
        make("cc", "e"),  # e is full now: parked (the keys are read again after the offer above)
        make("cc", "e", idem="once"),  # spent: existing
        make("win", "x"),  # a throttle window before a slot: decided together, window then slot
        make("win", "x"),  # the window is full: parked for the throttle
        make("cc", "b", at=NOW - 60),  # an at= already past: decided with the others
        make("cc", "b", at=NOW + 3600),  # an at= to come: delayed, one by one
        make("pooled", "p"),
        make("pooled", "p"),
        make("pooled", "p"),  # a pool's key holds two: parked
        make("cc", "a"),
    ]
    decided, state = await _both(store_url, twin_url, before, burst, free=["run_0003"])
    statuses = [d["status"] for d in decided]
    assert statuses == [
        "started",
        "started",
        "started",
        "queued",
        "queued",
        "queued",
        "started",
        "started",
        "queued",
        "existing",
        "started",
        "queued",
        "started",
        "queued",
        "started",
        "started",
        "queued",
        "queued",
    ]
    assert [d["mode"] for d in decided if d["status"] == "queued"] == [
        "concurrency",
        "concurrency",
        "concurrency",
        "concurrency",
        "throttle",
        "delayed",
        "concurrency",
        "concurrency",
    ]
    arrivals = [r for r in state["ledger"] if r["kind"] == "arrival"]
    assert [r["ticket"] for r in arrivals[len(before) :]] == [o.ticket for o, _ in burst]  # decision order
    # The many form read the slots of each run of arrivals decided together once, in sorted order.
    assert set_reads == [
        [("wf:cc", "a"), ("wf:cc", "b"), ("wf:cc", "c"), ("wf:cc", "d"), ("wf:cc", "e")],
        [("wf:cc", "e")],
        [("wf:cc", "b"), ("wf:win", "")],  # the throttled slot's with the slot-only arrival after it
        [("pool:shared", "p"), ("wf:cc", "a")],
    ]


async def test_parked_arrivals_keep_their_order_per_key_and_the_limit(
    store_url: str, twin_url: str, set_reads: list[list[gate.Slot]]
) -> None:
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    burst = [make("cc", "ab"[i % 3 % 2]) for i in range(60)]
    decided, state = await _both(store_url, twin_url, [], burst)
    assert len(set_reads) == 1
    for key in "ab":
        mine = [
            (o.ticket, d["status"]) for (o, _), d in zip(burst, decided, strict=True) if o.keys["concurrency"] == key
        ]
        assert [status for _, status in mine] == ["started"] * 2 + ["queued"] * (len(mine) - 2)  # the first in order
        parked = [r for r in state["pending"] if r["hold_key"] == key]
        assert [r["id"] for r in parked] == [ticket for ticket, status in mine if status == "queued"]  # seq order
        assert {(r["mode"], r["stage"], r["hold_scope"], r["due_at"]) for r in parked} == {
            ("concurrency", "key_pause", "wf:cc", None)
        }
        assert all(r["expires_at"] == r["first_at"] + 3600 for r in parked)  # timeouts.start
    assert Counter(r["key"] for r in state["slots"]) == {"a": 2, "b": 2}
    arrivals = [r for r in state["ledger"] if r["kind"] == "arrival"]
    assert [r["ticket"] for r in arrivals] == [o.ticket for o, _ in burst]
    queued = [r for r in arrivals if r["outcome"] == "queued"]
    assert {(r["control"], r["reason"], r["run_id"], r["folded"], r["waited"]) for r in queued} == {
        ("concurrency", None, None, 1, None)
    }
    assert [r["pending_id"] for r in queued] == [r["ticket"] for r in queued]  # each names its own parked row


async def test_a_paused_workflow_parks_every_arrival_one_by_one(
    store_url: str, twin_url: str, set_reads: list[list[gate.Slot]]
) -> None:
    pauses = {"wf:cc": {"scope": "wf:cc", "reason": "maintenance", "until": None}}
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client, pauses)
    burst = [make("cc", "ab"[i % 2]) for i in range(6)] + [make("pooled", "p")]
    decided, state = await _both(store_url, twin_url, [], burst, pauses=pauses)
    assert [(d["status"], d["mode"], d["reason"]) for d in decided[:6]] == [("queued", "paused", "maintenance")] * 6
    assert decided[6]["status"] == "started"
    assert set_reads == [[("pool:shared", "p")]]  # only the start of the workflow no pause holds
    assert [r["mode"] for r in state["pending"]] == ["paused"] * 6


async def test_a_paused_key_parks_its_arrivals_and_not_the_others(
    store_url: str, twin_url: str, set_reads: list[list[gate.Slot]]
) -> None:
    pauses = {
        "key:a": {"scope": "key:a", "reason": "a is down", "until": NOW + 600},
        "key:b": {"scope": "key:b", "reason": "over", "until": NOW - 1},  # ended before the burst
    }
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client, pauses)
    burst = [make("cc", "abb"[i % 3]) for i in range(9)]
    decided, state = await _both(store_url, twin_url, [], burst, pauses=pauses)
    assert [(d["status"], d["mode"]) for d in decided] == [
        ("queued", "key-paused"),
        ("started", None),
        ("started", None),
        ("queued", "key-paused"),
        ("queued", "concurrency"),
        ("queued", "concurrency"),
        ("queued", "key-paused"),
        ("queued", "concurrency"),
        ("queued", "concurrency"),
    ]
    assert all(d["due_at"] == NOW + 600 for d in decided if d["mode"] == "key-paused")
    # Each run of b's arrivals between a's was read on its own (a's go one by one, and may change anything).
    assert set_reads == [[("wf:cc", "b")]] * 3
    assert [r["hold_key"] for r in state["pending"]] == ["a", "a", "b", "b", "a", "b", "b"]


# -- a real burst through the store's group commit --------------------------------------------


async def test_a_burst_of_starts_is_admitted_in_arrival_order_within_the_limit(
    env_factory: Any, many_runs: list[int]
) -> None:
    async with env_factory(make_app()) as env:
        assert isinstance(env, TestEnv)
        e = env.engine
        await e.pause_snapshot()  # read now: no start waits for it, so they reach the store in the order given
        starts = [("cc", {"key": "ab"[i % 2], "n": i}, None) for i in range(30)]
        starts.insert(9, ("cc", {"key": "a", "n": 100}, "idem-1"))  # one by one, amid the others
        starts.insert(17, ("win", {"key": "x", "n": 101}, None))
        handles = await asyncio.gather(*(e.start(w, p, idempotency_key=k) for w, p, k in starts))
        assert max(many_runs) > 1  # the burst shared a group commit and went through the many form
        arrivals = await sql(env.store_url, "SELECT ticket FROM lockgate_ledger WHERE kind = 'arrival' ORDER BY id")
        assert [r["ticket"] for r in arrivals] == [h.ticket for h in handles]
        for key in "ab":
            mine = [h for (w, p, _), h in zip(starts, handles, strict=True) if w == "cc" and p["key"] == key]
            assert [h.status for h in mine] == ["started"] * 2 + ["queued"] * (len(mine) - 2)
            parked = [r["ticket"] for r in await pending_rows(env.store_url) if r["hold_key"] == key]
            assert parked == [h.ticket for h in mine if h.status == "queued"]
        assert handles[17].status == "started"
        slots = await sql(env.store_url, "SELECT key, COUNT(*) AS n FROM lockgate_slots GROUP BY key ORDER BY key")
        assert [(r["key"], r["n"]) for r in slots] == [("", 1), ("a", 2), ("b", 2)]
        # Freed slots go to the parked starts of that key in arrival order.
        await env.settle()
        first = [h for h in handles if h.status == "started" and h.workflow == "cc"]
        for h in first:
            assert h.run_id is not None
            await e.signal(h.run_id, "go", {})
        await env.settle()
        await e.drainer.tick()
        await env.settle()
        admitted = await sql(
            env.store_url,
            "SELECT ticket FROM lockgate_ledger WHERE kind = 'drain' AND outcome = 'admitted' ORDER BY id",
        )
        queued = {
            key: [
                h.ticket
                for (w, p, _), h in zip(starts, handles, strict=True)
                if w == "cc" and p["key"] == key and h.status == "queued"
            ]
            for key in "ab"
        }
        assert sorted(r["ticket"] for r in admitted) == sorted(queued["a"][:2] + queued["b"][:2])


async def test_bursts_from_two_writers_share_each_keys_limit(store_url: str, many_runs: list[int]) -> None:
    """Two clients (two writers, as two processes have) burst on the same keys at once: each key's
    slots are its limit, not twice it, and every start is decided once, parked ones in the ledger's order."""
    app = make_app()
    async with lg.Client(app, store_url) as one, lg.Client(app, store_url) as two:
        await one.pause_snapshot()
        await two.pause_snapshot()
        bursts = [[c.start("cc", {"key": "cba"[i % 3], "n": i}) for i in range(45)] for c in (one, two)]
        handles = await asyncio.gather(*bursts[0], *bursts[1])
        assert max(many_runs) > 1
        assert Counter(h.status for h in handles) == {"started": 6, "queued": 84}
        slots = await sql(store_url, "SELECT key, COUNT(*) AS n FROM lockgate_slots GROUP BY key ORDER BY key")
        assert [(r["key"], r["n"]) for r in slots] == [("a", 2), ("b", 2), ("c", 2)]
        arrivals = await sql(store_url, "SELECT ticket, pending_id FROM lockgate_ledger ORDER BY id")
        assert sorted(r["ticket"] for r in arrivals) == sorted(h.ticket for h in handles)
        in_ledger_order = [r["pending_id"] for r in arrivals if r["pending_id"] is not None]
        assert [r["id"] for r in await pending_rows(store_url)] == in_ledger_order


# -- one throttle or one rate limit ------------------------------------------------------------


async def test_window_arrivals_are_decided_together_as_one_by_one_while_their_windows_slide(
    store_url: str, twin_url: str, window_reads: list[list[tuple[str, str, int]]]
) -> None:
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    # 0.4 s between offers, windows of ten seconds: hits leave the windows during the burst.
    before = [make("rl", "a", dt=0.4), make("th", "a", dt=0.4), make("th", "a", dt=0.4), make("th", "a", dt=0.4)]
    burst = [make(("rl", "th", "rlp", "thp")[i % 4], "ab"[i % 3 % 2], dt=0.4) for i in range(60)]
    decided, state = await _both(store_url, twin_url, before, burst)
    outcomes = Counter((o.workflow, d["status"]) for (o, _), d in zip(burst, decided, strict=True))
    assert {status for _, status in outcomes} == {"started", "dropped", "queued"}
    assert outcomes[("rl", "queued")] == outcomes[("th", "dropped")] == 0
    assert len(window_reads) == 1  # the whole burst: one read of its windows
    assert sorted(window_reads[0]) == [
        ("pool:provider", "a", 3),
        ("pool:provider", "b", 3),
        ("pool:quota", "a", 3),
        ("pool:quota", "b", 3),
        ("wf:rl:rate_limit[0]", "a", 2),
        ("wf:rl:rate_limit[0]", "b", 2),
        ("wf:th:throttle[0]", "a", 2),
        ("wf:th:throttle[0]", "b", 2),
    ]
    dropped = [d for d in decided if d["status"] == "dropped"]
    assert all(0 < d["retry_after"] <= 10 for d in dropped)
    parked = [r for r in state["pending"] if r["mode"] == "throttle"]
    assert all(r["due_at"] >= r["first_at"] for r in parked)


async def test_window_arrivals_mixed_with_others_keep_the_order_of_decisions(
    store_url: str, twin_url: str, window_reads: list[list[tuple[str, str, int]]]
) -> None:
    pauses = {"key:b": {"scope": "key:b", "reason": "b is down", "until": NOW + 600}}
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client, pauses)
    burst = [
        make("rl", "a"),
        make("rl", "a"),
        make("rl", "a"),  # over the limit: dropped
        make("th", "a"),
        make("th", "a"),
        make("th", "a"),  # the window is full: parked until the first hit leaves
        make("cc", "a"),  # another control: decided with the slot-only ones
        make("th", "a"),  # behind the parked one
        make("th", "b"),  # a paused key: one by one
        make("rl", "a", idem="once"),  # an identity: one by one, and it is over a's limit
        make("th", "c", at=NOW + 3600),  # delayed: one by one
        make("th", "c"),
        make("rlp", "p"),
        make("thp", "p"),  # two pools
    ]
    decided, state = await _both(store_url, twin_url, [], burst, pauses=pauses)
    assert [(d["status"], d["mode"]) for d in decided] == [
        ("started", None),
        ("started", None),
        ("dropped", None),
        ("started", None),
        ("started", None),
        ("queued", "throttle"),
        ("started", None),
        ("queued", "throttle"),
        ("queued", "key-paused"),
        ("dropped", None),
        ("queued", "delayed"),
        ("started", None),
        ("started", None),
        ("started", None),
    ]
    assert decided[5]["due_at"] == pytest.approx(NOW + 0.004 + 10)  # when the first of the two hits leaves
    assert decided[7]["due_at"] == pytest.approx(NOW + 0.008)  # at once: it only queues behind
    arrivals = [r for r in state["ledger"] if r["kind"] == "arrival"]
    assert [r["ticket"] for r in arrivals] == [o.ticket for o, _ in burst]
    assert [(r["outcome"], r["control"]) for r in arrivals[:3]] == [
        ("admitted", None),
        ("admitted", None),
        ("dropped", "rate_limit"),
    ]
    assert window_reads == [  # each run of arrivals decided together between the others: its keys read once
        [("wf:rl:rate_limit[0]", "a", 2), ("wf:th:throttle[0]", "a", 2)],  # the slot-only one among them
        [("pool:provider", "p", 3), ("pool:quota", "p", 3), ("wf:th:throttle[0]", "c", 2)],
    ]


async def test_window_bursts_from_two_writers_share_each_keys_window(
    store_url: str, window_reads: list[list[tuple[str, str, int]]]
) -> None:
    """Two clients (two writers, as two processes have) burst through one rate limit and one throttle at
    once: each key admits its limit per window, not twice it; the rest is dropped or parked, each in the ledger."""
    app = make_app()
    async with lg.Client(app, store_url) as one, lg.Client(app, store_url) as two:
        await one.pause_snapshot()
        await two.pause_snapshot()
        bursts = [
            [c.start(("rl", "th")[i % 2], {"key": "ab"[i % 4 // 2], "n": i}) for i in range(60)] for c in (one, two)
        ]
        handles = await asyncio.gather(*bursts[0], *bursts[1])
        assert any(len(keys) > 1 for keys in window_reads)  # decided together, not one by one
        workflows = [("rl", "th")[i % 2] for i in range(60)] * 2
        outcomes = Counter((w, h.status) for w, h in zip(workflows, handles, strict=True))
        assert outcomes == {("rl", "started"): 4, ("rl", "dropped"): 56, ("th", "started"): 4, ("th", "queued"): 56}
        hits = await sql(store_url, "SELECT scope, key, COUNT(*) AS n FROM lockgate_window_hits GROUP BY scope, key")
        assert sorted((r["scope"], r["key"], r["n"]) for r in hits) == [
            ("wf:rl:rate_limit[0]", "a", 2),
            ("wf:rl:rate_limit[0]", "b", 2),
            ("wf:th:throttle[0]", "a", 2),
            ("wf:th:throttle[0]", "b", 2),
        ]
        ledger = await sql(store_url, "SELECT ticket, outcome FROM lockgate_ledger ORDER BY id")
        assert sorted(r["ticket"] for r in ledger) == sorted(h.ticket for h in handles)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request)


async def test_window_bursts_of_two_processes_held_at_once_still_admit_the_limit(
    pg_url: str, window_reads: list[list[tuple[str, str, int]]]
) -> None:
    """Both writers' bursts are held at once before they write (the tables they write are locked from
    outside): had both decided on empty windows, both would admit. The key's lock orders them, and the
    hits' unique rank would refuse the second writer's hit and send its burst round again."""
    import psycopg

    app = make_app()
    async with lg.Client(app, pg_url) as one, lg.Client(app, pg_url) as two:
        await one.pause_snapshot()
        await two.pause_snapshot()
        async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
            await blocker.execute("LOCK TABLE lockgate_window_hits, lockgate_ledger, lockgate_runs IN SHARE MODE")
            bursts = asyncio.gather(
                *(c.start("rl", {"key": "a", "n": i}) for c in (one, two) for i in range(10)),
            )

            async def waiters() -> int:
                rows = await sql(
                    pg_url,
                    "SELECT COUNT(*) AS n FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                return int(rows[0]["n"])

            async def both_held() -> bool:
                return await waiters() >= 2

            await eventually(both_held, what="both writers held at the locked tables")
            await blocker.commit()
            handles = await asyncio.wait_for(bursts, 30)
    assert Counter(h.status for h in handles) == {"started": 2, "dropped": 18}
    hits = await sql(pg_url, "SELECT COUNT(*) AS n FROM lockgate_window_hits")
    assert hits[0]["n"] == 2


# -- one debounce -------------------------------------------------------------------------------


async def test_debounced_arrivals_fold_together_as_one_by_one(
    store_url: str, twin_url: str, group_reads: list[list[str]]
) -> None:
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    # Groups open before the burst (two of them), and during it; the first-kept one hits its timeout cap.
    before = [make("deb", "a", dt=0.5), make("debf", "a", dt=0.5), make("deba", "b", dt=0.5)]
    burst = [make(("deb", "debf", "deba")[i % 3], "abc"[i % 4 % 3], dt=0.5) for i in range(45)]
    burst.insert(10, make("deb", "a", idem="once", dt=0.5))  # an identity: one by one, between two runs
    decided, state = await _both(store_url, twin_url, before, burst)
    assert {d["status"] for d in decided} == {"queued"}
    assert {d["mode"] for d in decided} == {"debounce"}
    groups = {r["group_key"]: r for r in state["pending"]}
    assert len(groups) == 9  # three workflows, three keys: one open group each
    assert sum(int(r["folded"]) for r in groups.values()) == len(before) + len(burst)
    assert len(group_reads) == 2  # the burst's two runs of debounce-only arrivals: one read each
    collapsed = [r for r in state["ledger"] if r["outcome"] == "collapsed"]
    assert len(collapsed) == len(before) + len(burst) - 9
    assert all(r["reason"].startswith("folded into tkt_") for r in collapsed)


async def test_batched_arrivals_gather_and_fill_together_as_one_by_one(
    store_url: str, twin_url: str, group_reads: list[list[str]]
) -> None:
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    before = [make("bat", "a"), make("bat", "b")]  # two batches open before the burst
    burst = [make(("bat", "bat", "bat1")[i % 3], "abc"[i % 4 % 3]) for i in range(40)]
    burst.insert(7, make("cc", "a"))  # another control, decided in the same run
    decided, state = await _both(store_url, twin_url, before, burst)
    statuses = Counter(d["status"] for d in decided)
    assert statuses["started"] >= 10 and statuses["queued"] >= 10  # batches filled (and single ones) ran
    assert len(group_reads) == 1
    batched = [r for r in state["ledger"] if r["outcome"] == "batched"]
    added = [r for r in batched if r["reason"] is not None]  # the first item of a batch opens it, without a reason
    assert added and all(r["reason"].startswith("item ") for r in added)
    runs = [r for r in state["runs"] if r["workflow"] == "bat"]
    assert runs and all(len(json.loads(r["payload"])["items"]) == 3 for r in runs)  # each run a full batch


@pytest.mark.parametrize("window", ["throttle", "rate_limit"])
async def test_windowed_slots_are_decided_together_as_one_by_one(
    store_url: str,
    twin_url: str,
    window: str,
    window_reads: list[list[tuple[str, str, int]]],
    set_reads: list[list[gate.Slot]],
) -> None:
    own, pooled, alone = ("ths", "thsp", "thp") if window == "throttle" else ("rls", "rlsp", "rlp")
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    # Before: key a's slots full (one start parked for a slot), then one freed: room, but a start waits ahead.
    before = [make(own, "a", dt=0.4) for _ in range(3 if window == "throttle" else 2)]
    burst = [make((own, pooled, alone)[i % 3], "abc"[i % 5 % 3], dt=0.4) for i in range(45)]
    burst += [make("pooled", "abc"[i % 3], dt=0.4) for i in range(6)]  # the pool's slots, taken by a slot-only run
    decided, state = await _both(store_url, twin_url, before, burst, free=["run_0001"])
    statuses = Counter(d["status"] for d in decided)
    modes = Counter(d["mode"] for d in decided if d["status"] == "queued")
    assert modes["concurrency"] > 0 and statuses["started"] > 0
    if window == "throttle":
        assert modes["throttle"] > 0  # held by each of the two controls
    else:
        assert statuses["dropped"] > 0
        # Parked for a slot, an arrival was still counted by the rate limit (the stage it passed): the
        # one-by-one store's window hits, compared above, say so too.
        assert {r["scope"] for r in state["hits"]} == {"wf:rls:rate_limit[0]", "pool:quota"}
    assert len(window_reads) == 1  # one run of arrivals (a window alone, or before a slot, or a slot alone)
    assert len(set_reads) == 1  # its slots, the slot-only arrivals' among them
    slots = Counter((r["scope"], r["key"]) for r in state["slots"])
    assert all(n <= 1 for (scope, _), n in slots.items() if scope == f"wf:{own}")
    assert all(n <= 2 for (scope, _), n in slots.items() if scope == "pool:shared")


async def test_combined_controls_are_decided_together_as_one_by_one(
    store_url: str, twin_url: str, window_reads: list[list[tuple[str, str, int]]], group_reads: list[list[str]]
) -> None:
    """A rate limit before a debounce, a throttle beside one, a batch before a slot or a throttle (offered when
    full, which the run's later arrivals then see), and no control at all: one run, decided as one by one."""
    async with lg.Client(make_app(), store_url) as client:
        make = Maker(client)
    names = ("bare", "rldeb", "thdeb", "batcc", "bat1th", "cc", "th", "rl", "batp", "pooled")
    burst = [make(names[i % len(names)], "ab"[i // len(names) % 2], dt=0.1) for i in range(80)]
    decided, state = await _both(store_url, twin_url, [], burst)
    statuses = Counter(d["status"] for d in decided)
    assert statuses["started"] and statuses["queued"] and statuses["dropped"]
    assert {d["mode"] for d in decided if d["status"] == "queued"} >= {"debounce", "batch", "concurrency"}
    assert len(window_reads) > 1  # read again after a full batch took a window hit or a slot
    assert state["runs"]


WORKFLOWS = (
    *("cc", "pooled", "win", "rl", "th", "thp", "rlp", "ths", "thsp", "rls", "rlsp"),
    *("deb", "debf", "deba", "bat", "bat1", "bare", "rldeb", "thdeb", "batcc", "batp", "bat1th"),
)
bursts = st.tuples(
    st.lists(
        st.tuples(st.sampled_from(WORKFLOWS), st.sampled_from("ab"), st.sampled_from((None, None, None, "i0", "i1"))),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from((0.001, 0.4, 3.0)),  # seconds between arrivals: windows full, sliding, or empty
    st.booleans(),  # key b paused
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(burst=bursts)
def test_any_burst_is_decided_together_as_one_by_one(tmp_path: Path, burst: Any) -> None:
    """Random arrivals of every control (and of none), keys, idempotency keys and pauses: the many form decides
    and writes what the pipeline one by one does (SQLite only: each example opens two fresh stores)."""
    arrivals, dt, paused = burst
    pauses = {"key:b": {"scope": "key:b", "reason": "b is down", "until": NOW + 600}} if paused else {}

    async def run() -> None:
        folder = tempfile.mkdtemp(dir=tmp_path)
        url, twin = f"sqlite:///{folder}/many.db", f"sqlite:///{folder}/one.db"
        async with lg.Client(make_app(), url) as client:
            make = Maker(client, pauses)
        offers = [make(name, key, idem=idem, dt=dt) for name, key, idem in arrivals]
        await _both(url, twin, [], offers, pauses=pauses)

    asyncio.run(run())
