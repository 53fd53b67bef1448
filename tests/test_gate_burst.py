"""A throttle with a burst: a token bucket (GCRA) at the gate.

``Throttle(limit, period, burst=b)`` spaces starts ``period / limit`` apart and lets an idle
key pass ``b`` more at once; no half-open span of one period holds more than ``limit + b``
starts, and the long-run rate is ``limit / period``. Everything runs on the fake clock, on
both stores; the property runs on SQLite (a fresh store per example, as in
``test_gate_properties``), and processes sharing a key are checked on both stores.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import lockgate as lg
from lockgate.clock import to_datetime
from lockgate.gate.rules import BURST_REASON
from lockgate.testing import TestEnv

from .apps.gate import advance
from .apps.gate_probes import ledger_rows, pending_rows, sql
from .apps.sqlite_copies import copy_store
from .conftest import LONG

T0 = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[1]


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Go(BaseModel):
    ok: bool = True


def by_key(p: Any) -> str:
    return str(p.key)


def burst_app(**throttle: Any) -> lg.App:
    """``th``: a throttle with a burst (the keyword arguments) by the payload's key; returns its ``n``."""
    app = lg.App()

    @app.workflow(name="th", throttle=lg.Throttle(key=by_key, **throttle))
    async def body(ctx: lg.Context, p: Job) -> int:
        return p.n

    return app


async def admitted_at(url: str, workflow: str = "th") -> dict[str, list[float]]:
    """Each key's admission instants (its runs' ``created_at``), in order."""
    rows = await sql(url, f"SELECT payload, created_at FROM lockgate_runs WHERE workflow = '{workflow}'")
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        out[Job.model_validate_json(r["payload"]).key].append(float(r["created_at"]))
    return {k: sorted(v) for k, v in out.items()}


def check_bucket(times: Sequence[float], limit: int, period: float, burst: int) -> None:
    """The token bucket's bound, exactly: any ``j - i + 1`` starts span at least ``(j - i - burst)`` paces.

    So no half-open span of one period holds more than ``limit + burst``, and over a long run
    the starts come no faster than ``limit / period`` (plus the one burst).
    """
    pace = Fraction(period) / limit
    exact = [Fraction(t) for t in times]
    for i, first in enumerate(exact):
        in_period = sum(1 for t in exact[i:] if t < first + Fraction(period))
        assert in_period <= limit + burst, (i, times)
        for j in range(i + 1, len(exact)):
            assert exact[j] - first >= (j - i - burst) * pace, (i, j, times)


# -- semantics -------------------------------------------------------------------------------


async def test_an_idle_key_lets_the_burst_through_then_one_per_pace(env_factory: Any) -> None:
    # pace: 8s / 4 = 2s; an idle key passes 1 + 2 at once
    app = burst_app(limit=4, period="8s", burst=2)
    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(6)]
        assert [h.status for h in handles] == ["started"] * 3 + ["queued"] * 3
        for h in handles[3:]:
            assert h.deferral is not None
            assert (h.deferral.mode, h.deferral.due_at) == ("throttle", to_datetime(T0 + 2))
        await advance(env, "1.999s")
        assert [t - T0 for t in (await admitted_at(env.store_url))["k"]] == [0, 0, 0]
        await advance(env, "0.001s")
        (due,) = {r["due_at"] for r in await pending_rows(env.store_url)}
        assert due == T0 + 4
        await advance(env, "2s")
        await advance(env, "2s")
        assert [t - T0 for t in (await admitted_at(env.store_url))["k"]] == [0, 0, 0, 2, 4, 6]
        assert await pending_rows(env.store_url) == []

        # the ledger and the trace say which starts went through on burst: the two beyond the first
        reasons = []
        for h in handles:
            rows = await ledger_rows(env.engine, h.ticket)
            admitted = [r for r in rows if r["outcome"] == "admitted"]
            assert len(admitted) == 1
            reasons.append(admitted[0]["reason"])
        assert reasons == [None, BURST_REASON, BURST_REASON, None, None, None]
        trace = await env.engine.trace(handles[1].ticket)
        assert trace.reason == BURST_REASON and trace.run_id is not None
        assert [e["reason"] for e in trace.history] == [BURST_REASON]
        assert (await env.engine.trace(handles[0].ticket)).reason is None

        # idle for the burst's worth of paces: the burst is back whole
        await advance(env, "6s")
        more = [await env.engine.start("th", {"n": 10 + i}) for i in range(4)]
        assert [h.status for h in more] == ["started"] * 3 + ["queued"]


