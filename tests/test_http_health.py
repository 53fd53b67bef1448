"""``/healthz`` checks the store's migrations; the tokens may come from files; ``serve`` answers it in a subprocess."""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import click
import httpx
import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.cli.serve import access_policy
from lockgate.http import AccessPolicy, create_app

API = "/api/v1"


@asynccontextmanager
async def health_api(store_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with lg.Client(lg.App(), store_url) as client:
        transport = httpx.ASGITransport(app=create_app(client, policy=AccessPolicy()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            yield http


def _sql(store_url: str, statement: str) -> None:
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as raw:
            raw.execute(statement)
    else:
        with psycopg.connect(store_url, autocommit=True) as raw:
            raw.execute(statement.encode())


async def test_healthz_needs_this_codes_migrations(store_url: str) -> None:
    async with health_api(store_url) as http:
        healthy = await http.get(f"{API}/healthz")
        assert healthy.status_code == 200
        version = healthy.json()["schema_version"]
        assert version >= 1 and healthy.json()["ok"] is True

        _sql(store_url, "INSERT INTO lockgate_migrations (version, name, applied_at) VALUES (9999, 'newer', 0)")
        ahead = await http.get(f"{API}/healthz")
        assert ahead.status_code == 503 and ahead.headers["content-type"] == "application/problem+json"
        assert ahead.json()["type"] == "urn:lockgate:error:MigrationsNotCurrent"
        assert "[9999]" in ahead.json()["detail"]

        _sql(store_url, "DELETE FROM lockgate_migrations WHERE version = 9999")
        _sql(store_url, f"DELETE FROM lockgate_migrations WHERE version = {version}")
        behind = await http.get(f"{API}/healthz")
        assert behind.status_code == 503 and f"missing [{version}]" in behind.json()["detail"]
        assert (await http.get(f"{API}/runs")).status_code == 200  # only the health check says so


def test_tokens_come_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_TOKEN", "from-env")
    monkeypatch.setenv("LOCKGATE_TOKEN_READ", "read-from-env")
    operate = tmp_path / "operate"
    operate.write_text("  s3cret-operate\n")
    read = tmp_path / "read"
    read.write_text("s3cret-read")
    assert AccessPolicy.load(str(operate)) == AccessPolicy("s3cret-operate", "read-from-env")
    assert AccessPolicy.load(None, str(read)) == AccessPolicy("from-env", "s3cret-read")
    assert AccessPolicy.load() == AccessPolicy.from_env()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    two = tmp_path / "two"
    two.write_text("a b")
    for bad in (empty, two, tmp_path / "missing"):
        with pytest.raises(ValueError, match=str(bad)):
            AccessPolicy.load(str(bad))
    with pytest.raises(click.BadParameter) as refused:
        access_policy(None, str(empty))
    assert refused.value.param_hint == "'--read-token-file'"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_TOKEN_READ")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_an_unreadable_token_file_refuses_to_start(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "lockgate.cli", "inspect", "--store", f"sqlite:///{tmp_path}/x.db"]
    argv += ["--http", "0.0.0.0:8484", "--token-file", str(tmp_path / "nowhere")]
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--token-file" in done.stderr and "nowhere" in done.stderr


@pytest.mark.slow
def test_serve_with_a_token_file_answers_healthz(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("file-token\n")
    port = _free_port()
    argv = [sys.executable, "-m", "lockgate.cli", "serve", "lockgate.demo_app:app", "--store"]
    argv += [f"sqlite:///{tmp_path}/x.db", "--http", f"127.0.0.1:{port}", "--token-file", str(token)]
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        process = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        answer = None
        while time.monotonic() < deadline and answer is None:
            try:
                answer = httpx.get(f"{base}{API}/healthz", timeout=2)
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                time.sleep(0.2)
        assert answer is not None and answer.status_code == 401
        bearer = {"Authorization": "Bearer file-token"}
        healthy = httpx.get(f"{base}{API}/healthz", headers=bearer, timeout=5)
        assert healthy.status_code == 200 and healthy.json()["ok"] is True
        scraped = httpx.get(f"{base}/metrics", headers=bearer, timeout=5)
        assert "lockgate_cluster_reporter 1.0" in scraped.text  # SQLite: the one replica reports the store
        assert "lockgate_commit_batch_size_count" in scraped.text  # and its own metrics
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode == 0, log.read_text()


class Job(BaseModel):
    n: int


def _one_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="anew.job")
    async def job(ctx: lg.Context, p: Job) -> int:
        return p.n

    return app


def test_inspect_follows_a_database_file_made_anew(tmp_path: Path) -> None:
    """A demo run again deletes its file and makes a new one: ``inspect`` must show the new runs."""
    db = tmp_path / "x.db"

    async def start(n: int) -> str:
        async with lg.Client(_one_app(), f"sqlite:///{db}") as client:
            handle = await client.start("anew.job", {"n": n})
            assert handle.run_id is not None
            return handle.run_id

    first = asyncio.run(start(1))
    port = _free_port()
    argv = [sys.executable, "-m", "lockgate.cli", "inspect", "--store", f"sqlite:///{db}"]
    argv += ["--http", f"127.0.0.1:{port}"]
    log = tmp_path / "inspect.log"
    with log.open("w") as err:
        process = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}{API}/runs"

    def listed() -> set[str] | None:
        try:
            return {r["id"] for r in httpx.get(base, timeout=2).json()["items"]}
        except httpx.TransportError:
            assert process.poll() is None, log.read_text()
            return None

    def until(wanted: set[str]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and listed() != wanted:
            time.sleep(0.2)
        assert listed() == wanted, log.read_text()

    try:
        until({first})
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"x.db{suffix}").unlink(missing_ok=True)
        second = asyncio.run(start(2))
        until({second})
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "was replaced" in log.read_text()
