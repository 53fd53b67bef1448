"""A migrated SQLite file per test process, copied for each test's (or each example's) store.

Migrating a new SQLite file costs far more than copying one: the file is migrated once, by the
store itself, and every store a test asks for is a copy, opened (and its schema version checked)
as any store is. Tests of migration itself build their files from scratch.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lockgate.store.sqlite import SQLiteStore

__all__ = ["copy_store"]


async def _migrate(url: str) -> None:
    store = SQLiteStore(url)
    await store.open()
    await store.close()


@functools.cache
def _template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="lockgate-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "lockgate.db"
    # on a loop of its own, in a thread of its own: the caller's thread may be running a loop already
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _migrate(f"sqlite:///{path}")).result()
    # closed by its last connection: the write-ahead log is folded into the file, which is all there is to copy
    assert sorted(p.name for p in folder.iterdir()) == [path.name]
    return path


def copy_store(path: Path | str, *, synchronous: str | None = None) -> str:
    """A new, migrated store at ``path`` (a SQLite file), its URL; ``synchronous`` as the URL's option."""
    shutil.copyfile(_template(), path)
    url = f"sqlite:///{path}"
    return f"{url}?synchronous={synchronous}" if synchronous else url
