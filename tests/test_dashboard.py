"""The dashboard's pages, actions and saved views over HTTP on both stores (the browser tests
drive the same pages in Chromium): what each page shows, what it escapes, what it refuses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import lockgate as lg
from lockgate.dashboard import RunFilter, fetch_runs
from lockgate.dashboard.flowview import sparkline
from lockgate.errors import InvalidArgument
from lockgate.http import AccessPolicy, create_app
from lockgate.testing import TestEnv

from .test_encryption import MARK, NEW, OLD
from .test_encryption import make_app as sealed_app
from .test_http import Go, Job, make_app

UI = "/ui"
API = "/api/v1"
EVIL = "<script>alert(1)</script>"


@asynccontextmanager
async def site_of(client: lg.Client, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers) as http:
        yield http


def site(env: TestEnv, **headers: str) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    return site_of(env.engine.client, **headers)


async def test_every_page_answers_and_escapes_payloads(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        client = env.engine.client
        evil = await client.start("plain", Job(tenant=EVIL, n=1))
        held = await client.start("plain", Job(n=2, hold=True))
        failed = await client.start("plain", Job(n=3, fail=True))
        folded = [await client.start("folded", Job(tenant="t1", n=n)) for n in range(3)]
        await env.settle()
        pages = [
            "/runs",
            f"/runs/{evil.run_id}",
            f"/runs/{held.run_id}",
            f"/runs/{failed.run_id}",
            f"/runs/{held.run_id}/do/cancel",
            "/flow",
            "/flow?window=7d",
            f"/why?ticket={folded[1].ticket}",
            "/events",
            "/schedules",
            "/cluster",
        ]
        for path in pages:
            answer = await http.get(UI + path)
            assert answer.status_code == 200, (path, answer.text[:500])
            assert answer.headers["content-type"].startswith("text/html")
            assert EVIL not in answer.text, path
        shown = (await http.get(f"{UI}/runs/{evil.run_id}")).text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
        assert (await http.get("/")).headers["location"] == f"{UI}/runs"
        css = await http.get(f"{UI}/static/dashboard.css")
        assert css.status_code == 200 and "prefers-color-scheme: dark" in css.text
        assert (await http.get(f"{UI}/static/dashboard.js")).status_code == 200
        why = (await http.get(f"{UI}/why?ticket={folded[1].ticket}")).text
        assert "absorbed by" in why and folded[0].ticket in why
        flow = (await http.get(f"{UI}/flow")).text
        assert re.search(r'data-flow="folded\|t1".*?data-col="collapsed">2<', flow, re.S)


async def test_unknown_things_and_bad_filters_are_refused_by_name(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        assert (await http.get(f"{UI}/runs/run_nope")).status_code == 404
        bad = await http.get(f"{UI}/runs?status=lost")
        assert bad.status_code == 422 and "unknown status" in bad.text
        assert "since must be an ISO date" in (await http.get(f"{UI}/runs?since=yesterday")).text
        assert "limit must be" in (await http.get(f"{UI}/runs?limit=0")).text
        assert (await http.get(f"{UI}/why?ticket=tkt_nope")).status_code == 404
        assert "window must be one of" in (await http.get(f"{UI}/flow?window=2h")).text
        assert (await http.get(f"{UI}/schedules?name=nightly")).status_code == 404


async def test_verbs_act_through_the_client_and_show_a_refusal(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        client = env.engine.client
        held = await client.start("plain", Job(hold=True))
        done = await client.start("plain", Job(n=1))
        await env.settle()
        page = (await http.get(f"{UI}/runs/{done.run_id}")).text
        assert 'aria-disabled="true" data-verb="cancel"' in page  # a finished run offers no cancel

        answer = await http.post(f"{UI}/runs/{held.run_id}/do/cancel", data={"reason": "by hand"})
        assert answer.status_code == 303 and answer.headers["location"] == f"{UI}/runs/{held.run_id}?done=cancel"
        run = await client.inspector.run(held.run_id)  # type: ignore[arg-type]
        assert run.status == "cancelled" and run.error_message and "by hand" in run.error_message

        parked = await client.start("plain", Job(hold=True))
        await env.settle()
        answer = await http.post(f"{UI}/runs/{parked.run_id}/do/cancel-compensate", data={"reason": "undo"})
        assert answer.status_code == 303, answer.text
        await env.settle()  # entered again, stopped at its wait, compensated, cancelled
        assert (await client.inspector.run(parked.run_id)).status == "cancelled"  # type: ignore[arg-type]

        refused = await http.post(f"{UI}/runs/{done.run_id}/do/resume")
        assert refused.status_code == 409 and "RunNotEligible" in refused.text
        bad = await http.post(f"{UI}/runs/{held.run_id}/do/retry", data={"payload": "{not json"})
        assert bad.status_code == 422 and "payload must be JSON" in bad.text
        assert (await client.inspector.runs(workflow="plain", limit=10)).__len__() == 3  # nothing written

        retried = await http.post(f"{UI}/runs/{held.run_id}/do/retry", data={"payload": '{"n": 7}'})
        assert retried.status_code == 303
        new_id = retried.headers["location"].split("/runs/")[1].split("?")[0]
        await env.settle()
        assert (await client.inspector.run(new_id)).output == 7


async def test_posts_from_another_origin_are_refused(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        held = await env.engine.client.start("plain", Job(hold=True))
        await env.settle()
        for headers in ({"origin": "http://elsewhere.example"}, {"sec-fetch-site": "cross-site"}):
            answer = await http.post(f"{UI}/runs/{held.run_id}/do/cancel", data={}, headers=headers)
            assert answer.status_code == 403
        assert (await env.engine.client.inspector.run(held.run_id)).status == "running"  # type: ignore[arg-type]
        same = await http.post(
            f"{UI}/runs/{held.run_id}/do/signal",
            data={"name": "go", "payload": "{}"},
            headers={"origin": "http://testserver"},
        )
        assert same.status_code == 303


async def test_bulk_previews_before_it_commits(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        client = env.engine.client
        held = [await client.start("plain", Job(n=n, hold=True)) for n in range(3)]
        await env.settle()
        form = {"verb": "cancel", "workflow": "plain", "status": "", "limit": "10", "reason": "drain"}
        preview = await http.post(f"{UI}/flow/bulk", data=form)
        assert preview.status_code == 200 and 'id="commit"' in preview.text
        assert all(h.run_id in preview.text for h in held)
        assert {r.status for r in await client.inspector.runs(workflow="plain")} == {"running"}
        committed = await http.post(f"{UI}/flow/bulk", data={**form, "commit": "1"})
        assert committed.status_code == 200 and 'id="commit"' not in committed.text
        assert {r.status for r in await client.inspector.runs(workflow="plain")} == {"cancelled"}
        refused = await http.post(f"{UI}/flow/bulk", data={**form, "reason": ""})
        assert refused.status_code == 422 and "must not be empty" in refused.text


async def test_pauses_are_lifted_from_the_flow_page(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        client = env.engine.client
        await client.pause("plain", "deploy")
        await client.pause_key("t1", reason="noisy")
        page = (await http.get(f"{UI}/flow")).text
        assert "Unpause workflow plain" in page and "Unpause key t1" in page
        for kind, name in (("workflow", "plain"), ("key", "t1")):
            answer = await http.post(f"{UI}/flow/unpause", data={"kind": kind, "name": name})
            assert answer.status_code == 303
        assert await client.inspector.pauses() == []


async def test_saved_views_are_kept_in_the_store(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, site(env) as http:
        saved = await http.post(f"{UI}/views", data={"name": "failed plain", "query": "workflow=plain&status=failed"})
        assert saved.status_code == 303 and saved.headers["location"] == f"{UI}/views/failed%20plain"
        opened = await http.get(saved.headers["location"])
        assert opened.headers["location"] == f"{UI}/runs?workflow=plain&status=failed"
        views = await env.engine.client.inspector.saved_views()
        assert [(v.name, v.query) for v in views] == [("failed plain", "workflow=plain&status=failed")]
        # the same name replaces it; bad input is refused and writes nothing
        await http.post(f"{UI}/views", data={"name": "failed plain", "query": "status=failed"})
        assert (await env.engine.client.inspector.saved_views())[0].query == "status=failed"
        bad = ({"name": "", "query": ""}, {"name": "x" * 101, "query": ""}, {"name": "v", "query": "status=lost"})
        for form in bad:
            assert (await http.post(f"{UI}/views", data=form)).status_code == 422
        with pytest.raises(InvalidArgument, match="query must be at most"):
            await env.engine.client.inspector.save_view("long", "q=" + "x" * 3000)
        assert len(await env.engine.client.inspector.saved_views()) == 1
        assert (await http.post(f"{UI}/views/failed%20plain/delete")).status_code == 303
        assert await env.engine.client.inspector.saved_views() == []
        assert (await http.get(f"{UI}/views/failed%20plain")).status_code == 404
        assert await env.engine.client.inspector.delete_view("failed plain") is False


async def test_the_runs_filter_applies_what_the_inspector_does_not(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        client = env.engine.client
        early = await client.start("plain", Job(tenant="acme-early"))
        env.clock.advance("1h")
        late = [await client.start("plain", Job(tenant=f"acme-{n}", n=n)) for n in range(5)]
        await env.settle()
        inspector = client.inspector
        found = await fetch_runs(inspector, RunFilter(q="ACME-3"))
        assert [r.id for r in found.items] == [late[3].run_id]
        by_id = await fetch_runs(inspector, RunFilter(id_prefix=str(late[1].run_id)[:-2]))
        assert late[1].run_id in [r.id for r in by_id.items]
        assert all(r.id.startswith(str(late[1].run_id)[:-2]) for r in by_id.items)
        cut = datetime.fromtimestamp(env.clock.now(), UTC) - timedelta(minutes=30)
        older = await fetch_runs(inspector, RunFilter(until=cut.isoformat()))
        assert [r.id for r in older.items] == [early.run_id]
        newer = await fetch_runs(inspector, RunFilter(since=cut.isoformat(), limit=2))
        assert len(newer.items) == 2 and newer.next_before == newer.items[-1].id
        rest = await fetch_runs(inspector, RunFilter(since=cut.isoformat(), limit=2, before=newer.next_before or ""))
        assert not {r.id for r in rest.items} & {r.id for r in newer.items}
        query = RunFilter.from_query({"workflow": "plain", "dead_letter": "on", "limit": "50"}).query()
        assert query == "workflow=plain&dead_letter=1"


def test_a_sparkline_scales_to_its_peak() -> None:
    line = sparkline([0, 2, 4, 0], width=30, height=12)
    assert line.peak == 4 and line.total == 6
    assert line.points.split()[2] == "20.0,1.0" and line.points.split()[0] == "0.0,11.0"
    assert sparkline([0, 0]).points.endswith(",23.0")


async def test_a_run_timeline_shows_retries_and_waits(env_factory: Callable[..., TestEnv]) -> None:
    app = lg.App()
    calls = {"n": 0}

    def shaky() -> int:
        calls["n"] += 1
        if calls["n"] < 2:
            raise ConnectionError("busy")
        return calls["n"]

    @app.workflow(name="waits")
    async def waits(ctx: lg.Context, p: Job) -> int:
        await ctx.sleep("nap", "10s")
        got = await ctx.step("shaky", shaky, retry=lg.Retry(max_attempts=3, base_delay=1, strategy="fixed"))
        await ctx.wait_for_signal("go", Go)
        return got

    async with env_factory(app) as env, site(env) as http:
        handle = await env.engine.client.start("waits", Job())
        await env.settle()
        await env.advance("10s")
        await env.advance("1s")
        page = (await http.get(f"{UI}/runs/{handle.run_id}")).text
        assert "sleep until" in page and "retry backoff" in page and "waiting for a signal" in page
        assert page.count('class="bar bar-failed"') == 1 and page.count('class="bar bar-completed"') == 1


async def test_admissions_are_counted_per_bucket_by_the_store(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        client = env.engine.client
        start = datetime.fromtimestamp(env.clock.now(), UTC)
        await client.start("plain", Job(n=1))
        await client.start("plain", Job(n=2))
        env.clock.advance("10m")
        await client.start("plain", Job(n=3))
        await env.settle()
        counts = await client.inspector.admissions(
            start - timedelta(seconds=1), buckets=2, until=start + timedelta(minutes=20)
        )
        assert counts == {("plain", ""): [2, 1]}
        assert await client.inspector.admissions(start + timedelta(minutes=5), until=start + timedelta(minutes=9)) == {}
        with pytest.raises(InvalidArgument, match="since must be before until"):
            await client.inspector.admissions(start, until=start)
        with pytest.raises(InvalidArgument, match="buckets from 1"):
            await client.inspector.admissions(start - timedelta(hours=1), buckets=0)


async def test_sealed_values_show_as_encrypted_without_the_key(make_engine: Any, store_url: str) -> None:
    async with make_engine(sealed_app(), encryption_keys=[NEW]) as engine:
        handle = await engine.start("sealed.simple", {"marker": MARK})
        assert await handle.result(timeout=30) == f"{MARK}-out"
        async with site_of(engine.client) as http:  # the engine holds the key: values in clear
            assert MARK in (await http.get(f"{UI}/runs/{handle.run_id}")).text
    async with lg.Client(lg.App(), store_url, encryption_keys=[OLD]) as stranger, site_of(stranger) as http:
        page = (await http.get(f"{UI}/runs/{handle.run_id}")).text
        assert MARK not in page
        assert page.count("&#34;&lt;encrypted&gt;&#34;") >= 3  # payload, output and the step's output


async def test_with_tokens_a_browser_signs_in_with_a_cookie_for_the_dashboard_only(
    env_factory: Callable[..., TestEnv],
) -> None:
    policy = AccessPolicy(token="operate-secret", read_token="read-secret")
    async with env_factory(make_app()) as env:
        held = await env.engine.client.start("plain", Job(hold=True))
        await env.settle()
        transport = httpx.ASGITransport(app=create_app(env.engine.client, policy=policy))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            away = await http.get(f"{UI}/runs?status=running")
            assert away.status_code == 303
            assert away.headers["location"] == f"{UI}/login?next=/ui/runs%3Fstatus%3Drunning"
            login = await http.get(away.headers["location"])
            assert login.status_code == 200 and 'type="password"' in login.text
            wrong = await http.post(f"{UI}/login", data={"token": "guess", "next": "/ui/runs"})
            assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
            offsite = await http.post(
                f"{UI}/login", data={"token": "read-secret", "next": "https://elsewhere.example/"}
            )
            assert offsite.headers["location"] == f"{UI}/runs"  # never sent to another site
            cookie = offsite.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={UI}" in cookie
            assert (await http.get(f"{UI}/runs?status=running")).status_code == 200  # the cookie reads
            assert (await http.get(f"{API}/runs")).status_code == 401  # the API never takes the cookie
            run_page = (await http.get(f"{UI}/runs/{held.run_id}")).text  # its verbs shown disabled, and why
            assert f'href="{UI}/runs/{held.run_id}/do/cancel"' not in run_page
            assert "the read token may look, not act" in run_page
            refused = await http.post(
                f"{UI}/runs/{held.run_id}/do/cancel", data={}, headers={"referer": f"http://testserver{UI}/runs/x"}
            )
            assert refused.status_code == 403  # the read token cannot act: a page that says so, not the API's JSON
            assert refused.headers["content-type"].startswith("text/html")
            assert "Signed in with the read token" in refused.text and 'type="password"' in refused.text
            assert f'value="{UI}/runs/x"' in refused.text  # signing in again returns to that page
            assert (await env.engine.client.inspector.run(held.run_id)).status == "running"  # type: ignore[arg-type]
            await http.post(f"{UI}/login", data={"token": "operate-secret", "next": f"{UI}/runs"})
            done = await http.post(f"{UI}/runs/{held.run_id}/do/cancel", data={"reason": "signed in"})
            assert done.status_code == 303
        assert (await env.engine.client.inspector.run(held.run_id)).status == "cancelled"  # type: ignore[arg-type]


async def test_the_dashboard_works_mounted_inside_another_app(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env:
        web = FastAPI()
        web.mount("/ops", create_app(env.engine.client, policy=AccessPolicy(token="operate-secret")))
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            away = await http.get("/ops/ui/runs")
            assert away.headers["location"] == "/ops/ui/login?next=/ops/ui/runs"
            signed = await http.post("/ops/ui/login", data={"token": "operate-secret", "next": "/ops/ui/runs"})
            assert signed.headers["location"] == "/ops/ui/runs" and "Path=/ops/ui;" in signed.headers["set-cookie"]
            page = await http.get("/ops/ui/runs")
            assert page.status_code == 200 and 'href="/ops/ui/static/dashboard.css"' in page.text
            assert (await http.get("/ops/ui/static/dashboard.js")).status_code == 200


async def test_the_schedules_page_creates_edits_pauses_and_deletes_runtime_schedules(
    env_factory: Callable[..., TestEnv],
) -> None:
    app = make_app()
    app.schedule("nightly", workflow="plain", cron="0 3 * * *", payload={"tenant": "all"})
    async with env_factory(app) as env, site(env) as http:
        form = {"id": "digest:t1", "workflow": "plain", "rule": "cron", "cron": "0 8 * * 1", "timezone": "UTC"}
        made = await http.post(f"{UI}/schedules/create", data={**form, "payload": '{"tenant": "t1"}'})
        assert made.status_code == 303 and made.headers["location"].endswith("/schedules?name=digest%3At1")
        page = (await http.get(f"{UI}/schedules?name=digest:t1")).text
        assert "cron 0 8 * * 1" in page and "/schedules/digest%3At1/edit" in page and "Delete" in page
        bad = await http.post(f"{UI}/schedules/create", data={**form, "id": "x", "timezone": "Mars/Olympus"})
        assert bad.status_code == 422 and "InvalidSchedule" in bad.text and "timezone" in bad.text
        edited = await http.post(f"{UI}/schedules/digest:t1/edit", data={"rule": "every", "cron": "15m"})
        assert edited.status_code == 303
        assert (await env.engine.schedules.get("digest:t1")).every == 900
        assert (await http.post(f"{UI}/schedules/digest:t1/pause", data={})).status_code == 303
        assert (await env.engine.schedules.get("digest:t1")).paused
        assert (await http.post(f"{UI}/schedules/digest:t1/unpause", data={})).status_code == 303
        declared = (await http.get(f"{UI}/schedules?name=nightly")).text
        assert "read-only" in declared and "/schedules/nightly/edit" not in declared
        refused = await http.post(f"{UI}/schedules/nightly/delete", data={})
        assert refused.status_code == 409 and "ScheduleNotOwned" in refused.text
        assert (await http.post(f"{UI}/schedules/digest:t1/delete", data={})).status_code == 303
        assert [s.id for s in (await env.engine.schedules.list()).items] == ["nightly"]
        foreign = await http.post(f"{UI}/schedules/create", data=form, headers={"origin": "http://evil.example"})
        assert foreign.status_code == 403
