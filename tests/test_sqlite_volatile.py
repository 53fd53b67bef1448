"""SQLite commits a batch of volatile writes (a claim) without a sync of its own, and nothing else.

``PRAGMA synchronous`` is read inside each write's own transaction: NORMAL (1) in a batch of
only volatile writes, the store's setting in any other batch and after one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from lockgate.store import Tx
from lockgate.store.coalesce import volatile
from lockgate.store.sqlite import SQLiteStore

pytestmark = pytest.mark.asyncio


async def _synchronous(tx: Tx) -> int:
    return int(tx._conn.execute("PRAGMA synchronous").fetchone()[0])  # type: ignore[attr-defined]


async def durable_write(tx: Tx) -> int:
    return await _synchronous(tx)


@volatile
async def claim_like(tx: Tx) -> int:
    return await _synchronous(tx)


@pytest.mark.parametrize(("setting", "level"), [("full", 2), ("extra", 3)])
async def test_only_a_batch_of_volatile_writes_skips_the_sync(tmp_path: Path, setting: str, level: int) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'v.db'}?synchronous={setting}")
    await store.open()
    try:
        assert await store.write(claim_like) == 1  # NORMAL: the log is not synced for it
        assert await store.write(durable_write) == level  # put back right after
        mixed = await asyncio.gather(store.write(claim_like), store.write(durable_write))
        assert mixed == [level, level]  # one commit for both: the durable write's sync covers the claim
        assert await store.write(claim_like) == 1
        assert await store.read(_synchronous) == level
    finally:
        await store.close()


async def test_a_store_set_to_normal_stays_normal(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'n.db'}?synchronous=normal")
    await store.open()
    try:
        assert [await store.write(claim_like), await store.write(durable_write)] == [1, 1]
    finally:
        await store.close()


async def test_a_refused_volatile_batch_puts_the_setting_back(tmp_path: Path) -> None:
    @volatile
    async def refused(tx: Tx) -> Any:
        raise lg.InvalidArgument("refused")

    store = SQLiteStore(f"sqlite:///{tmp_path / 'r.db'}")
    await store.open()
    try:
        with pytest.raises(lg.InvalidArgument):
            await store.write(refused)
        assert await store.write(durable_write) == 2
    finally:
        await store.close()
