"""Cancelling a start parked at the gate: it (and what folded into it) will not run; the ledger says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lockgate as lg

from .apps.cli_gate import app as gate_app
from .apps.gate import advance, parked
from .apps.gate_probes import ledger_rows
from .test_cli_gate import make_cli


async def test_a_cancelled_debounce_group_never_runs(env_factory: Any) -> None:
    async with env_factory(gate_app) as env:
        engine = env.engine
        handles = [await engine.start("cg.debounced", {"key": "row-1", "n": n}) for n in range(3)]
        assert {h.status for h in handles} == {"queued"}

        assert await engine.cancel_start(handles[2].ticket, "row deleted") == 3  # a folded ticket names its group
        assert await parked(engine, "cg.debounced") == 0
        await advance(env, "2h")
        assert await engine.list_runs(workflow="cg.debounced") == []

        rows = [r for r in await ledger_rows(engine, handles[0].ticket) if r["outcome"] == "cancelled"]
        assert [(r["kind"], r["reason"], r["folded"]) for r in rows] == [("drain", "row deleted", 3)]
        trace = await engine.trace(handles[1].ticket)
        assert (trace.state, trace.run_id) == ("cancelled", None)
        assert (await engine.flow("cg.debounced"))[0].queued == 0


async def test_only_a_parked_start_can_be_cancelled(env_factory: Any) -> None:
    async with env_factory(gate_app) as env:
        engine = env.engine
        admitted = await engine.start("cg.plain", {"key": "k", "n": 1})
        with pytest.raises(lg.LockgateError, match="not parked"):
            await engine.cancel_start(admitted.ticket, "too late")
        with pytest.raises(lg.LockgateError, match="unknown ticket"):
            await engine.cancel_start("tkt_nope", "no such start")
        queued = await engine.start("cg.debounced", {"key": "row-9", "n": 1})
        with pytest.raises(lg.InvalidArgument, match="reason"):
            await engine.cancel_start(queued.ticket, "")
        assert await parked(engine, "cg.debounced") == 1  # a refused cancel changed nothing


@pytest.mark.slow
async def test_cancel_start_from_the_cli(store_url: str, tmp_path: Path, env_factory: Any) -> None:
    async with env_factory(gate_app) as env:
        queued = await env.engine.start("cg.debounced", {"key": "row-1", "n": 1})
    cli = make_cli(store_url, tmp_path)
    document = cli.json("workflows", "cancel-start", queued.ticket, "--reason", "row deleted")
    assert (document["ticket"], document["arrivals"]) == (queued.ticket, 1)
    again = cli("workflows", "cancel-start", queued.ticket, "--reason", "twice", code=1)
    assert "not parked" in again.err
    assert "--reason" in cli("workflows", "cancel-start", queued.ticket, code=2).err
