"""``GET /api/v1/runs/{id}/stream``: Server-Sent Events, ``Last-Event-ID`` resume, stream tokens and CORS."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import AccessPolicy, create_app
from lockgate.testing import TestEnv

API = "/api/v1"
OPERATE = "operate-token"
ORIGIN = "http://app.example"


class Job(BaseModel):
    n: int = 3


def make_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="answer")
    async def answer(ctx: lg.Context, p: Job) -> dict[str, int]:
        async def tokens() -> int:
            for i in range(p.n):
                await ctx.stream(f"tok{i} ")
            return p.n

        return {"tokens": await ctx.step("tokens", tokens)}

    return app


@asynccontextmanager
async def api(env: TestEnv, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(env.engine.client, policy=AccessPolicy(token=OPERATE), stream_origins=[ORIGIN])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers) as http:
        yield http


def events(text: str) -> list[tuple[str | None, str, Any]]:
    """The (id, event, data) of each event of an event-stream body."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            fields[name] = value.strip()
        if "event" in fields:
            out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    return out


async def test_an_ended_run_streams_its_chunks_then_its_outcome_and_resumes_by_last_event_id(
    env_factory: Callable[..., TestEnv],
) -> None:
    async with env_factory(make_app()) as env, api(env, Authorization=f"Bearer {OPERATE}") as http:
        handle = await env.engine.start("answer", {"n": 4})
        assert await handle.result(timeout=10) == {"tokens": 4}
        response = await http.get(f"{API}/runs/{handle.run_id}/stream")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        got = events(response.text)
        assert [(i, e) for i, e, _ in got] == [
            ("1", "chunk"),
            ("2", "chunk"),
            ("3", "chunk"),
            ("4", "chunk"),
            (None, "end"),
        ]
        assert "".join(d["data"] for _, e, d in got if e == "chunk") == "tok0 tok1 tok2 tok3 "
        assert got[-1][2] == {
            "run_id": handle.run_id,
            "status": "succeeded",
            "result": {"tokens": 4},
            "error_tag": None,
            "error": None,
        }
        resumed = await http.get(f"{API}/runs/{handle.run_id}/stream", headers={"Last-Event-ID": "2"})
        assert [i for i, _, _ in events(resumed.text)] == ["3", "4", None]
        assert [i for i, _, _ in events((await http.get(f"{API}/runs/{handle.run_id}/stream?after=3")).text)] == [
            "4",
            None,
        ]
        bad = await http.get(f"{API}/runs/{handle.run_id}/stream", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 422
        assert (await http.get(f"{API}/runs/{handle.run_id}/stream?topic=a%20b")).status_code == 422
        assert (await http.get(f"{API}/runs/run_nope/stream")).status_code == 404


async def test_a_stream_token_reads_its_run_only_until_it_expires(env_factory: Callable[..., TestEnv]) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        one = await env.engine.start("answer", {"n": 2})
        other = await env.engine.start("answer", {"n": 2})
        assert await one.result(timeout=10) and await other.result(timeout=10)
        token = await env.engine.stream_token(one.run_id, ttl="15m", topics=["default"])
        assert (await http.get(f"{API}/runs/{one.run_id}/stream")).status_code == 401  # no token at all
        ok = await http.get(f"{API}/runs/{one.run_id}/stream?token={token}")
        assert ok.status_code == 200 and len(events(ok.text)) == 3
        bearer = await http.get(f"{API}/runs/{one.run_id}/stream", headers={"Authorization": f"Bearer {token}"})
        assert bearer.status_code == 200
        refused = await http.get(f"{API}/runs/{other.run_id}/stream?token={token}")
        assert refused.status_code == 403 and refused.json()["type"] == "urn:lockgate:error:StreamTokenRefused"
        assert (await http.get(f"{API}/runs/{one.run_id}/stream?topic=logs&token={token}")).status_code == 403
        # the token opens nothing but the stream endpoint
        assert (await http.get(f"{API}/runs/{one.run_id}?token={token}")).status_code == 401
        assert (await http.get(f"{API}/runs", headers={"Authorization": f"Bearer {token}"})).status_code == 401
        await env.advance("16m")
        expired = await http.get(f"{API}/runs/{one.run_id}/stream?token={token}")
        assert expired.status_code == 401 and "expired" in expired.json()["detail"]


async def test_cors_is_sent_for_listed_origins_on_the_stream_endpoint_alone(
    env_factory: Callable[..., TestEnv],
) -> None:
    async with env_factory(make_app()) as env, api(env) as http:
        handle = await env.engine.start("answer", {"n": 1})
        await handle.result(timeout=10)
        token = await env.engine.stream_token(handle.run_id)
        url = f"{API}/runs/{handle.run_id}/stream"
        allowed = await http.get(f"{url}?token={token}", headers={"Origin": ORIGIN})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN
        preflight = await http.options(
            url,
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization",
            },
        )
        assert preflight.status_code == 204 and "authorization" in preflight.headers["access-control-allow-headers"]
        stranger = await http.get(f"{url}?token={token}", headers={"Origin": "http://evil.example"})
        assert stranger.status_code == 403 and "access-control-allow-origin" not in stranger.headers
        assert stranger.json()["type"] == "urn:lockgate:error:CorsRefused"
        other = await http.get(f"{API}/runs", headers={"Origin": ORIGIN, "Authorization": f"Bearer {OPERATE}"})
        assert "access-control-allow-origin" not in other.headers  # the rest of the API sends no CORS
