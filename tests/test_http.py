"""The HTTP API on both stores: every read and verb, its refusals, its cursors, and /metrics."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import create_app
from lockgate.testing import TestEnv

from .apps.gate import wait_runs

API = "/api/v1"


class Job(BaseModel):
    tenant: str = "t"
    n: int = 0
    hold: bool = False
    fail: bool = False


class Go(BaseModel):
    ok: bool = True


class Add(BaseModel):
    amount: int


def tenant(p: Job) -> str:
    return p.tenant


def boom(n: int) -> int:
    raise ValueError(f"job {n} cannot be done")


async def _body(ctx: lg.Context, p: Job) -> int:
    if p.hold:
        await ctx.wait_for_signal("go", Go)
    if p.fail:
        await ctx.step("boom", boom, p.n, retry=lg.Retry(max_attempts=1))
    return p.n


async def _counter(ctx: lg.Context, p: Job) -> int:
    total = 0

    async def add(change: Add) -> int:
        return total + change.amount

    while total < 10:
        total = await ctx.handle_update("add", Add, add)
    return total


def make_app() -> lg.App:
    app = lg.App()
    app.workflow(name="plain")(_body)
    app.workflow(name="counter")(_counter)
    app.workflow(name="folded", debounce=lg.Debounce(period="5m", key=tenant))(_body)
    return app


@asynccontextmanager
async def api(env: TestEnv, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(env.engine.client))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers) as http:
        yield http


def problem(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:lockgate:error:{name}" and body["status"] == status
    return body


async def status_of(http: httpx.AsyncClient, run_id: str) -> str:
    response = await http.get(f"{API}/runs/{run_id}")
    assert response.status_code == 200, response.text
    status: str = response.json()["run"]["status"]
    return status


async def test_reads_answer_from_the_inspector(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        engine = env.engine
        started = []
        for n in range(3):
            started.append(await engine.start("plain", {"n": n}))
            env.clock.advance(1)
        failed = await engine.start("plain", {"n": 9, "fail": True})
        parked = await engine.start("folded", {"n": 1})
        await env.settle()
        await wait_runs(engine, "plain", 3)
        await wait_runs(engine, "plain", 1, status="failed")

        listed = (await http.get(f"{API}/runs", params={"workflow": "plain"})).json()
        assert [r["id"] for r in listed["items"]] == [r.id for r in await engine.list_runs(workflow="plain")]
        assert listed["next_before"] is None
        dead = (await http.get(f"{API}/runs", params={"dead_letter": "true"})).json()["items"]
        assert [r["id"] for r in dead] == [failed.run_id]
        assert (await http.get(f"{API}/runs", params={"status": "failed"})).json()["items"][0]["id"] == failed.run_id
        problem(await http.get(f"{API}/runs", params={"status": "nope"}), 422, "InvalidArgument")
        problem(await http.get(f"{API}/runs", params={"limit": 0}), 422, "InvalidRequest")

        detail = (await http.get(f"{API}/runs/{failed.run_id}")).json()
        assert detail["run"]["status"] == "failed" and "raw" not in detail["run"]
        assert [s["name"] for s in detail["steps"]] == ["boom"]
        assert detail["attempts"][0]["status"] == "failed" and detail["children"] == []
        events = (await http.get(f"{API}/runs/{failed.run_id}/events")).json()
        assert events == detail["events"] and events[-1]["type"] == "run-failed"
        problem(await http.get(f"{API}/runs/run_nope"), 404, "UnknownRun")
        problem(await http.get(f"{API}/runs/run_nope/events"), 404, "UnknownRun")

        flow = (await http.get(f"{API}/flow", params={"workflow": "folded"})).json()
        assert flow[0]["queued"] == 1
        trace = (await http.get(f"{API}/tickets/{parked.ticket}")).json()
        assert trace["state"] == "parked" and trace["workflow"] == "folded"
        problem(await http.get(f"{API}/tickets/tkt_nope"), 404, "UnknownTicket")
        pending = (await http.get(f"{API}/pending")).json()
        assert [p["ticket"] for p in pending] == [parked.ticket]

        ledger = (await http.get(f"{API}/ledger", params={"limit": 2})).json()
        seen = [e["id"] for e in ledger["items"]]
        while ledger["next_before"] is not None:
            ledger = (await http.get(f"{API}/ledger", params={"limit": 2, "before": ledger["next_before"]})).json()
            seen += [e["id"] for e in ledger["items"]]
        assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 5
        problem(await http.get(f"{API}/ledger", params={"kind": "nope"}), 422, "InvalidArgument")

        stats = (await http.get(f"{API}/stats")).json()
        assert stats["totals"]["runs"]["succeeded"] == 3 and stats["totals"]["parked_total"] == 1
        cluster = (await http.get(f"{API}/cluster")).json()
        assert [w["id"] for w in cluster["workers"]] == [engine.worker_id]
        assert (await http.get(f"{API}/healthz")).json()["ok"] is True
        assert (await http.get(f"{API}/pauses")).json() == []
        assert (await http.get(f"{API}/schedules")).json() == []
        assert (await http.get(f"{API}/events")).json() == []
        problem(await http.get(f"{API}/events/evt_nope"), 404, "UnknownEvent")
        problem(await http.get(f"{API}/events/evt_nope/deliveries"), 404, "UnknownEvent")
        problem(await http.get(f"{API}/nowhere"), 404, "NotFound")

        schemas = (await http.get(f"{API}/openapi.json")).json()["components"]["schemas"]
        assert {"Run", "RunPage", "RunDetailOut", "Trace", "FlowRow", "StartBody", "Problem"} <= set(schemas)
        assert schemas["Run"]["properties"]["status"]["type"] == "string"


async def test_runs_page_by_cursor_while_runs_arrive(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        for n in range(5):
            await env.engine.start("plain", {"n": n})
            env.clock.advance(1)
        await env.settle()
        everything = [r.id for r in await env.engine.list_runs(workflow="plain")]
        page = (await http.get(f"{API}/runs", params={"workflow": "plain", "limit": 2})).json()
        seen = [r["id"] for r in page["items"]]
        newcomers = []
        while page["next_before"] is not None:
            newcomers.append((await env.engine.start("plain", {"n": 99})).run_id)  # does not shift the next page
            env.clock.advance(1)
            params = {"workflow": "plain", "limit": 2, "before": page["next_before"]}
            page = (await http.get(f"{API}/runs", params=params)).json()
            seen += [r["id"] for r in page["items"]]
        assert seen == everything and not set(newcomers) & set(seen)
        problem(await http.get(f"{API}/runs", params={"before": "run_nope"}), 404, "UnknownRun")


async def test_run_verbs(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        engine = env.engine
        held = await engine.start("plain", {"n": 1, "hold": True})
        await env.settle()
        url = f"{API}/runs/{held.run_id}"
        assert (await http.post(f"{url}/suspend", json={"reason": "look"})).status_code == 204
        assert await status_of(http, held.run_id) == "suspended"
        problem(await http.post(f"{url}/suspend"), 409, "RunNotEligible")
        assert (await http.post(f"{url}/resume")).status_code == 204
        await env.settle()
        assert (await http.post(f"{url}/signal", json={"name": "go", "payload": {"ok": True}})).status_code == 204
        await env.settle()
        await wait_runs(engine, "plain", 1)
        problem(await http.post(f"{url}/cancel", json={"reason": "late"}), 409, "RunNotEligible")
        problem(await http.post(f"{API}/runs/run_nope/cancel"), 404, "UnknownRun")

        doomed = await engine.start("plain", {"n": 2, "hold": True})
        await env.settle()
        assert (await http.post(f"{API}/runs/{doomed.run_id}/cancel", json={"reason": "no"})).status_code == 204
        assert await status_of(http, doomed.run_id) == "cancelled"
        undone = await engine.start("plain", {"n": 3, "hold": True})
        await env.settle()
        body = {"reason": "undo", "compensate": True}  # parked: entered again, stopped at its wait, then cancelled
        assert (await http.post(f"{API}/runs/{undone.run_id}/cancel", json=body)).status_code == 204
        await env.settle()
        assert await status_of(http, undone.run_id) == "cancelled"
        retried = await http.post(f"{API}/runs/{doomed.run_id}/retry", json={"payload": {"n": 7}})
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] == "started"
        await env.settle()
        assert await engine.result(retried.json()["run_id"], timeout=10) == 7
        assert (await engine.get_run(retried.json()["run_id"])).source == f"retry:{doomed.run_id}"

        failed = await engine.start("plain", {"n": 3, "fail": True})
        await env.settle()
        await wait_runs(engine, "plain", 1, status="failed")
        url = f"{API}/runs/{failed.run_id}"
        assert (await http.post(f"{url}/redrive")).status_code == 204
        await env.settle()
        await wait_runs(engine, "plain", 1, status="failed")
        assert (await http.post(f"{url}/resume-from-step", json={"step": "boom"})).status_code == 204
        await env.settle()
        await wait_runs(engine, "plain", 1, status="failed")
        body = problem(await http.post(f"{url}/resume-from-step", json={}), 422, "InvalidRequest")
        assert body["errors"][0]["field"] == "step"
        body = problem(await http.post(f"{url}/signal", json={"name": "go", "extra": 1}), 422, "InvalidRequest")
        assert "extra" in body["detail"]
        problem(
            await http.post(f"{url}/retry", content=b"{not json", headers={"content-type": "application/json"}),
            422,
            "InvalidRequest",
        )
        discarded = await http.post(f"{url}/discard")
        assert discarded.json() == {"run_id": failed.run_id, "already_discarded": False}
        again = await http.post(f"{url}/discard")  # idempotent: says so, changes nothing
        assert (again.status_code, again.json()["already_discarded"]) == (200, True)
        assert (await http.get(f"{API}/runs", params={"dead_letter": "true"})).json()["items"] == []
        problem(await http.post(f"{API}/runs/{held.run_id}/discard"), 409, "RunNotEligible")

        counter = await engine.start("counter", {})
        await env.settle()
        updated = await http.post(f"{API}/runs/{counter.run_id}/update", json={"name": "add", "payload": {"amount": 4}})
        assert updated.status_code == 200, updated.text
        assert updated.json() == {"result": 4, "answered": True, "detail": None}
        bad = {"name": "add", "payload": {"amount": "x"}}
        problem(await http.post(f"{API}/runs/{counter.run_id}/update", json=bad), 422, "PayloadError")
        # no handler answers "reset" in time: the wait the caller chose ran out, not the server (202, not a 5xx)
        unanswered = await http.post(f"{API}/runs/{counter.run_id}/update", json={"name": "reset", "timeout": 0.3})
        assert unanswered.status_code == 202, unanswered.text
        body = unanswered.json()
        assert (body["answered"], body["result"]) == (False, None)
        assert "not answered within 0.3s" in body["detail"]


async def test_gate_and_bulk_verbs(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        engine = env.engine
        started = await http.post(f"{API}/starts", json={"workflow": "plain", "payload": {"n": 5}})
        assert started.status_code == 200 and started.json()["status"] == "started"
        await env.settle()
        assert await engine.result(started.json()["run_id"], timeout=10) == 5
        assert (await engine.get_run(started.json()["run_id"])).source == "http"
        problem(await http.post(f"{API}/starts", json={"workflow": "nope"}), 404, "UnknownWorkflow")
        problem(
            await http.post(f"{API}/starts", json={"workflow": "plain", "payload": {"n": "x"}}), 422, "PayloadError"
        )
        problem(await http.post(f"{API}/starts", json={"payload": {}}), 422, "InvalidRequest")

        folded = (await http.post(f"{API}/starts", json={"workflow": "folded", "payload": {"n": 1}})).json()
        assert folded["status"] == "queued" and folded["deferral_mode"] == "debounce"
        cancelled = await http.post(f"{API}/tickets/{folded['ticket']}/cancel", json={"reason": "changed my mind"})
        assert cancelled.json() == {"arrivals": 1}
        problem(
            await http.post(f"{API}/tickets/{folded['ticket']}/cancel", json={"reason": "again"}), 409, "LockgateError"
        )
        problem(await http.post(f"{API}/tickets/{folded['ticket']}/cancel", json={"reason": ""}), 422, "InvalidRequest")

        assert (await http.post(f"{API}/workflows/plain/pause", json={"reason": "deploy"})).status_code == 204
        assert (await http.post(f"{API}/keys/pause", json={"key": "tenant/a", "reason": "noisy"})).status_code == 204
        pauses = {p["scope"]: p for p in (await http.get(f"{API}/pauses")).json()}
        assert set(pauses) == {"wf:plain", "key:tenant/a"} and pauses["wf:plain"]["reason"] == "deploy"
        held = (await http.post(f"{API}/starts", json={"workflow": "plain", "payload": {"n": 6}})).json()
        assert held["status"] == "queued"
        assert (await http.post(f"{API}/workflows/plain/unpause")).json() == {"released": 1}
        assert (await http.post(f"{API}/keys/unpause", json={"key": "tenant/a"})).status_code == 204
        assert (await http.get(f"{API}/pauses")).json() == []
        problem(await http.post(f"{API}/workflows/nope/pause"), 404, "UnknownWorkflow")
        await env.settle()

        for n in range(2):
            await engine.start("plain", {"n": n, "hold": True})
        await env.settle()
        dry = (await http.post(f"{API}/runs/cancel-many", json={"reason": "drain", "limit": 10})).json()
        assert dry["committed"] is False and dry["counts"]["would-act"] == 2
        done = (
            await http.post(f"{API}/runs/cancel-many", json={"reason": "drain", "limit": 10, "commit": True})
        ).json()
        assert done["counts"]["succeeded"] == 2
        replay = {"mode": "retry", "limit": 1, "status": "cancelled", "commit": True}
        replayed = (await http.post(f"{API}/runs/replay-many", json=replay)).json()
        assert replayed["counts"]["succeeded"] == 1 and replayed["truncated"] is True
        problem(await http.post(f"{API}/runs/replay-many", json={"mode": "again", "limit": 1}), 422, "InvalidRequest")
        await env.settle()


async def test_metrics_count_a_known_workload(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        for n in range(3):
            await env.engine.start("plain", {"n": n})
        await env.engine.start("plain", {"n": 9, "fail": True})
        await env.engine.start("folded", {"n": 1})
        await env.engine.start("folded", {"n": 2})  # folds into the first
        await env.settle()
        await wait_runs(env.engine, "plain", 3)
        env.clock.advance(30)
        scraped = await http.get("/metrics")
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(scraped.text)
            for s in family.samples
        }
        assert samples[("lockgate_runs", (("status", "succeeded"), ("workflow", "plain")))] == 3
        assert samples[("lockgate_runs", (("status", "failed"), ("workflow", "plain")))] == 1
        assert samples[("lockgate_parked_starts", (("mode", "debounce"), ("workflow", "folded")))] == 1
        assert samples[("lockgate_admissions", (("outcome", "admitted"), ("workflow", "plain")))] == 4
        assert samples[("lockgate_admissions", (("outcome", "collapsed"), ("workflow", "folded")))] == 1
        assert samples[("lockgate_queue_depth", (("workflow", "folded"),))] == 1
        waiting = {labels: v for (name, labels), v in samples.items() if name == "lockgate_key_waiting"}
        assert list(waiting.values()) == [1] and dict(next(iter(waiting)))["workflow"] == "folded"
        assert samples[("lockgate_oldest_waiting_seconds", (("workflow", "folded"),))] >= 30
        assert sum(v for (name, _), v in samples.items() if name == "lockgate_workers") == 1
        assert samples[("lockgate_scrape_errors", ())] == 0


_NIGHTLY = """
import asyncio, sys
from pydantic import BaseModel
import lockgate as lg

