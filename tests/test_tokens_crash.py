"""A run parked on an approval token survives SIGKILL of its worker; the CLI completes the token."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import lockgate as lg

from .apps import crashy, tokens_crash
from .test_cli import Lockgate, migrated
from .test_crash import ROOT, Workers

pytestmark = pytest.mark.slow

APP = "tests.apps.tokens_crash:app"


class TokenWorkers(Workers):
    """``Workers`` running the token crash app."""

    app = APP


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[TokenWorkers]:
    with TokenWorkers(migrated(store_url), tmp_path) as pool:
        yield pool


async def test_a_run_waiting_on_a_token_survives_sigkill_and_the_cli_completes_it(
    workers: TokenWorkers, store_url: str, tmp_path: Path
) -> None:
    async with lg.Client(tokens_crash.app, store_url, poll_interval=0.05) as client:
        h = await client.start("tokcrash.approve", {})
        assert h.run_id is not None
        first = workers.spawn()

        async def parked() -> bool:
            run = await client.get_run(h.run_id or "")
            return run.waiting_on == "token" and run.status == "running"

        await workers.until(parked, "the run parked on its token")
        workers.kill(first)
        [token] = [line.split(" ", 1)[1] for line in crashy.effects(workers.effects) if line.startswith("token ")]

        cli = Lockgate(store_url, tmp_path, app=APP)
        cli.env["PYTHONPATH"] = os.pathsep.join((str(ROOT), cli.env["PYTHONPATH"]))
        listed = cli.json("callbacks", "list", h.run_id)["tokens"]
        assert [(t["name"], t["state"]) for t in listed] == [("approval", "pending")]
        assert token not in repr(listed)
        refused = cli("callbacks", "complete", token, "--app", APP, "--payload", '{"approved": "yes?"}', code=1)
        assert "PayloadError" in refused.err or "approved" in refused.err
        done = cli.json("callbacks", "complete", token, "--app", APP, "--payload", '{"approved": true, "by": "cli"}')
        assert done["token_id"] == listed[0]["id"]
        again = cli("callbacks", "complete", token, "--app", APP, "--payload", '{"approved": false, "by": "x"}', code=1)
        assert "completed already" in again.err

        workers.spawn()  # a new worker resumes the run the dead one parked
        assert await client.result(h.run_id, timeout=60) == [True, "cli"]
        assert workers.count("handed") == 1 and workers.count("resumed") == 1
