"""Each peer in a virtual environment of its own, with pinned versions (printed by the run).

The environments live under the cache folder (``bench/.tmp-peers/`` unless ``--cache``) and are
reused while their requirements stay the same (a marker file holds the requirements installed).
lockgate's own environment installs this checkout, so the lockgate side runs as its users run it:
``lockgate serve`` processes from an installed package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["PINS", "ensure", "python_of"]

COMMON = ["redis==8.2.0", "psycopg[binary]==3.3.9"]
"""What the probe and the driver need in every environment (the probe's Redis and side table)."""

PINS: dict[str, list[str]] = {
    "celery": ["celery[redis]==5.7.0"],
    "rq": ["rq==3.0.0"],
    "procrastinate": ["procrastinate==3.10.0"],
    "pgqueuer": ["pgqueuer==1.6.0", "typer==0.16.1"],  # pgq's CLI fails on typer 0.29's enum defaults
    "huey": ["huey==3.5.4"],
    "dbos": ["dbos==3.4.0"],
    "lockgate": ["-e {repo}"],
}
"""The peers' pinned requirements, by environment name."""


def python_of(cache: Path, env: str) -> Path:
    """The interpreter of environment ``env``."""
    return cache / env / "bin" / "python"


def ensure(cache: Path, env: str, repo: Path) -> Path:
    """Create environment ``env`` with its pins unless it already holds them; its ``bin`` folder."""
    requirements = [r.format(repo=repo) for r in PINS[env]] + COMMON
    folder = cache / env
    marker = folder / "peers-requirements.txt"
    wanted = "\n".join(requirements)
    if marker.exists() and marker.read_text() == wanted and python_of(cache, env).exists():
        return folder / "bin"
    print(f"installing {env}: {' '.join(requirements)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    pip = [str(python_of(cache, env)), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, stdout=subprocess.DEVNULL)
    args: list[str] = []
    for requirement in requirements:
        args.extend(requirement.split(" ", 1) if requirement.startswith("-e ") else [requirement])
    subprocess.run([*pip, *args], check=True)
    marker.write_text(wanted)
    return folder / "bin"