async def test_an_idle_key_refills_one_burst_start_per_pace(env_factory: Any) -> None:
    app = burst_app(limit=1, period="10s", burst=3)
    async with env_factory(app, start=T0) as env:
        first = [await env.engine.start("th", {"n": i}) for i in range(4)]
        assert [h.status for h in first] == ["started"] * 4
        await advance(env, "20s")  # two paces: two starts' room back, not the whole burst
        again = [await env.engine.start("th", {"n": 10 + i}) for i in range(3)]
        assert [h.status for h in again] == ["started", "started", "queued"]
        assert again[2].deferral is not None and again[2].deferral.due_at == to_datetime(T0 + 30)


async def test_burst_zero_spaces_every_start_by_the_pace(env_factory: Any) -> None:
    app = burst_app(limit=3, period="3s", burst=0)
    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(3)]
        assert [h.status for h in handles] == ["started", "queued", "queued"]
        for _ in range(2):
            await advance(env, "1s")
        assert [t - T0 for t in (await admitted_at(env.store_url))["k"]] == [0, 1, 2]
        for h in handles:
            assert all(r["reason"] is None for r in await ledger_rows(env.engine, h.ticket))


async def test_keys_have_their_own_buckets(env_factory: Any) -> None:
    app = burst_app(limit=1, period="1m", burst=1)
    async with env_factory(app, start=T0) as env:
        a = [await env.engine.start("th", {"key": "a", "n": i}) for i in range(3)]
        b = [await env.engine.start("th", {"key": "b", "n": 10 + i}) for i in range(3)]
        assert [h.status for h in a + b] == ["started", "started", "queued"] * 2


async def test_over_a_long_run_the_rate_is_limit_per_period(env_factory: Any) -> None:
    limit, period, burst, n = 4, 8.0, 3, 40
    app = burst_app(limit=limit, period=f"{period:g}s", burst=burst)
    async with env_factory(app, start=T0) as env:
        await asyncio.gather(*(env.engine.start("th", {"n": i}) for i in range(n)))
        for second in range(1, 80):
            await advance(env, "1s")
            times = (await admitted_at(env.store_url))["k"]
            # exactly the bucket's schedule: the burst at once, then one a pace, the limit used to the full
            assert len(times) == min(n, burst + 1 + second * limit // int(period)), second
        check_bucket(times, limit, period, burst)
        rate = Fraction(n - burst - 1) / (Fraction(times[-1]) - Fraction(times[0]))
        assert rate == Fraction(limit) / Fraction(period)


async def test_a_burst_throttle_under_a_concurrency_limit_counts_admissions(env_factory: Any) -> None:
    app = lg.App()

    @app.workflow(
        name="th",
        throttle=lg.Throttle(limit=2, period="10s", burst=1, key=by_key),
        concurrency=lg.Concurrency(limit=1, key=by_key),
    )
    async def held(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start("th", {"n": i}) for i in range(3)]
        assert [h.status for h in handles] == ["started", "queued", "queued"]
        await env.settle()
        await env.engine.signal(handles[0].run_id or "", "go", {})
        assert await env.engine.result(handles[0].run_id or "", timeout=20) == 0
        await advance(env)
        # the slot freed at once, and the bucket still held its burst start: the second goes through on it
        times = (await admitted_at(env.store_url))["k"]
        assert [t - T0 for t in times] == [0, 0]
        admitted = [r for r in await ledger_rows(env.engine, handles[1].ticket) if r["outcome"] == "admitted"]
        assert admitted[0]["reason"] == BURST_REASON


async def test_a_pool_shares_one_bucket_and_members_must_agree_on_the_burst(env_factory: Any) -> None:
    app = lg.App()
    for name in ("one", "two"):

        async def body(ctx: lg.Context, p: Job) -> int:
            return p.n

        app.workflow(name=name, throttle=lg.Throttle(limit=1, period="1m", burst=1, pool="api"))(body)
    async with env_factory(app, start=T0) as env:
        handles = [await env.engine.start(wf, {"n": i}) for i, wf in enumerate(("one", "two", "one"))]
        assert [h.status for h in handles] == ["started", "started", "queued"]

    odd = lg.App()
    for name, burst in (("one", 1), ("two", 2)):

        async def body2(ctx: lg.Context, p: Job) -> int:
            return p.n

        odd.workflow(name=name, throttle=lg.Throttle(limit=1, period="1m", burst=burst, pool="api"))(body2)
    with pytest.raises(lg.DefinitionError) as info:
        odd.definitions()
    assert info.value.workflow == "two" and info.value.fields == ["throttle[0].burst", "one.throttle[0].burst"]


# -- bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("throttle", "field"),
    [
        pytest.param(lg.Throttle(limit=1, period="1m", burst=-1), "throttle.burst", id="negative"),
        pytest.param(lg.Throttle(limit=1, period="1m", burst=1.5), "throttle.burst", id="float"),  # type: ignore[arg-type]
        pytest.param(lg.Throttle(limit=1, period="1m", burst=True), "throttle.burst", id="bool"),
        pytest.param(lg.Throttle(limit=1, period="1m", burst="2"), "throttle.burst", id="string"),  # type: ignore[arg-type]
        pytest.param(
            [lg.Throttle(limit=1, period="1m"), lg.Throttle(limit=5, period="1h", burst=-2)],
            "throttle[1].burst",
            id="second-of-a-list",
        ),
    ],
)
async def test_a_bad_burst_is_refused_naming_the_field_and_nothing_is_written(
    throttle: Any, field: str, tmp_path: Path
) -> None:
    app = lg.App()

    @app.workflow(name="wf", throttle=throttle)
    async def body(ctx: lg.Context, p: Job) -> None:
        return None

    with pytest.raises(lg.DefinitionError) as info:
        app.definitions()
    assert info.value.workflow == "wf" and info.value.fields == [field]
    engine = lg.Engine(app, f"sqlite:///{tmp_path}/never.db")
    with pytest.raises(lg.DefinitionError, match=field.replace("[", r"\[").replace("]", r"\]")):
        await engine.open()
    assert not (tmp_path / "never.db").exists()


