"""``lockgate events ...`` and ``workflows list --source`` (one test runs them as real processes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .apps.events import app
from .test_cli import Lockgate, migrated
from .test_events import settled

pytestmark = pytest.mark.slow

APP = "tests.apps.events:app"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli(store_url: str, tmp_path: Path) -> Lockgate:
    runner = Lockgate(migrated(store_url), tmp_path, app=APP)
    runner.env["PYTHONPATH"] = os.pathsep.join((str(ROOT), runner.env["PYTHONPATH"]))
    return runner


async def test_publish_list_show_and_deliveries(cli: Lockgate, env_factory: Any) -> None:
    key, payload = '{"order_id": "o1"}', '{"total": 3, "tenant_id": "t"}'
    published = cli.json("events", "publish", "order.paid", "--app", APP, "--key", key, "--payload", payload)
    event_id = published["event_id"]
    assert sorted(d["status"] for d in published["deliveries"]) == ["pending"] * 4
    listed = cli.json("events", "list", "--name", "order.paid")["events"]
    assert [(e["id"], e["source"], e["key"]) for e in listed] == [(event_id, "cli", {"order_id": "o1"})]

    async with env_factory(app) as env:  # a worker delivers what the CLI published
        await settled(env.engine, event_id)

    shown = cli.json("events", "show", event_id)
    by_trigger = {d["trigger"]: d for d in shown["deliveries"]}
    assert by_trigger["order.paid->ev.receipt"]["status"] == "started"
    assert by_trigger["order.paid->broken"]["status"] == "failed"
    assert cli.json("events", "deliveries", event_id)["deliveries"] == shown["deliveries"]
    table = cli("events", "show", event_id).out
    assert "order.paid->ev.fulfil" in table and "started" in table

    runs = cli.json("workflows", "list", "--source", "event:order.paid")["runs"]
    assert sorted(r["workflow"] for r in runs) == ["ev.audit", "ev.fulfil", "ev.receipt"]
    assert cli.json("workflows", "list", "--source", "cli")["runs"] == []


def test_a_bad_payload_is_refused_naming_the_fields(cli: Lockgate) -> None:
    cli = cli.real()  # this file's commands as processes of their own
    refused = cli("events", "publish", "order.paid", "--app", APP, "--key", "{}", "--payload", "{}", code=1)
    assert "key.order_id" in refused.err and "payload.total" in refused.err
    assert cli.json("events", "list")["events"] == []


async def test_replay_is_a_dry_run_until_commit(cli: Lockgate, env_factory: Any) -> None:
    key, payload = '{"order_id": "o7"}', '{"total": 3, "tenant_id": "t"}'
    event_id = cli.json("events", "publish", "order.paid", "--app", APP, "--key", key, "--payload", payload)["event_id"]
    async with env_factory(app) as env:
        await settled(env.engine, event_id)
    args = ["events", "replay", "--app", APP, "--event", "order.paid", "--since", "2000-01-01"]
    dry = cli.json(*args, "--status", "failed")
    assert dry["commit"] is False
    assert [(r["trigger"], r["status"]) for r in dry["results"]] == [("order.paid->broken", "would-replay")]
    done = cli.json(*args, "--trigger", "order.paid->ev.receipt", "--commit")
    assert [(r["status"], r["replay"]) for r in done["results"]] == [("started", 1)]
    again = cli.json(*args, "--trigger", "order.paid->ev.receipt", "--commit")
    assert [r["status"] for r in again["results"]] == ["skipped"]
    table = cli("events", "deliveries", event_id).out
    assert "#1" in table
