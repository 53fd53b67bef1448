"""Property tests of the gate: random arrivals and completions never break its invariants.

These run on SQLite only: each example opens a fresh store of its own (a copy of a migrated
SQLite file, ``tests/apps/sqlite_copies.py``), which would mean one PostgreSQL database per
example. Its commits are not flushed to the disk (``synchronous=normal``): what is checked
here is what the gate decides, not what survives a power cut, and the flushes were most of
an example's time.
The gate's SQL is shared in shape across dialects and the store-parametrized tests cover
PostgreSQL.

A sequence mixes arrivals (a concurrency-limited workflow, a debounced one and a throttled
one under the same limit, random keys and payloads, some idempotency keys), completions (a
signal the run waits for), cancels and clock moves. After every step:

- no key has more than ``limit`` runs in flight (slots and run statuses, read together),
  and every live gated run holds exactly one slot;
- no throttle key admitted more than the throttle's limit in any window;
- every arrival's ticket has exactly one arrival row in the ledger;
- every admission names a run that exists, and every started handle's run exists;
- no payload is admitted twice, and each idempotency key yields at most one run.

At the end every run is released and the drainer drains: nothing stays parked, no slot
is held, and every arrival can be followed to a run or to the decision that ended it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate_probes import sql
from .apps.sqlite_copies import copy_store

LIMIT = 2
THROTTLE, THROTTLE_PERIOD = 1, 10
KEYS = ("a", "b")
IDEMPOTENCY = ("i0", "i1", "i2", "i3")


class Job(BaseModel):
    key: str
    n: int


class Go(BaseModel):
    ok: bool = True


def property_app() -> lg.App:
    app = lg.App()

    async def held(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    def by_key(p: Any) -> str:
        return str(p.key)

    concurrency = lg.Concurrency(limit=LIMIT, key=by_key)
    app.workflow(name="p.conc", concurrency=concurrency)(held)
    app.workflow(name="p.deb", debounce=lg.Debounce(period="10s", key=by_key), concurrency=concurrency)(held)
    throttle = lg.Throttle(limit=THROTTLE, period=f"{THROTTLE_PERIOD}s", key=by_key)
    app.workflow(name="p.th", throttle=throttle, concurrency=concurrency)(held)
    return app


@dataclass(frozen=True)
class Arrive:
    workflow: str
    key: str
    idempotency_key: str | None


@dataclass(frozen=True)
class Complete:
    pick: int


@dataclass(frozen=True)
class Cancel:
    pick: int


@dataclass(frozen=True)
class Advance:
    seconds: int


arrivals = st.builds(
    Arrive,
    workflow=st.sampled_from(("p.conc", "p.conc", "p.deb", "p.th")),
    key=st.sampled_from(KEYS),
    idempotency_key=st.one_of(st.none(), st.none(), st.sampled_from(IDEMPOTENCY)),
)
steps = st.lists(
    st.one_of(
        arrivals,
        arrivals,
        arrivals,
        st.builds(Complete, pick=st.integers(0, 20)),
        st.builds(Cancel, pick=st.integers(0, 20)),
        st.builds(Advance, seconds=st.sampled_from((1, 5, 11))),
    ),
    min_size=8,
    max_size=30,
)


throttled = st.lists(
    st.one_of(
        st.builds(Arrive, workflow=st.just("p.th"), key=st.sampled_from(KEYS), idempotency_key=st.none()),
        st.builds(Complete, pick=st.integers(0, 20)),
        st.builds(Advance, seconds=st.integers(1, 15)),
    ),
    min_size=8,
    max_size=30,
)


class Scenario:
    """One example: the engine, every handle it returned, and the invariant checks."""

    def __init__(self, env: TestEnv) -> None:
        self.env = env
        self.handles: list[tuple[Arrive, lg.RunHandle]] = []
        self.n = 0

    async def apply(self, step: Arrive | Complete | Cancel | Advance) -> None:
        engine = self.env.engine
        if isinstance(step, Arrive):
            self.n += 1
            handle = await engine.start(
                step.workflow, {"key": step.key, "n": self.n}, idempotency_key=step.idempotency_key
            )
            self.handles.append((step, handle))
        elif isinstance(step, Complete | Cancel):
            waiting = await self.waiting()
            if waiting:
                run_id = waiting[step.pick % len(waiting)]
                if isinstance(step, Complete):
                    await engine.signal(run_id, "go", {})
                else:
                    await engine.cancel(run_id, reason="property test")
        else:
            await self.env.advance(step.seconds)
        await self.env.settle()
        await engine.drainer.tick()
        await self.env.settle()

    async def waiting(self) -> list[str]:
        rows = await sql(
            self.env.store_url,
            "SELECT id FROM lockgate_runs WHERE status = 'running' AND waiting_on = 'signal' ORDER BY created_at, id",
        )
        return [r["id"] for r in rows]

    async def check(self) -> None:
        url = self.env.store_url
        # in flight: one statement reads slots and runs together
        pairs = await sql(
            url,
            "SELECT s.run_id AS slot, r.id AS run, s.scope, s.key FROM lockgate_slots s "
            "LEFT JOIN lockgate_runs r ON r.id = s.run_id AND r.status IN ('running', 'suspended') "
            "UNION ALL SELECT NULL, r.id, r.slot_scope, r.slot_key FROM lockgate_runs r "
            "WHERE r.slot_scope IS NOT NULL AND r.status IN ('running', 'suspended') "
            "AND NOT EXISTS (SELECT 1 FROM lockgate_slots s WHERE s.run_id = r.id)",
        )
        assert [p for p in pairs if p["slot"] is None or p["run"] is None] == []
        per_key = Counter((p["scope"], p["key"]) for p in pairs)
        assert all(n <= LIMIT for n in per_key.values()), per_key
        live = await sql(
            url,
            "SELECT workflow, slot_key, COUNT(*) AS n FROM lockgate_runs "
            "WHERE status IN ('running', 'suspended') GROUP BY workflow, slot_key",
        )
        assert all(r["n"] <= LIMIT for r in live), live

        # the throttle counts admissions: never more than its limit in any window (now - period, now]
        admitted = await sql(url, "SELECT slot_key, created_at FROM lockgate_runs WHERE workflow = 'p.th'")
        for run in admitted:
            window = [
                r
                for r in admitted
                if r["slot_key"] == run["slot_key"]
                and run["created_at"] - THROTTLE_PERIOD < r["created_at"] <= run["created_at"]
            ]
            assert len(window) <= THROTTLE, admitted

        # one arrival row per ticket, and only for the arrivals made
        arrivals = await sql(
            url, "SELECT ticket, COUNT(*) AS n FROM lockgate_ledger WHERE kind = 'arrival' GROUP BY ticket"
        )
        assert {r["ticket"]: r["n"] for r in arrivals} == {h.ticket: 1 for _, h in self.handles}

        # no admission is lost
        lost = await sql(
            url,
            "SELECT l.ticket, l.run_id FROM lockgate_ledger l LEFT JOIN lockgate_runs r ON r.id = l.run_id "
            "WHERE l.outcome = 'admitted' AND r.id IS NULL",
        )
        assert lost == []
        runs = {r["id"]: r for r in await sql(url, "SELECT id, workflow, payload, idempotency_key FROM lockgate_runs")}
        for _, handle in self.handles:
            if handle.status in ("started", "existing") and handle.run_id is not None:
                assert handle.run_id in runs

        # no payload admitted twice, no idempotency key spent twice
        payloads = Counter(Job.model_validate_json(r["payload"]).n for r in runs.values())
        assert all(n == 1 for n in payloads.values()), payloads
        identities = Counter((r["workflow"], r["idempotency_key"]) for r in runs.values() if r["idempotency_key"])
        assert all(n == 1 for n in identities.values()), identities
        for arrive, handle in self.handles:
            if handle.status == "existing" and handle.run_id is not None:
                assert runs[handle.run_id]["idempotency_key"] == arrive.idempotency_key

    async def finish(self) -> None:
        """Release every run until nothing waits; then nothing may be left parked or held."""
        engine = self.env.engine
        for _ in range(60):
            waiting = await self.waiting()
            parked = await sql(self.env.store_url, "SELECT id FROM lockgate_pending")
            if not waiting and not parked:
                break
            for run_id in waiting:
                await engine.signal(run_id, "go", {})
            await self.env.advance("11s")
            await engine.drainer.tick()
            await self.env.settle()
            await self.check()
        else:
            raise AssertionError("the gate did not drain")
        assert await sql(self.env.store_url, "SELECT run_id FROM lockgate_slots") == []
        assert (
            await sql(self.env.store_url, "SELECT id FROM lockgate_runs WHERE status IN ('running', 'suspended')") == []
        )
        for _, handle in self.handles:
            trace = await engine.trace(handle.ticket)
            if trace.run_id is None:
                assert trace.outcome == "existing" or trace.absorbed_by is not None, trace
            else:
                assert trace.state in ("succeeded", "cancelled"), trace


async def play(sequence: list[Arrive | Complete | Cancel | Advance]) -> None:
    with tempfile.TemporaryDirectory(prefix="lockgate-example-") as folder:
        store = copy_store(f"{folder}/lockgate.db", synchronous="normal")
        async with TestEnv(property_app(), store=store, start=1_800_000_000.0) as env:
            scenario = Scenario(env)
            for step in sequence:
                await scenario.apply(step)
                await scenario.check()
            await scenario.finish()


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=steps)
def test_random_arrivals_and_completions_keep_the_gate_invariants(sequence: list[Any]) -> None:
    """SQLite only: every example opens a fresh copy of a migrated SQLite store (see the module docstring)."""
    asyncio.run(play(sequence))


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=throttled)
def test_a_throttle_under_a_concurrency_limit_never_admits_past_its_window(sequence: list[Any]) -> None:
    """SQLite only, as above: throttled arrivals that may also wait for a slot, completions, clock moves."""
    asyncio.run(play(sequence))