class Night(BaseModel):
    fail: bool = False

app = lg.App()

@app.workflow(name="nightly")
async def nightly(ctx: lg.Context, p: Night) -> str:
    if p.fail:
        raise RuntimeError("no report")
    return "done"

async def main() -> None:
    async with lg.Engine(app, sys.argv[1]) as engine:
        ok = await engine.start("nightly", {})
        print(ok.run_id, await engine.result(ok.run_id, timeout=30))
        bad = await engine.start("nightly", {"fail": True})
        try:
            await engine.result(bad.run_id, timeout=30)
        except lg.RunFailed:
            pass

asyncio.run(main())
"""


def _scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_give_each_workflows_last_success_read_from_the_store(store_url: str) -> None:
    """A run that succeeded in another process: this one's /metrics reports when, from the store."""
    async with lg.Client(lg.App(), store_url) as client:
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            before = _scrape((await http.get("/metrics")).text)
            assert not [k for k in before if k[0] == "lockgate_last_success_timestamp_seconds"]  # none yet
            done = subprocess.run(
                [sys.executable, "-c", _NIGHTLY, store_url], capture_output=True, text=True, timeout=90, check=True
            )
            run_id = done.stdout.split()[0]
            finished = (await client.get_run(run_id)).finished_at
            assert finished is not None
            after = _scrape((await http.get("/metrics")).text)
    gauge = after[("lockgate_last_success_timestamp_seconds", (("workflow", "nightly"),))]
    assert gauge == pytest.approx(finished.timestamp(), abs=1e-3)  # the success, not the later failure
    assert after[("lockgate_runs", (("status", "failed"), ("workflow", "nightly")))] == 1


async def test_the_cli_and_the_api_show_the_same_run(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        failed = await env.engine.start("plain", {"n": 4, "fail": True})
        await env.settle()
        await wait_runs(env.engine, "plain", 1, status="failed")
        argv = [sys.executable, "-m", "lockgate.cli", "workflows", "show", str(failed.run_id)]
        argv += ["--store", env.store_url, "--format", "json"]
        # off the loop: the engine goes on (its transactions end) while the command reads
        shown = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=60, check=True)
        cli = json.loads(shown.stdout)
        served = (await http.get(f"{API}/runs/{failed.run_id}")).json()

        def same(document: dict[str, Any]) -> dict[str, Any]:  # times are spelled differently
            return {k: v for k, v in document.items() if not k.endswith("_at") and k not in ("at", "raw")}

        assert same(cli["run"]) == same(served["run"])
        for part in ("steps", "attempts", "events", "children"):
            assert [same(x) for x in cli[part]] == [same(x) for x in served[part]], part
