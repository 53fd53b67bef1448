"""A start no control holds, on PostgreSQL: its run, run-started event and ledger row in one statement,
committed alone in autocommit (one round trip), and written once whatever becomes of its answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.gate_probes import ledger_rows, sql
from .pg import PgProxy

app = lg.App()


class Job(BaseModel):
    n: int


@app.workflow(name="bare")
async def bare(ctx: lg.Context, p: Job) -> int:
    return p.n


@pytest.fixture
async def client_via(proxy: PgProxy, pg_url: str) -> AsyncIterator[lg.Client]:
    async with lg.Client(app, proxy.url(pg_url)) as client:
        yield client


async def written(url: str, run_id: str) -> tuple[int, int, list[Any]]:
    """How many rows the run has, how many run-started events, and its ledger outcomes."""
    runs = await sql(url, "SELECT id FROM lockgate_runs WHERE id = %s", run_id)
    events = await sql(
        url, "SELECT id FROM lockgate_run_events WHERE run_id = %s AND type = 'run-started'", run_id
    )
    ledger = await sql(url, "SELECT outcome FROM lockgate_ledger WHERE run_id = %s ORDER BY id", run_id)
    return len(runs), len(events), [row["outcome"] for row in ledger]


async def test_a_bare_start_commits_without_a_transaction_around_it(
    pg_url: str, proxy: PgProxy, client_via: lg.Client
) -> None:
    proxy.cut_when(b"BEGIN")  # any transaction the writer opens from here is cut
    handle = await client_via.start(bare, Job(n=1))
    assert proxy.cuts == 0
    assert handle.status == "started" and handle.run_id is not None
    assert await written(pg_url, handle.run_id) == (1, 1, ["admitted"])
    assert [r["outcome"] for r in await ledger_rows(client_via, handle.ticket)] == ["admitted"]


@pytest.mark.parametrize("deliver", [False, True], ids=["never-reached", "answer-lost"])
async def test_a_bare_start_whose_connection_drops_is_written_once(
    pg_url: str, proxy: PgProxy, client_via: lg.Client, deliver: bool
) -> None:
    """With ``deliver`` it committed and its answer was lost: run again, it finds its own run and says so."""
    proxy.cut_when(b"lockgate_run_events", deliver=deliver)
    handle = await client_via.start(bare, Job(n=2))
    assert proxy.cuts == 1
    assert handle.status == "started" and handle.run_id is not None
    assert await written(pg_url, handle.run_id) == (1, 1, ["admitted"])


async def test_a_spent_identity_is_recorded_and_nothing_more(pg_url: str, client_via: lg.Client) -> None:
    first = await client_via.start(bare, Job(n=3), idempotency_key="k")
    again = await client_via.start(bare, Job(n=4), idempotency_key="k")
    assert (first.status, again.status) == ("started", "existing")
    assert again.run_id == first.run_id and first.run_id is not None
    assert await written(pg_url, first.run_id) == (1, 1, ["admitted", "existing"])
    assert [r["outcome"] for r in await ledger_rows(client_via, again.ticket)] == ["existing"]