def test_burst_absent_keeps_the_sliding_window() -> None:
    plan = burst_app(limit=2, period="1m").definitions()["th"].gate
    assert [w.burst for w in plan.windows] == [None]
    assert [w.burst for w in burst_app(limit=2, period="1m", burst=0).definitions()["th"].gate.windows] == [0]


# -- property: never more than limit + burst per period, limit per period in the long run ------

LIMIT, PERIOD, BURST = 3, 6.0, 2  # pace 2s


@dataclass(frozen=True)
class Arrive:
    key: str
    count: int


@dataclass(frozen=True)
class Complete:
    pick: int


@dataclass(frozen=True)
class Advance:
    seconds: float


def property_app() -> lg.App:
    app = lg.App()
    throttle = lg.Throttle(limit=LIMIT, period=f"{PERIOD:g}s", burst=BURST, key=by_key)

    @app.workflow(name="th", throttle=throttle)
    async def quick(ctx: lg.Context, p: Job) -> int:
        return p.n

    @app.workflow(name="held", throttle=throttle, concurrency=lg.Concurrency(limit=2, key=by_key))
    async def held(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    return app


burst_steps = st.lists(
    st.one_of(
        st.builds(Arrive, key=st.sampled_from(("a", "b")), count=st.integers(1, 4)),
        st.builds(Arrive, key=st.sampled_from(("a", "b")), count=st.integers(1, 4)),
        st.builds(Complete, pick=st.integers(0, 20)),
        # fractions of the pace, whole paces and a period, and an idle stretch
        st.builds(Advance, seconds=st.sampled_from((0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 6.0, 13.0))),
    ),
    min_size=6,
    max_size=30,
)


async def play(sequence: list[Arrive | Complete | Advance]) -> None:
    # a copy of the migrated template, its commits not flushed (as tests/test_gate_properties.py: what the
    # throttle decides is checked here, not what survives a power cut)
    with tempfile.TemporaryDirectory(prefix="lockgate-example-") as folder:
        store = copy_store(f"{folder}/lockgate.db", synchronous="normal")
        await _play(sequence, store)


async def _play(sequence: list[Arrive | Complete | Advance], store: str) -> None:
    async with TestEnv(property_app(), store=store, start=T0) as env:
        engine, n, tickets = env.engine, 0, []
        for step in sequence:
            if isinstance(step, Arrive):
                workflows = ("th", "held") * step.count
                offers = []
                for wf in workflows[: step.count]:
                    n += 1
                    offers.append(engine.start(wf, {"key": step.key, "n": n}))
                tickets += [h.ticket for h in await asyncio.gather(*offers)]  # one group commit
            elif isinstance(step, Complete):
                waiting = await sql(
                    env.store_url, "SELECT id FROM lockgate_runs WHERE status = 'running' ORDER BY created_at, id"
                )
                if waiting:
                    await engine.signal(waiting[step.pick % len(waiting)]["id"], "go", {})
            else:
                await env.advance(step.seconds)
            await env.settle()
            await engine.drainer.tick()
            await env.settle()
            both = await _both(env.store_url)
            for times in both.values():
                check_bucket(times, LIMIT, PERIOD, BURST)
        # delayed, never dropped: with time and free slots, every arrival is admitted
        for _ in range(200):
            if not await pending_rows(env.store_url):
                break
            for r in await sql(env.store_url, "SELECT id FROM lockgate_runs WHERE status = 'running'"):
                await engine.signal(r["id"], "go", {})
            await env.advance(1.0)
            await engine.drainer.tick()
            await env.settle()
        else:
            raise AssertionError("the throttle did not drain")
        for times in (await _both(env.store_url)).values():
            check_bucket(times, LIMIT, PERIOD, BURST)
        assert sum(len(t) for t in (await _both(env.store_url)).values()) == len(tickets)


async def _both(url: str) -> dict[str, list[float]]:
    """Each key's admissions across both workflows (one bucket: the throttle's scope is per workflow)."""
    out: dict[str, list[float]] = {}
    for wf in ("th", "held"):
        for key, times in (await admitted_at(url, wf)).items():
            out[f"{wf}/{key}"] = times
    return out


@settings(
    max_examples=100 if LONG else 20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(sequence=burst_steps)
def test_a_burst_throttle_never_passes_more_than_limit_plus_burst_per_period(sequence: list[Any]) -> None:
    """SQLite only: every example opens a fresh copy of a migrated SQLite store."""
    asyncio.run(play(sequence))


# -- across processes ------------------------------------------------------------------------

OFFERER = """
import asyncio, sys, time
import lockgate as lg
from tests.test_gate_burst import Job, cross_app

async def main(url: str, name: str, n: int, total: int) -> None:
    async with lg.Engine(cross_app(), url, poll_interval=0.02) as engine:
        await asyncio.gather(*(engine.start("th", {"key": "shared", "n": i}) for i in range(n)))
        deadline = time.monotonic() + 60
        while len(await engine.list_runs(workflow="th", limit=1000)) < total:
            assert time.monotonic() < deadline, "not all admitted"
            await asyncio.sleep(0.05)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""

CROSS_LIMIT, CROSS_PERIOD, CROSS_BURST = 5, 1.0, 3


def cross_app() -> lg.App:
    return burst_app(limit=CROSS_LIMIT, period=f"{CROSS_PERIOD:g}s", burst=CROSS_BURST)


async def test_processes_sharing_a_key_never_pass_more_than_limit_plus_burst(store_url: str) -> None:
    async with lg.Engine(cross_app(), store_url):  # the schema, before the processes race to create it
        pass
    each, procs = 12, []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    for name in ("p1", "p2"):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", OFFERER, store_url, name, str(each), str(2 * each)],
                cwd=ROOT,
                env=env,
                stderr=subprocess.PIPE,
            )
        )
    for p in procs:
        _, err = await asyncio.to_thread(p.communicate, timeout=90)
        assert p.returncode == 0, err.decode()[-2000:]
    times = (await admitted_at(store_url))["shared"]
    assert len(times) == 2 * each
    check_bucket(times, CROSS_LIMIT, CROSS_PERIOD, CROSS_BURST)
    # the limit is reached, not only respected: 24 starts need (24 - 4) paces of 0.2s at the least
    assert time.monotonic() - started < 30
