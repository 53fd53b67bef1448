"""An encrypted run killed mid-step is replayed from its sealed journal by another process."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import lockgate as lg
from lockgate.crypto import KEYS_ENV

from .apps import sealed
from .test_crash import Workers

pytestmark = pytest.mark.slow

KEY = "k1:" + base64.b64encode(b"c" * 32).decode()
TAG = "Qx9-crash-marker"


class SealedWorkers(Workers):
    """Workers running the encrypted app, with the key in their environment."""

    app = "tests.apps.sealed:app"
    env: ClassVar[dict[str, str]] = {KEYS_ENV: KEY}


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[SealedWorkers]:
    with SealedWorkers(store_url, tmp_path) as pool:
        yield pool


async def test_an_encrypted_run_killed_mid_step_replays_its_sealed_journal(
    workers: SealedWorkers, store_url: str
) -> None:
    async with lg.Client(sealed.app, store_url, poll_interval=0.05, encryption_keys=[KEY]) as client:
        h = await client.start("sealed.steps", {"tag": TAG})
        assert h.run_id is not None
        first = workers.spawn()
        await workers.until(lambda: workers.count(f"{TAG}:two") == 1, "step two entered")
        steps = await client.steps(h.run_id)
        assert [(s.key, s.status, s.output) for s in steps] == [("one#0", "completed", "1")]
        workers.kill(first)

        workers.raise_flag(f"{TAG}.release-two")
        workers.spawn()
        assert await client.result(h.run_id, timeout=60) == f"{TAG}:123"
        # step one was replayed from its sealed entry, not run again
        assert (workers.count(f"{TAG}:one"), workers.count(f"{TAG}:two"), workers.count(f"{TAG}:three")) == (1, 2, 1)
    async with lg.Client(lg.App(), store_url, encryption_keys=[]) as stranger:
        run = await stranger.get_run(h.run_id)
        assert (run.payload, run.output) == ("<encrypted>", "<encrypted>")
