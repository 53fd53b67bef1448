"""Reads off a standby: ``--read-store`` / ``create_app(client, reads=...)`` over a real streaming standby.

A private primary and its standby (``tests/pgserver.py``, the session's pair). The API's read
routes, the dashboard and ``/metrics`` read the standby, verbs the primary: with the standby's
replay paused, a run started and cancelled through the API is missing from the reads, while the
page the cancel leads to shows it; ``/healthz``, every page and ``/metrics`` show the lag, which
falls to zero once replay resumes. A read store that is the primary, unreachable, another
database or on SQLite is refused at start, naming the option.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import AccessPolicy, create_app
from lockgate.inspect import open_read_store

from .cluster.harness import until
from .pgserver import Replicas, free_port

pytestmark = pytest.mark.slow

API = "/api/v1"
app = lg.App()


class Job(BaseModel):
    n: int = 0


@app.workflow(name="reads.job")
async def job(ctx: lg.Context, payload: Job) -> int:
    return payload.n


@dataclass(frozen=True)
class Stores:
    pair: Replicas
    primary: str  # the write store: a database on the primary
    standby: str  # the same database on the standby


def _sql(url: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(statement.encode()).fetchall()


async def _caught_up(stores: Stores) -> None:
    """Wait until the standby has replayed everything the primary holds now."""
    target = _sql(stores.primary, "SELECT pg_current_wal_lsn()::text")[0][0]

    async def replayed() -> bool:
        rows = _sql(stores.standby, f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
        return bool(rows[0][0])

    await until(replayed, timeout=20, what="the standby replayed the primary's WAL")


@pytest.fixture
async def stores(replica_pair: Replicas) -> AsyncIterator[Stores]:
    replica_pair.ensure_standby()
    replica_pair.replicate(synchronous=False)
    primary = replica_pair.primary.create_database("reads")
    name = primary.rsplit("/", 1)[1]
    found = Stores(replica_pair, primary, replica_pair.standby.url(name))
    async with lg.Client(app, primary):  # migrates the new database
        pass
    await _caught_up(found)
    yield found
    _sql(found.standby, "SELECT pg_wal_replay_resume()")


async def test_reads_come_from_the_standby_verbs_from_the_primary_and_the_lag_shows(stores: Stores) -> None:
    async with (
        lg.Client(app, stores.primary) as client,
        open_read_store(client.inspector, stores.standby) as reads,
    ):
        api = create_app(client, policy=AccessPolicy(), reads=reads)
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            first = (await http.post(f"{API}/starts", json={"workflow": "reads.job", "payload": {"n": 1}})).json()
            await _caught_up(stores)
            assert (await http.get(f"{API}/runs/{first['run_id']}")).status_code == 200
            health = (await http.get(f"{API}/healthz")).json()
            assert health["read_store"]["bytes_behind"] == 0 and health["read_store"]["seconds"] == 0, health
            assert "Read from a standby: caught up" in (await http.get("/ui/runs")).text

            _sql(stores.standby, "SELECT pg_wal_replay_pause()")
            started = await http.post(f"{API}/starts", json={"workflow": "reads.job", "payload": {"n": 2}})
            assert started.status_code == 200 and started.json()["run_id"], started.text  # a verb's answer: primary
            run_id = started.json()["run_id"]
            assert (await http.post(f"{API}/runs/{run_id}/cancel", json={"reason": "test"})).status_code == 204
            # The reads come from the standby, which has not replayed the start: the run is not there yet.
            missing = await http.get(f"{API}/runs/{run_id}")
            assert missing.status_code == 404, missing.text
            listed = (await http.get(f"{API}/runs")).json()["items"]
            assert [r["id"] for r in listed] == [first["run_id"]]
            assert (await http.get(f"/ui/runs/{run_id}")).status_code == 404
            # The page a verb leads to shows what it did: it reads the primary.
            after = await http.get(f"/ui/runs/{run_id}?done=cancel")
            assert after.status_code == 200 and "cancelled" in after.text
            # Saved views are their readers' own writes: kept on the primary, found at once.
            saved = await http.post(
                "/ui/views", data={"name": "mine", "query": "status=cancelled"}, follow_redirects=False
            )
            assert saved.status_code == 303, saved.text
            assert (await http.get(saved.headers["location"], follow_redirects=False)).status_code == 303

            health = (await http.get(f"{API}/healthz")).json()
            lag = health["read_store"]
            assert lag["bytes_behind"] > 0 and lag["seconds"] is not None and lag["seconds"] >= 0, health
            assert lag["replay_lsn"] != lag["primary_lsn"]
            for page in ("/ui/runs", "/ui/flow", "/ui/cluster", f"/ui/runs/{first['run_id']}"):
                text = (await http.get(page)).text
                assert "Read from a standby:" in text and "bytes of WAL" in text, page
            metrics = (await http.get("/metrics")).text
            behind = next(line for line in metrics.splitlines() if line.startswith("lockgate_read_store_lag_bytes"))
            assert float(behind.split()[-1]) > 0, behind

            _sql(stores.standby, "SELECT pg_wal_replay_resume()")

            async def replayed() -> bool:
                found = (await http.get(f"{API}/runs/{run_id}")).json()
                return bool(found.get("run", {}).get("status") == "cancelled")

            await until(replayed, timeout=20, what="the standby shows the cancelled run")
            await _caught_up(stores)
            lag = (await http.get(f"{API}/healthz")).json()["read_store"]
            assert lag["bytes_behind"] == 0 and lag["seconds"] == 0, lag


async def test_a_read_store_that_is_not_a_standby_of_the_write_store_is_refused(stores: Stores, tmp_path: Path) -> None:
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=2"
    refusals = {
        stores.primary: "the write store's primary itself",
        unreachable: "cannot be read",
        stores.pair.standby.url("postgres"): "cannot be read",  # no lockgate schema in that database
        f"sqlite:///{tmp_path / 'reads.db'}": "not a sqlite database",
    }
    async with lg.Client(app, stores.primary) as client:
        for url, said in refusals.items():
            with pytest.raises(lg.ReadStoreRefused) as refused:
                async with open_read_store(client.inspector, url):
                    pass
            assert refused.value.field == "read_store" and said in str(refused.value), (url, refused.value)
    async with lg.Client(app, f"sqlite:///{tmp_path / 'lite.db'}") as lite:
        with pytest.raises(lg.ReadStoreRefused, match="read_store: a sqlite store has no read store"):
            async with open_read_store(lite.inspector, stores.standby):
                pass


def test_the_cli_refuses_a_read_store_that_is_the_primary_or_unreachable(stores: Stores) -> None:
    """``lockgate inspect`` and ``lockgate serve`` stop at start with one line naming ``--read-store``."""
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=2"
    http = ["--http", f"127.0.0.1:{free_port()}"]
    commands = [
        ["inspect", "--store", stores.primary, "--read-store", stores.primary, *http],
        ["serve", "tests.cluster.app:app", "--store", stores.primary, "--read-store", unreachable, *http],
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        for command in commands
    ]
    (code, said), (code2, said2) = [(proc.wait(timeout=60), proc.communicate()[0]) for proc in procs]
    assert code == 2 and "Traceback" not in said, said
    assert "Invalid value for '--read-store'" in said and "primary itself" in said, said
    assert code2 == 2 and "Traceback" not in said2, said2
    assert "Invalid value for '--read-store'" in said2 and "cannot be read" in said2, said2
