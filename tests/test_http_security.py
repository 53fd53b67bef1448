"""The HTTP API's guard: bearer tokens and their scopes, the body limit, and where it may listen."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import lockgate as lg
from lockgate.cli.serve import BindRefused, ServeConfig, build_services, check_http_bind
from lockgate.facades import Client
from lockgate.http import AccessPolicy, bind_refusal, bind_socket, create_app, is_loopback

API = "/api/v1"
OPERATE, READ = "operate-secret", "read-secret"


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The API with both tokens over an empty SQLite store."""
    async with Client(lg.App(), f"sqlite:///{tmp_path}/lockgate.db") as client:
        app = create_app(client, policy=AccessPolicy(token=OPERATE, read_token=READ, max_body=1024))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
            yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(response: httpx.Response, status: int, name: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == f"urn:lockgate:error:{name}"


async def test_every_request_needs_a_known_token(guarded: httpx.AsyncClient) -> None:
    for path in (f"{API}/runs", f"{API}/openapi.json", "/metrics", f"{API}/healthz", "/nowhere"):
        refused(await guarded.get(path), 401, "Unauthorized")
        refused(await guarded.get(path, headers=bearer("wrong")), 401, "Unauthorized")
        refused(await guarded.get(path, headers={"Authorization": OPERATE}), 401, "Unauthorized")
    assert (await guarded.get(f"{API}/runs")).headers["www-authenticate"].startswith("Bearer")
    for token in (READ, OPERATE):
        assert (await guarded.get(f"{API}/runs", headers=bearer(token))).status_code == 200
        assert (await guarded.get("/metrics", headers=bearer(token))).status_code == 200


async def test_the_read_token_cannot_operate(guarded: httpx.AsyncClient) -> None:
    refused(await guarded.post(f"{API}/runs/run_x/cancel", headers=bearer(READ)), 403, "Forbidden")
    refused(await guarded.post(f"{API}/starts", json={"workflow": "w"}, headers=bearer(READ)), 403, "Forbidden")
    # the operate token gets through the guard to the verb itself
    refused(await guarded.post(f"{API}/runs/run_x/cancel", headers=bearer(OPERATE)), 404, "UnknownRun")


async def test_large_bodies_are_refused(guarded: httpx.AsyncClient) -> None:
    big = {"workflow": "w", "payload": "x" * 2000}
    refused(await guarded.post(f"{API}/starts", json=big, headers=bearer(OPERATE)), 413, "BodyTooLarge")

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as it arrives
        yield b'{"workflow": "w", "payload": "'
        for _ in range(4):
            yield b"x" * 500
        yield b'"}'

    headers = {**bearer(OPERATE), "content-type": "application/json"}
    refused(await guarded.post(f"{API}/starts", content=chunks(), headers=headers), 413, "BodyTooLarge")


async def test_no_cors_headers(guarded: httpx.AsyncClient) -> None:
    response = await guarded.get(f"{API}/runs", headers={**bearer(READ), "Origin": "https://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in response.headers)


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com", "192.168.1.2"):
        assert not is_loopback(host), host


def test_non_loopback_binds_need_a_token() -> None:
    open_policy = AccessPolicy()
    assert bind_refusal("127.0.0.1", open_policy) is None
    assert "LOCKGATE_TOKEN" in (bind_refusal("0.0.0.0", open_policy) or "")
    assert bind_refusal("0.0.0.0", AccessPolicy(read_token=READ)) is None
    assert check_http_bind("127.0.0.1:8484", open_policy) == ("127.0.0.1", 8484)
    assert check_http_bind("[::1]:9000", open_policy) == ("::1", 9000)
    assert check_http_bind(None, open_policy) is None
    with pytest.raises(BindRefused) as refusal:
        check_http_bind("0.0.0.0:8484", open_policy)
    assert refusal.value.exit_code == 2
    with pytest.raises(BindRefused):
        check_http_bind("nonsense", open_policy)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_TOKEN_READ")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("command", ["serve lockgate.demo_app:app", "inspect"])
def test_cli_refuses_a_public_bind_without_a_token(command: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "lockgate.cli", *command.split(), "--store", f"sqlite:///{tmp_path}/x.db"]
    done = subprocess.run([*argv, "--http", "0.0.0.0:8484"], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "not a loopback address" in done.stderr and "LOCKGATE_TOKEN" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_serve_answers_healthz_beside_its_workers(tmp_path: Path) -> None:
    port = _free_port()
    argv = [sys.executable, "-m", "lockgate.cli", "serve", "lockgate.demo_app:app"]
    argv += ["--store", f"sqlite:///{tmp_path}/x.db", "--http", f"127.0.0.1:{port}"]
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        process = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        answer = None
        while time.monotonic() < deadline and answer is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}{API}/healthz", timeout=2)
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                time.sleep(0.2)
        assert answer is not None and answer.status_code == 200
        health = answer.json()
        assert health["ok"] is True and health["dialect"] == "sqlite" and health["schema_version"] >= 1
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode == 0, log.read_text()
    assert "HTTP API on http://127.0.0.1" in log.read_text()


async def test_an_unreachable_store_is_a_503(tmp_path: Path) -> None:
    client = Client(lg.App(), f"sqlite:///{tmp_path}/lockgate.db")
    await client.open()
    app = create_app(client, policy=AccessPolicy())
    await client.close()  # the store is gone under the API
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
        for path in (f"{API}/healthz", f"{API}/runs", "/metrics"):
            refused(await http.get(path), 503, "StoreError")
        scraped = await http.get("/metrics")
        assert scraped.status_code == 503


async def test_a_taken_default_port_leaves_the_workers_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = bind_socket("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        engine = lg.Engine(lg.App(), f"sqlite:///{tmp_path}/x.db")
        base = {"app_ref": "x:app", "store": "sqlite://", "max_concurrent_runs": 1, "lease": 1.0, "retention": None}
        optional = ServeConfig(**base, http=("127.0.0.1", port), http_required=False)  # type: ignore[arg-type]
        [service] = build_services(engine, optional)
        task = asyncio.create_task(service.run())
        deadline = asyncio.get_running_loop().time() + 10
        while "HTTP API not served" not in caplog.text and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # until the refusal is logged, with a deadline
        assert not task.done() and "HTTP API not served" in caplog.text
        task.cancel()
        required = ServeConfig(**base, http=("127.0.0.1", port))  # type: ignore[arg-type]
        [service] = build_services(engine, required)
        with pytest.raises(OSError):
            await service.run()
        assert build_services(engine, ServeConfig(**base)) == []  # type: ignore[arg-type]
    finally:
        taken.close()
