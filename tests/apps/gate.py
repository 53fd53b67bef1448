"""Helpers for tests of the admission gate: drive the drainer under a fake clock, read the ledger."""

from __future__ import annotations

from typing import Any

from lockgate import Client, FlowRow, RunInfo
from lockgate.durations import Duration
from lockgate.store.base import Row
from lockgate.testing import TestEnv

from .gate_probes import ledger_rows
from .waits import eventually


async def advance(env: TestEnv, duration: Duration = 0) -> None:
    """Move the fake clock, run one drainer pass at the new instant, and let what it admitted settle."""
    await env.advance(duration)


async def arrival(client: Client, ticket: str) -> Row:
    """The one arrival row of ``ticket``."""
    rows = [r for r in await ledger_rows(client, ticket) if r["kind"] == "arrival"]
    assert len(rows) == 1, rows
    return rows[0]


async def runs(client: Client, workflow: str) -> list[RunInfo]:
    """Every run of ``workflow``, oldest first."""
    return list(reversed(await client.list_runs(workflow=workflow, limit=1000)))


async def wait_runs(
    client: Client, workflow: str, count: int = 1, *, status: str | None = "succeeded", timeout: float = 15.0
) -> list[RunInfo]:
    """Wait until ``workflow`` has exactly ``count`` runs in ``status`` (``None``: any); those runs, oldest first."""

    async def probe() -> list[RunInfo]:
        found = [r for r in await runs(client, workflow) if status is None or r.status == status]
        return found if len(found) == count else []

    found: list[RunInfo] = await eventually(
        probe, timeout=timeout, what=f"{count} {status or 'any'} run(s) of {workflow!r}"
    )
    return found


async def flow_of(client: Client, workflow: str, key: str = "") -> FlowRow:
    """The ``flow()`` row of one workflow and key (all zeros when there is none)."""
    rows = [r for r in await client.flow(workflow) if r.key == key]
    return rows[0] if rows else FlowRow(workflow=workflow, key=key)


async def parked(client: Client, workflow: str) -> int:
    """How many starts of ``workflow`` are parked at the gate."""
    return sum(r.queued for r in await client.flow(workflow))


def payloads(found: list[RunInfo]) -> list[Any]:
    return [r.payload for r in found]
