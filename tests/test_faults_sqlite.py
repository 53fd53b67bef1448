"""SQLite under faults: a file system that fills up, and a second process on the same file.

The full disk is a small file system of the test's own (tests/diskfull.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import lockgate as lg

from .apps.waits import eventually
from .diskfull import fill
from .diskfull import small_fs as mounted

ROOT = Path(__file__).resolve().parents[1]

app = lg.App("faults-sqlite")


class Blob(BaseModel):
    n: int
    data: str = ""


def echo(data: str) -> int:
    return len(data)


@app.workflow(name="fs.blob")
async def blob(ctx: lg.Context, p: Blob) -> int:
    first = await ctx.step("first", echo, p.data)
    await ctx.sleep("nap", "100ms")
    return await ctx.step("second", echo, p.data) + first  # type: ignore[no-any-return]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB file system of the test's own, unmounted afterwards."""
    with mounted(tmp_path / "fs") as point:
        yield point


def _integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def _counts(path: Path) -> tuple[int, int, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("lockgate_runs", "lockgate_ledger", "lockgate_journal")
        )


@pytest.mark.slow
async def test_a_full_disk_is_a_clear_error_reads_go_on_and_work_resumes_once_space_is_freed(small_fs: Path) -> None:
    db = small_fs / "lockgate.db"
    big = "x" * 40_000
    async with lg.Engine(app, f"sqlite:///{db}", poll_interval=0.05, lease="2s") as engine:
        done = [await engine.start("fs.blob", Blob(n=i)) for i in range(3)]
        for h in done:
            assert await engine.result(h.run_id or "", timeout=10) == 0
        filler = fill(small_fs, leave=150_000)
        started: list[str] = []
        with pytest.raises(lg.StoreError) as refused:
            for i in range(200):
                started.append((await engine.start("fs.blob", Blob(n=100 + i, data=big))).run_id or "")
        assert "full" in str(refused.value), refused.value
        assert isinstance(refused.value, lg.StoreFull)
        before = _counts(db)
        # Reads keep working on a full disk.
        runs = await engine.list_runs(workflow="fs.blob", limit=1000)
        assert len(runs) == len(done) + len(started)
        assert (await engine.get_run(done[0].run_id or "")).status == "succeeded"
        # A refused start wrote nothing.
        with pytest.raises(lg.StoreError):
            await engine.start("fs.blob", Blob(n=999, data=big))
        assert _counts(db) == before
        assert _integrity(db) == "ok"

        filler.unlink()
        after = await engine.start("fs.blob", Blob(n=1000, data=big))
        for run_id in [*started, after.run_id or ""]:
            assert await engine.result(run_id, timeout=30) == 2 * len(big)
    assert _integrity(db) == "ok"


@pytest.mark.slow
async def test_two_serve_processes_on_one_sqlite_file_share_it_without_corrupting_it(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    url = f"sqlite:///{db}"
    async with lg.Client(app, url) as client:
        handles = [await client.start("fs.blob", Blob(n=i, data="y" * 100)) for i in range(20)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate.cli",
                "serve",
                "tests.test_faults_sqlite:app",
                "--store",
                url,
                "--no-http",
                "--lease",
                "2s",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    try:
        async with lg.Client(app, url) as client:

            async def all_done() -> bool:
                statuses = [(await client.get_run(h.run_id or "")).status for h in handles]
                return statuses == ["succeeded"] * len(handles)

            await eventually(all_done, timeout=60, what="every run succeeded")
            for h in handles:
                assert [s.status for s in await client.steps(h.run_id or "")] == ["completed"] * 3
            assert [proc.poll() for proc in procs] == [None, None], "a second process was neither refused nor let in"
    finally:
        for proc in procs:
            proc.terminate()
        outputs = [proc.communicate(timeout=20)[0].decode(errors="replace") for proc in procs]
    assert _integrity(db) == "ok"
    for text in outputs:
        assert "Traceback" not in text, text
        assert "database is locked" not in text, text
    await asyncio.sleep(0)
