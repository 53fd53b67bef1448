"""GET /runs filters and cursors, children and hourly stats over HTTP, on both stores, with refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from lockgate.http import create_app
from lockgate.testing import TestEnv

from .test_listing import make_app, populate

API = "/api/v1"


@asynccontextmanager
async def api(env: TestEnv) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(env.engine.client))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


def problem(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["type"].endswith(name), body
    return body


async def test_runs_filters_cursor_children_and_stats(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        everything = await populate(env)
        failed_or_done = [r.id for r in everything if r.status in ("failed", "succeeded")]
        seen: list[str] = []
        added: list[str] = []
        params: dict[str, Any] = {"status": ["failed", "succeeded"], "limit": 3}
        while True:
            page = (await http.get(f"{API}/runs", params=params)).json()
            seen += [r["id"] for r in page["items"]]
            if page["next_cursor"] is None:
                assert page["next_before"] is None
                break
            assert page["next_before"] == page["items"][-1]["id"]
            handle = await env.engine.start("alpha", {"note": "newcomer", "fail": True})  # above the cursor
            added.append(str(handle.run_id))
            await env.settle()
            params = {**params, "cursor": page["next_cursor"]}
        assert seen == failed_or_done and not set(added) & set(seen)

        apple = (await http.get(f"{API}/runs", params={"q": "APPLE", "workflow": "alpha"})).json()
        assert {r["payload"]["note"] for r in apple["items"]} == {"Apple pie", "elder APPLE"}
        assert apple["searched"] >= 2

        parent = next(r for r in everything if r.payload.get("note") == "parent")
        kids = (await http.get(f"{API}/runs/{parent.id}/children", params={"limit": 1})).json()
        more = (await http.get(f"{API}/runs/{parent.id}/children", params={"cursor": kids["next_cursor"]})).json()
        assert {r["parent_id"] for r in kids["items"] + more["items"]} == {parent.id}
        assert len(kids["items"] + more["items"]) == 2 and more["next_cursor"] is None
        problem(await http.get(f"{API}/runs/run_nope/children"), 404, "UnknownRun")

        stats = (await http.get(f"{API}/stats", params={"hours": 4})).json()
        assert stats["hourly"]["hours"] == 4 and stats["hourly"]["totals"]["total"] >= 1
        assert (await http.get(f"{API}/stats")).json()["hourly"] is None

        for bad in (
            {"status": "lost"},
            {"status": "running", "dead_letter": "true"},
            {"cursor": "%%%"},
            {"since": "2030-01-01T00:00:00Z", "until": "2029-01-01T00:00:00Z"},
            {"since": "2030-01-01T00:00:00"},  # no offset: ambiguous
            {"id_prefix": ""},
        ):
            problem(await http.get(f"{API}/runs", params=bad), 422, "InvalidArgument")
        problem(await http.get(f"{API}/stats", params={"hours": 0}), 422, "InvalidRequest")
        huge = 13763543359556765949624320  # no row id: refused, not a store error
        problem(await http.get(f"{API}/ledger", params={"before": huge}), 422, "InvalidArgument")
        problem(await http.get(f"{API}/pending", params={"after": huge}), 422, "InvalidArgument")
        schema = (await http.get(f"{API}/openapi.json")).json()
        assert "next_cursor" in schema["components"]["schemas"]["RunPage"]["properties"]
        assert "/api/v1/runs/{run_id}/children" in schema["paths"]
