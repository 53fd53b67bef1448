"""Three ``lockgate serve`` processes on one PostgreSQL database: every delivery once, every cancel once."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import lockgate as lg

from .apps.events import app, order_paid, row_deleted
from .cluster.harness import Cluster, until
from .conftest import LONG

pytestmark = pytest.mark.slow

APP = "tests.apps.events:app"
# Events published at once to three workers (200 under LOCKGATE_TORTURE=long): each fans out to four triggers.
EVENTS = 200 if LONG else 60


async def test_events_fan_out_once_and_cancel_once_across_three_workers(cluster: Cluster, pg_url: str) -> None:
    async with lg.Client(app, pg_url) as client:
        sleepers = [await client.start("ev.narrate", {"row_id": f"r{n}"}) for n in range(20)]
        cluster.spawn(3, app=APP)
        await cluster.ready()
        ids = await asyncio.gather(
            *(
                client.publish(order_paid, {"order_id": f"o{n}"}, {"total": n + 1, "tenant_id": "t"})
                for n in range(EVENTS)
            )
        )
        for n in range(20):
            await client.publish(row_deleted, {"row_id": f"r{n}"}, {"row_id": f"r{n}"})

        async def settled() -> bool:
            rows = await cluster.fetch("SELECT COUNT(*) FROM lockgate_deliveries WHERE status = 'pending'")
            return rows[0][0] == 0

        await cluster.guard(until(settled, timeout=120, what="every delivery settled"))
        rows = await cluster.fetch(
            "SELECT trigger_name, status, COUNT(*) FROM lockgate_deliveries WHERE event_id = ANY(%s) "
            "GROUP BY trigger_name, status",
            list(ids),
        )
        assert {(t, s): n for t, s, n in rows} == {
            ("order.paid->ev.fulfil", "started"): EVENTS,
            ("order.paid->ev.receipt", "started"): EVENTS,
            ("*->ev.audit", "started"): EVENTS,
            ("order.paid->broken", "failed"): EVENTS,
        }
        runs = await cluster.fetch("SELECT workflow, COUNT(*) FROM lockgate_runs GROUP BY workflow")
        counts = dict(runs)
        assert (counts["ev.fulfil"], counts["ev.receipt"]) == (EVENTS, EVENTS)
        assert counts["ev.audit"] == EVENTS + 20  # the wildcard also saw the 20 row.deleted events

        async def cancelled() -> bool:
            statuses = [(await client.get_run(h.run_id or "")).status for h in sleepers]
            return statuses == ["cancelled"] * 20

        await cluster.guard(until(cancelled, timeout=60, what="every sleeper cancelled"))
        events = await cluster.fetch("SELECT run_id FROM lockgate_run_events WHERE type = 'run-cancelled'")
        ledger = await cluster.fetch("SELECT run_id FROM lockgate_ledger WHERE kind = 'run' AND outcome = 'cancelled'")
        expected = Counter(h.run_id for h in sleepers)
        assert Counter(r[0] for r in events) == expected
        assert Counter(r[0] for r in ledger) == expected
