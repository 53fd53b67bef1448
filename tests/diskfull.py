"""A small file system of a test's own, to fill up: the disk-full tests of both stores.

A tmpfs mounted for the test (root only), or else a loop-mounted file; where neither can be
mounted the test is skipped with the reason, and fails under CI.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .pg import unavailable


def _mount(point: Path, size: str) -> None:
    if os.geteuid() != 0:
        unavailable("mounting a small file system for the disk-full test needs root")
    tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True)
    if tmpfs.returncode == 0:
        return
    image = point.parent / "fs.img"
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True, check=True)
    loop = subprocess.run(["mount", "-o", "loop", str(image), str(point)], capture_output=True)
    if loop.returncode != 0:
        unavailable(f"cannot mount a small file system here: tmpfs: {tmpfs.stderr!r}; loop: {loop.stderr!r}")


@contextmanager
def small_fs(point: Path, size: str = "4M") -> Iterator[Path]:
    """``point`` (created) as a file system of ``size``, unmounted afterwards."""
    point.mkdir(parents=True, exist_ok=True)
    _mount(point, size)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(directory: Path, leave: int) -> Path:
    """Fill the file system but ``leave`` bytes; the filler file (delete it to free the space)."""
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize
    filler = directory / "filler"
    with filler.open("wb") as out:
        out.write(b"\0" * max(0, free - leave))
    return filler
