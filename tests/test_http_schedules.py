"""``/api/v1/schedules`` on both stores: runtime schedules created, read, changed, paused and deleted
over HTTP, their refusals as problems, and the operate token required for writes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import AccessPolicy, create_app
from lockgate.testing import TestEnv

API = "/api/v1"
T0 = datetime(2026, 3, 26, 12, 0, tzinfo=UTC).timestamp()


class Digest(BaseModel):
    tenant: str


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="digest")
    async def digest(ctx: lg.Context, p: Digest) -> str:
        return p.tenant

    app.schedule("nightly", workflow="digest", cron="0 3 * * *", payload={"tenant": "all"})
    return app


@asynccontextmanager
async def api(env: TestEnv, policy: AccessPolicy | None = None) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(env.engine.client, policy=policy or AccessPolicy()))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


def problem(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:lockgate:error:{name}", body
    return body


async def test_runtime_schedules_over_http(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(), start=T0) as env, api(env) as http:
        body = {
            "id": "digest:tenant-4711",
            "workflow": "digest",
            "cron": "0 8 * * 1",
            "timezone": "Europe/Berlin",
            "payload": {"tenant": "4711"},
        }
        made = await http.post(f"{API}/schedules", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["origin"] == "runtime" and made.json()["next_at"] == "2026-03-30T06:00:00Z"
        problem(await http.post(f"{API}/schedules", json=body), 409, "ScheduleExists")
        assert (await http.post(f"{API}/schedules", json={**body, "if_exists": "skip"})).status_code == 201
        got = await http.get(f"{API}/schedules/digest:tenant-4711")
        assert got.status_code == 200 and got.json()["payload"] == {"tenant": "4711"}
        changed = await http.patch(f"{API}/schedules/digest:tenant-4711", json={"cron": "0 9 * * 1"})
        assert changed.status_code == 200 and changed.json()["cron"] == "0 9 * * 1" and changed.json()["revision"] == 2
        assert (await http.post(f"{API}/schedules/digest:tenant-4711/pause", json={"reason": "r"})).status_code == 204
        assert (await http.get(f"{API}/schedules/digest:tenant-4711")).json()["paused"] is True
        assert (await http.post(f"{API}/schedules/digest:tenant-4711/unpause")).status_code == 204
        for i in range(3):
            extra = {**body, "id": f"digest:{i}", "payload": {"tenant": str(i)}}
            assert (await http.post(f"{API}/schedules", json=extra)).status_code == 201
        first = await http.get(f"{API}/schedules", params={"prefix": "digest:", "limit": 2})
        assert [s["id"] for s in first.json()] == ["digest:0", "digest:1"]
        rest = await http.get(
            f"{API}/schedules", params={"prefix": "digest:", "cursor": first.headers["x-next-cursor"]}
        )
        assert [s["id"] for s in rest.json()] == ["digest:2", "digest:tenant-4711"]
        assert "x-next-cursor" not in rest.headers
        assert (await http.delete(f"{API}/schedules/digest:tenant-4711")).status_code == 204
        problem(await http.get(f"{API}/schedules/digest:tenant-4711"), 404, "UnknownSchedule")
        problem(await http.delete(f"{API}/schedules/digest:tenant-4711"), 404, "UnknownSchedule")


async def test_refusals_are_problems_and_write_nothing(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app(), start=T0) as env, api(env) as http:
        base = {"id": "t", "workflow": "digest", "every": "1h", "payload": {"tenant": "t"}}
        bad = problem(
            await http.post(f"{API}/schedules", json={**base, "timezone": "Mars/Olympus"}), 422, "InvalidSchedule"
        )
        assert "timezone" in bad["detail"]
        problem(await http.post(f"{API}/schedules", json={**base, "payload": {"tenant": 1}}), 422, "InvalidSchedule")
        problem(await http.post(f"{API}/schedules", json={**base, "colour": "red"}), 422, "InvalidRequest")
        problem(await http.post(f"{API}/schedules", json={**base, "workflow": "nope"}), 422, "InvalidSchedule")
        problem(await http.patch(f"{API}/schedules/nightly", json={"cron": "0 4 * * *"}), 409, "ScheduleNotOwned")
        problem(await http.delete(f"{API}/schedules/nightly"), 409, "ScheduleNotOwned")
        problem(await http.patch(f"{API}/schedules/missing", json={"every": "2h"}), 404, "UnknownSchedule")
        assert [s["id"] for s in (await http.get(f"{API}/schedules")).json()] == ["nightly"]
        nightly = (await http.get(f"{API}/schedules/nightly")).json()
        assert nightly["origin"] == "declared" and nightly["cron"] == "0 3 * * *"


async def test_writes_need_the_operate_token(env_factory: Callable[..., TestEnv]) -> None:
    policy = AccessPolicy(token="op-token", read_token="read-token")
    async with env_factory(make_app(), start=T0) as env, api(env, policy) as http:
        read = {"Authorization": "Bearer read-token"}
        body = {"id": "t", "workflow": "digest", "every": "1h", "payload": {"tenant": "t"}}
        problem(await http.post(f"{API}/schedules", json=body, headers=read), 403, "Forbidden")
        made = await http.post(f"{API}/schedules", json=body, headers={"Authorization": "Bearer op-token"})
        assert made.status_code == 201
        problem(await http.delete(f"{API}/schedules/t", headers=read), 403, "Forbidden")
        assert (await http.get(f"{API}/schedules/t", headers=read)).status_code == 200
        schema = (await http.get(f"{API}/openapi.json", headers=read)).json()
        assert {"get", "patch", "delete"} <= set(schema["paths"][f"{API}/schedules/{{schedule_id}}"])
        assert {"get", "post"} <= set(schema["paths"][f"{API}/schedules"])
