"""The ledger's accounting: every gate decision is a row an operator can read, and ``flow()`` sums them.

One scenario drives a mix of workflows through every control that decides, then reads
the rows of each arrival (``ledger_for_ticket``) and the per-workflow, per-key totals
of ``engine.flow()``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

from .apps.gate_probes import ledger_rows, sql

T0 = 1_800_000_000.0


class Job(BaseModel):
    key: str = "k"
    n: int = 0


class Item(BaseModel):
    key: str = "k"
    n: int = 0


class Items(BaseModel):
    items: list[Item]


class Go(BaseModel):
    ok: bool = True


def by_key(p: Any) -> str:
    return str(p.key)


def mixed_app() -> lg.App:
    app = lg.App()

    async def held(ctx: lg.Context, p: Job) -> int:
        await ctx.wait_for_signal("go", Go)
        return p.n

    async def quick(ctx: lg.Context, p: Job) -> int:
        return p.n

    async def gathered(ctx: lg.Context, p: Items) -> int:
        return sum(i.n for i in p.items)

    app.workflow(name="conc", concurrency=lg.Concurrency(limit=1, key=by_key))(held)
    app.workflow(name="deb", debounce=lg.Debounce(period="1m", key=by_key))(quick)
    app.workflow(name="bat", batch=lg.Batch(item=Item, max_size=3, timeout="1m", key=by_key))(gathered)
    app.workflow(name="rate", rate_limit=lg.RateLimit(limit=1, period="1h", key=by_key))(quick)
    app.workflow(name="one", singleton=lg.Singleton(mode="skip", key=by_key))(held)
    app.workflow(name="exp", concurrency=lg.Concurrency(limit=1, key=by_key), timeouts=lg.Timeouts(start="30s"))(held)
    app.workflow(name="plain")(quick)
    return app


def fields(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["kind"], row["workflow"], row["key"], row["outcome"], row["control"])


async def test_every_decision_is_a_ledger_row_with_its_key_reason_and_run(env_factory: Any) -> None:
    async with env_factory(mixed_app(), start=T0) as env:
        e = env.engine
        tickets: dict[str, lg.RunHandle] = {}

        # concurrency: admitted, queued; identity: existing (spent by a run, held by a parked start)
        tickets["conc.admitted"] = await e.start("conc", {"key": "t1", "n": 1}, idempotency_key="job-1")
        tickets["conc.queued"] = await e.start("conc", {"key": "t1", "n": 2}, idempotency_key="job-2")
        tickets["conc.existing"] = await e.start("conc", {"key": "t1", "n": 1}, idempotency_key="job-1")
        tickets["conc.existing-parked"] = await e.start("conc", {"key": "t1", "n": 2}, idempotency_key="job-2")
        # debounce: queued then collapsed into it
        tickets["deb.queued"] = await e.start("deb", {"key": "row-1", "n": 1})
        tickets["deb.collapsed"] = await e.start("deb", {"key": "row-1", "n": 2})
        # batch: three items, the third flushes the batch
        tickets["bat.1"] = await e.start("bat", {"key": "t1", "n": 1})
        tickets["bat.2"] = await e.start("bat", {"key": "t1", "n": 2})
        tickets["bat.3"] = await e.start("bat", {"key": "t1", "n": 3})
        # rate limit: admitted, dropped
        tickets["rate.admitted"] = await e.start("rate", {"key": "t1"})
        tickets["rate.dropped"] = await e.start("rate", {"key": "t1"})
        # singleton skip
        tickets["one.admitted"] = await e.start("one", {"key": "s"})
        tickets["one.skipped"] = await e.start("one", {"key": "s"})
        # start timeout: a parked start that never got a slot
        tickets["exp.admitted"] = await e.start("exp", {"key": "x"})
        tickets["exp.expired"] = await e.start("exp", {"key": "x"})
        # pause: parked, released by unpause, then admitted
        await e.pause("plain", reason="deploying")
        tickets["plain.paused"] = await e.start("plain", {"n": 5})

        h = tickets
        assert {k: v.status for k, v in h.items()} == {
            "conc.admitted": "started",
            "conc.queued": "queued",
            "conc.existing": "existing",
            "conc.existing-parked": "existing",
            "deb.queued": "queued",
            "deb.collapsed": "queued",
            "bat.1": "queued",
            "bat.2": "queued",
            "bat.3": "started",
            "rate.admitted": "started",
            "rate.dropped": "dropped",
            "one.admitted": "started",
            "one.skipped": "skipped",
            "exp.admitted": "started",
            "exp.expired": "queued",
            "plain.paused": "queued",
        }
        # every handle names its own arrival: each ticket is distinct and has exactly one arrival row
        assert len({v.ticket for v in h.values()}) == len(h)
        for name, handle in h.items():
            arrivals = [r for r in await ledger_rows(e, handle.ticket) if r["kind"] == "arrival"]
            assert len(arrivals) == 1, name
            assert arrivals[0]["ticket"] == handle.ticket

        await env.settle()
        await env.advance("30s")  # the parked "exp" start passes timeouts.start
        await e.drainer.tick()
        await env.advance("30s")  # the debounce period ends
        await e.drainer.tick()
        assert await e.unpause("plain") == 1
        await e.drainer.tick()
        await env.settle()

        async def rows(name: str) -> list[tuple[Any, ...]]:
            return [fields(r) for r in await ledger_rows(e, h[name].ticket)]

        assert await rows("conc.admitted") == [("arrival", "conc", "t1", "admitted", None)]
        assert await rows("conc.queued") == [("arrival", "conc", "t1", "queued", "concurrency")]
        assert await rows("conc.existing") == [("arrival", "conc", None, "existing", "identity")]
        assert await rows("conc.existing-parked") == [("arrival", "conc", None, "existing", "identity")]
        assert await rows("deb.queued") == [
            ("arrival", "deb", "row-1", "queued", "debounce"),
            ("drain", "deb", "row-1", "admitted", "debounce"),
        ]
        assert await rows("deb.collapsed") == [("arrival", "deb", "row-1", "collapsed", "debounce")]
        assert await rows("bat.1") == [
            ("arrival", "bat", "t1", "batched", "batch"),
            ("drain", "bat", "t1", "admitted", "batch"),
        ]
        assert await rows("bat.2") == [("arrival", "bat", "t1", "batched", "batch")]
        assert await rows("bat.3") == [("arrival", "bat", "t1", "batched", "batch")]
        assert await rows("rate.admitted") == [("arrival", "rate", "t1", "admitted", None)]
        assert await rows("rate.dropped") == [("arrival", "rate", "t1", "dropped", "rate_limit")]
        assert await rows("one.admitted") == [("arrival", "one", "s", "admitted", None)]
        assert await rows("one.skipped") == [("arrival", "one", "s", "skipped", "singleton")]
        assert await rows("exp.expired") == [
            ("arrival", "exp", "x", "queued", "concurrency"),
            ("drain", "exp", "x", "expired", "concurrency"),
        ]
        assert await rows("plain.paused") == [
            ("arrival", "plain", None, "queued", "paused"),
            ("drain", "plain", None, "released", "paused"),
            ("drain", "plain", None, "admitted", "released"),
        ]

        # run ids: an admission names its run, an existing names the run that spent the key
        first = (await ledger_rows(e, h["conc.admitted"].ticket))[0]
        assert first["run_id"] == h["conc.admitted"].run_id is not None
        spent = (await ledger_rows(e, h["conc.existing"].ticket))[0]
        assert spent["run_id"] == h["conc.admitted"].run_id == h["conc.existing"].run_id
        assert spent["reason"] == "idempotency key already spent"
        held = (await ledger_rows(e, h["conc.existing-parked"].ticket))[0]
        queued = (await ledger_rows(e, h["conc.queued"].ticket))[0]
        assert held["run_id"] is None and held["pending_id"] == queued["pending_id"] is not None
        assert held["reason"] == "a parked start holds this idempotency key"
        assert h["conc.existing-parked"].run_id is None
        skipped = (await ledger_rows(e, h["one.skipped"].ticket))[0]
        assert skipped["run_id"] == h["one.admitted"].run_id == h["one.skipped"].run_id
        assert skipped["reason"] == f"held by {h['one.admitted'].run_id}"
        dropped = (await ledger_rows(e, h["rate.dropped"].ticket))[0]
        assert dropped["run_id"] is None and "1 per 3600s" in dropped["reason"]

        # folded and waited: the debounce run carries two arrivals and waited its period
        deb_arrival, deb_admit = await ledger_rows(e, h["deb.queued"].ticket)
        assert (deb_arrival["folded"], deb_arrival["waited"]) == (1, None)
        assert deb_admit["folded"] == 2 and deb_admit["waited"] == pytest.approx(60.0)
        deb_run = await e.get_run(deb_admit["run_id"])
        assert (deb_run.status, deb_run.output) == ("succeeded", 2)  # the latest payload won
        collapsed = (await ledger_rows(e, h["deb.collapsed"].ticket))[0]
        assert collapsed["pending_id"] == deb_arrival["pending_id"]
        assert collapsed["reason"] == f"folded into {h['deb.queued'].ticket} (2 arrivals)"
        bat_admit = (await ledger_rows(e, h["bat.1"].ticket))[1]
        assert bat_admit["folded"] == 3 and bat_admit["run_id"] == h["bat.3"].run_id
        assert await e.result(bat_admit["run_id"]) == 6
        expired = (await ledger_rows(e, h["exp.expired"].ticket))[1]
        assert expired["reason"] == "start-timeout" and expired["waited"] == pytest.approx(30.0)
        assert expired["run_id"] is None
        released = (await ledger_rows(e, h["plain.paused"].ticket))[1]
        assert released["reason"] == "unpaused" and released["waited"] == pytest.approx(60.0)

        # trace follows each arrival to where it ended
        assert (await e.trace(h["deb.collapsed"].ticket)).absorbed_by == h["deb.queued"].ticket
        assert (await e.trace(h["deb.collapsed"].ticket)).state == "succeeded"
        assert (await e.trace(h["bat.2"].ticket)).run_id == h["bat.3"].run_id
        assert (await e.trace(h["exp.expired"].ticket)).state == "expired"
        assert (await e.trace(h["conc.existing-parked"].ticket)).absorbed_by == h["conc.queued"].ticket


async def mixed_flow(env: TestEnv) -> dict[tuple[str, str], lg.FlowRow]:
    return {(f.workflow, f.key): f for f in await env.engine.flow()}


async def test_flow_sums_the_ledger_per_workflow_and_key(env_factory: Any) -> None:
    async with env_factory(mixed_app(), start=T0) as env:
        e = env.engine
        for n in range(3):
            await e.start("conc", {"key": "t1", "n": n})
        await e.start("conc", {"key": "t2"})
        for n in range(4):
            await e.start("deb", {"key": "row-1", "n": n})
        await e.start("rate", {"key": "t1"})
        await e.start("rate", {"key": "t1"})
        await e.start("rate", {"key": "t2"})
        await env.settle()
        await env.advance("20s")

        flow = await mixed_flow(env)
        conc = flow[("conc", "t1")]
        assert (conc.queued, conc.in_flight, conc.admitted, conc.collapsed, conc.dropped) == (2, 1, 1, 0, 0)
        assert conc.oldest_waiting == pytest.approx(20.0)
        assert conc.modes == {"concurrency": 2}
        assert (flow[("conc", "t2")].queued, flow[("conc", "t2")].in_flight) == (0, 1)
        deb = flow[("deb", "row-1")]
        assert (deb.queued, deb.collapsed, deb.admitted, deb.in_flight) == (1, 3, 0, 0)
        assert deb.oldest_waiting == pytest.approx(20.0)
        assert (flow[("rate", "t1")].admitted, flow[("rate", "t1")].dropped) == (1, 1)
        assert (flow[("rate", "t2")].admitted, flow[("rate", "t2")].dropped) == (1, 0)

        only = await e.flow(workflow="conc")
        assert {(f.workflow, f.key) for f in only} == {("conc", "t1"), ("conc", "t2")}

        # the debounced row runs; the concurrency queue moves up by one as its key's run ends
        await env.advance("40s")
        await e.drainer.tick()
        (run,) = [r for r in await e.list_runs(workflow="conc", limit=10) if r.payload["key"] == "t1"]
        await e.signal(run.id, "go", {})
        await env.settle()
        await e.drainer.tick()
        await env.settle()
        flow = await mixed_flow(env)
        conc = flow[("conc", "t1")]
        assert (conc.queued, conc.in_flight, conc.admitted) == (1, 1, 2)
        assert conc.oldest_waiting == pytest.approx(60.0)
        deb = flow[("deb", "row-1")]
        assert (deb.queued, deb.oldest_waiting, deb.collapsed, deb.admitted) == (0, None, 3, 1)


async def test_a_spent_idempotency_key_is_existing_with_a_ledger_row(env_factory: Any) -> None:
    async with env_factory(mixed_app(), start=T0) as env:
        first = await env.engine.start("plain", {"n": 1}, idempotency_key="order-7")
        await env.settle()
        assert await env.engine.result(first.run_id or "") == 1
        again = await env.engine.start("plain", {"n": 2}, idempotency_key="order-7")
        assert (again.status, again.run_id) == ("existing", first.run_id)
        assert again.ticket != first.ticket
        (row,) = await ledger_rows(env.engine, again.ticket)
        assert (row["kind"], row["outcome"], row["control"], row["run_id"]) == (
            "arrival",
            "existing",
            "identity",
            first.run_id,
        )
        assert row["reason"] == "idempotency key already spent"
        assert await env.engine.result(again.run_id or "") == 1  # the old run's result, not a new run
        (only,) = await env.engine.list_runs(workflow="plain")
        assert only.id == first.run_id
        flow = await mixed_flow(env)
        assert (flow[("plain", "")].admitted, flow[("plain", "")].existing) == (1, 1)


async def test_arrival_rows_are_one_per_start_whatever_the_outcome(env_factory: Any) -> None:
    async with env_factory(mixed_app(), start=T0) as env:
        handles = [await env.engine.start("rate", {"key": "r"}) for _ in range(3)]
        handles += [await env.engine.start("deb", {"key": "d", "n": i}) for i in range(3)]
        handles += [await env.engine.start("plain", {"n": 1}, idempotency_key="same") for _ in range(2)]
        counts = await sql(
            env.store_url,
            "SELECT ticket, COUNT(*) AS n FROM lockgate_ledger WHERE kind = 'arrival' GROUP BY ticket",
        )
        assert {r["ticket"]: r["n"] for r in counts} == {h.ticket: 1 for h in handles}
