"""PostgreSQL out of disk: a clear ``StoreFull``, reads go on, nothing half-written, work resumes.

lockgate's tables live in a tablespace on a small file system of the test's own
(tests/diskfull.py) on the private server, so filling it refuses writes to those tables
(SQLSTATE 53100) while the server's WAL and catalog, on their own disk, go on: the way a
full data volume looks to a client, without putting the server itself at risk.
"""

from __future__ import annotations

import logging
import os
import pwd
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pydantic import BaseModel

import lockgate as lg

from .diskfull import fill, small_fs
from .pgserver import PrivatePostgres

pytestmark = pytest.mark.slow

app = lg.App("faults-pg-disk")


class Blob(BaseModel):
    n: int
    data: str = ""


def echo(data: str) -> int:
    return len(data)


@app.workflow(name="pgfs.blob")
async def blob(ctx: lg.Context, p: Blob) -> int:
    first = await ctx.step("first", echo, p.data)
    return await ctx.step("second", echo, p.data) + first  # type: ignore[no-any-return]


@pytest.fixture
def full_url(private_pg: PrivatePostgres) -> Iterator[tuple[str, Path]]:
    """A database whose new tables go to a tablespace on a 16 MB file system; its URL and that folder."""
    name = f"lg_disk_{secrets.token_hex(3)}"
    # under the server's own folder: the server's user must reach it
    with small_fs(private_pg.root / name, "16M") as point:
        space = point / "ts"
        space.mkdir()
        owner = pwd.getpwnam("postgres")
        os.chown(space, owner.pw_uid, owner.pw_gid)
        private_pg.admin(f"CREATE TABLESPACE {name} LOCATION '{space}'")
        url = private_pg.create_database()
        database = url.rsplit("/", 1)[1]
        private_pg.admin(f'ALTER DATABASE "{database}" SET default_tablespace = {name}')
        try:
            yield url, point
        finally:
            private_pg.admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            private_pg.admin(f"DROP TABLESPACE IF EXISTS {name}")


def _counts(url: str) -> tuple[int, ...]:
    with psycopg.connect(url) as conn:
        return tuple(
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in ("lockgate_runs", "lockgate_ledger", "lockgate_journal")
        )


async def test_a_full_disk_is_store_full_reads_go_on_and_work_resumes(
    full_url: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    url, point = full_url
    big = secrets.token_hex(20_000)  # random: PostgreSQL cannot compress it away
    caplog.set_level(logging.WARNING, logger="lockgate.store")
    async with lg.Engine(app, url, poll_interval=0.05, lease="2s") as engine:
        with psycopg.connect(url) as conn:  # the tables did land on the small disk
            row = conn.execute(
                "SELECT t.spcname FROM pg_class c JOIN pg_tablespace t ON t.oid = c.reltablespace "
                "WHERE c.relname = 'lockgate_runs'"
            ).fetchone()
            assert row is not None
        done = [await engine.start("pgfs.blob", Blob(n=i)) for i in range(3)]
        for h in done:
            assert await engine.result(h.run_id or "", timeout=20) == 0
        filler = fill(point, leave=600_000)
        started: list[str] = []
        with pytest.raises(lg.StoreError) as refused:
            for i in range(500):
                started.append((await engine.start("pgfs.blob", Blob(n=100 + i, data=big))).run_id or "")
        assert isinstance(refused.value, lg.StoreFull), refused.value
        assert "disk is full" in str(refused.value)
        # Reads keep working on a full disk.
        runs = await engine.list_runs(workflow="pgfs.blob", limit=1000)
        assert {r.id for r in runs} >= {h.run_id for h in done}
        assert (await engine.get_run(done[0].run_id or "")).status == "succeeded"
        # A refused start wrote nothing: no run, no ledger row (runs started before it may still journal).
        before = _counts(url)[:2]
        with pytest.raises(lg.StoreFull):
            await engine.start("pgfs.blob", Blob(n=999, data=big))
        assert _counts(url)[:2] == before

        filler.unlink()
        after = await engine.start("pgfs.blob", Blob(n=1000, data=big))
        for run_id in [*started, after.run_id or ""]:
            assert await engine.result(run_id, timeout=60) == 2 * len(big)
    said = [r.getMessage() for r in caplog.records]
    assert sum("out of disk" in m for m in said) >= 1
    assert any("accepts writes again" in m for m in said)
    assert not any("unreachable" in m for m in said), said
