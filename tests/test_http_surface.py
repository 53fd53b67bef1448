"""The small courtesies of HTTP: ``HEAD`` as a read, ``Allow`` on a 405, a malformed body named as
such, ``/ui`` leading to the dashboard, the why page before a ticket, and tokens of whitespace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.facades import Client
from lockgate.http import AccessPolicy, create_app

API = "/api/v1"
OPERATE, READ = "operate-secret", "read-secret"

app = lg.App()


class Echo(BaseModel):
    n: int


@app.workflow(name="surface.echo")
async def echo(ctx: lg.Context, p: Echo) -> int:
    return p.n


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with Client(app, f"sqlite:///{tmp_path}/lockgate.db") as client:
        api = create_app(client, policy=AccessPolicy(token=OPERATE, read_token=READ))
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_head_is_a_read_with_the_headers_of_get(http: httpx.AsyncClient) -> None:
    for path in (f"{API}/runs", f"{API}/healthz", "/metrics", "/ui/runs"):
        got = await http.get(path, headers=bearer(READ))
        head = await http.head(path, headers=bearer(READ))
        assert head.status_code == got.status_code == 200, (path, head.status_code)
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
    assert (await http.head(f"{API}/runs")).status_code == 401  # still guarded


async def test_a_405_says_which_methods_are_allowed(http: httpx.AsyncClient) -> None:
    answer = await http.delete(f"{API}/runs", headers=bearer(OPERATE))
    assert answer.status_code == 405
    assert answer.headers["content-type"] == "application/problem+json"
    assert "GET" in answer.headers["allow"]


async def test_a_malformed_json_body_is_named_as_the_body(http: httpx.AsyncClient) -> None:
    answer = await http.post(
        f"{API}/starts",
        content=b'{"workflow": "surface.echo", "payload": {"n": 1,,}}',
        headers={**bearer(OPERATE), "content-type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    errors = answer.json()["errors"]
    assert [e["field"] for e in errors] == ["body"]
    assert errors[0]["message"].startswith("malformed JSON at character ")


async def test_ui_leads_to_the_runs_page(http: httpx.AsyncClient) -> None:
    for path in ("/ui", "/ui/", "/"):
        answer = await http.get(path, headers=bearer(READ))
        assert answer.status_code == 307 and answer.headers["location"].endswith("/ui/runs"), path


async def test_the_why_page_without_a_ticket_lists_the_latest_decisions(tmp_path: Path) -> None:
    async with lg.Engine(app, store=f"sqlite:///{tmp_path}/lockgate.db") as engine:
        handle = await engine.start("surface.echo", {"n": 1})
        api = create_app(engine.client)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as http:
            page = await http.get("/ui/why")
    assert page.status_code == 200
    assert "Latest decisions" in page.text and handle.ticket in page.text


@pytest.mark.parametrize("value", [" ", "\t", "two words"])
def test_a_token_of_whitespace_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LOCKGATE_TOKEN", value)
    with pytest.raises(ValueError, match="LOCKGATE_TOKEN must hold one token"):
        AccessPolicy.from_env()
    monkeypatch.setenv("LOCKGATE_TOKEN", " padded ")
    assert AccessPolicy.from_env().token == "padded"
