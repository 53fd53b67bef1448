"""``lockgate schedules ...``, against each store (one test runs them as real processes)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from .test_cli import Lockgate, migrated, wait_for

pytestmark = pytest.mark.slow

APP_SOURCE = textwrap.dedent(
    """
    from pydantic import BaseModel

    import lockgate as lg

    app = lg.App()


    class Day(BaseModel):
        day: str


    @app.workflow(
        name="report",
        schedule=lg.Schedule(
            cron="0 3 * * *", timezone="Europe/Berlin", payload=lambda at: {"day": at.date().isoformat()}
        ),
    )
    async def report(ctx: lg.Context, p: Day) -> str:
        return p.day


    app.schedule("pulse", workflow=report, every="1s", payload=lambda at: {"day": at.isoformat()})
    """
)


@pytest.fixture
def lockgate(tmp_path: Path, store_url: str) -> Lockgate:
    (tmp_path / "sched_cli_app.py").write_text(APP_SOURCE)
    return Lockgate(migrated(store_url), tmp_path, app="sched_cli_app:app")


def test_next_previews_slots_in_local_time_and_utc(lockgate: Lockgate) -> None:
    lockgate = lockgate.real()  # this file's commands as processes of their own
    doc = lockgate.json("schedules", "next", "report", "--count", "3", "--app", lockgate.app)
    assert doc["spec"] == "cron 0 3 * * *" and doc["timezone"] == "Europe/Berlin"
    assert len(doc["slots"]) == 3
    assert all(s["local"][11:19] == "03:00:00" for s in doc["slots"])
    assert all(s["utc"][11:19] in ("01:00:00", "02:00:00") and s["utc"].endswith("+00:00") for s in doc["slots"])
    missing = lockgate("schedules", "next", "nope", "--app", lockgate.app, code=1)
    assert "unknown schedule 'nope'" in missing.err


def test_run_pause_firings_and_backfill(lockgate: Lockgate) -> None:
    fired = lockgate.json("schedules", "run", "report", "--app", lockgate.app)
    assert fired["status"] == "started" and fired["run_id"]
    (firing,) = lockgate.json("schedules", "firings", "report")["firings"]
    assert firing["cause"] == "manual" and firing["source"] == "schedule:report+manual"
    lockgate("schedules", "pause", "report", "--reason", "quiet week")
    listed = {s["name"]: s for s in lockgate.json("schedules", "list", "--app", lockgate.app)["schedules"]}
    assert listed["report"]["paused"] and listed["report"]["paused_reason"] == "quiet week"
    assert listed["pulse"]["next_at"] is not None and not listed["pulse"]["orphaned"]
    lockgate("schedules", "unpause", "report")
    listed = {s["name"]: s for s in lockgate.json("schedules", "list")["schedules"]}  # no --app: the store alone
    first = lockgate.json("schedules", "list", "--app", lockgate.app, "--limit", "1")
    assert [s["name"] for s in first["schedules"]] == ["pulse"] and first["next_cursor"] == "pulse"
    assert not listed["report"]["paused"] and not listed["report"]["orphaned"] and listed["report"]["next_at"] is None
    args = ("schedules", "backfill", "report", "--from", "2026-03-27T00:00", "--to", "2026-03-30T12:00")
    dry = lockgate.json(*args, "--app", lockgate.app)
    assert [s["scheduled_at"] for s in dry["slots"]] == [
        "2026-03-27T03:00:00+01:00",
        "2026-03-28T03:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T03:00:00+02:00",
    ]
    assert {s["outcome"] for s in dry["slots"]} == {"would fire"}
    assert "dry run" in lockgate(*args, "--app", lockgate.app).out
    done = lockgate.json(*args, "--app", lockgate.app, "--commit")
    # The manual run is live (nothing executes it here): under on_overlap="skip" each slot stands down.
    assert [(s["outcome"], s["fired"]["why"]) for s in done["slots"]] == [("skipped", "overlap")] * 4
    again = lockgate.json(*args, "--app", lockgate.app)
    assert {s["outcome"] for s in again["slots"]} == {"already fired"}
    table = lockgate("schedules", "firings", "report").out
    assert "backfill" in table and "manual" in table


def test_serve_fires_the_schedule_and_a_removed_one_shows_orphaned(lockgate: Lockgate, tmp_path: Path) -> None:
    with lockgate.serving():
        rows = wait_for(
            # With the app, a schedule the engine has not recorded yet reads as one without firings.
            lambda: lockgate.json("schedules", "firings", "pulse", "--app", lockgate.app)["firings"],
            lambda rows: len(rows) >= 2,
            "pulse firings",
        )
    assert len({r["scheduled_at"] for r in rows}) == len(rows)
    (tmp_path / "sched_cli_app.py").write_text(APP_SOURCE.split("app.schedule(")[0])
    time.sleep(0.1)
    with lockgate.serving():
        listed = wait_for(
            lambda: {s["name"]: s for s in lockgate.json("schedules", "list", "--app", lockgate.app)["schedules"]},
            lambda listed: listed.get("pulse", {}).get("orphaned"),
            "pulse orphaned",
        )
    assert listed["pulse"]["next_at"] is None and not listed["report"]["orphaned"]
    assert "orphaned" in lockgate("schedules", "list", "--app", lockgate.app).out


def test_create_get_update_delete_a_runtime_schedule(lockgate: Lockgate) -> None:
    made = lockgate.json(
        "schedules", "create", "report:tenant-4711", "--workflow", "report", "--cron", "0 8 * * 1",
        "--timezone", "Europe/Berlin", "--payload", '{"day": "monday"}', "--note", "weekly", "--app", lockgate.app,
    )  # fmt: skip
    assert made["origin"] == "runtime" and made["cron"] == "0 8 * * 1" and made["note"] == "weekly"
    changed = lockgate.json("schedules", "update", "report:tenant-4711", "--every", "1h", "--app", lockgate.app)
    assert changed["every"] == 3600 and changed["cron"] is None and changed["revision"] == 2
    shown = lockgate("schedules", "get", "report:tenant-4711").out
    assert "runtime" in shown and "monday" in shown
    refused = lockgate("schedules", "delete", "pulse", "--app", lockgate.app, code=1)
    assert "cannot delete schedule 'pulse': it is declared" in refused.err
    bad = lockgate(
        "schedules", "create", "x", "--workflow", "report", "--cron", "0 8 * * *", "--timezone", "Mars/Olympus",
        "--payload", '{"day": "d"}', "--app", lockgate.app, code=1,
    )  # fmt: skip
    assert "timezone: unknown time zone" in bad.err
    lockgate("schedules", "delete", "report:tenant-4711")
    assert "unknown schedule 'report:tenant-4711'" in lockgate("schedules", "get", "report:tenant-4711", code=1).err
