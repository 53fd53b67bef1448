"""The nemesis suite: every nemesis once, mixed, over a short load; every invariant holds.

The short run is part of the normal suite: each nemesis once, the worker faults and the
database faults in two lanes at once, the workers booting while the standby and the side
server start (about half a minute on a loaded two-core machine; docs/reliability.md). Under
``CI=true`` a nemesis this machine cannot inject (root and iproute2; libfaketime) fails it.
``LOCKGATE_TORTURE=long`` adds each nemesis alone and a long mixed run
(``LOCKGATE_NEMESIS_SECONDS``, default 300 s). ``python -m tests.nemesis`` prints the table of a
run of any length.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import LONG
from ..pg import in_ci
from .faults import KINDS
from .run import Config, available, nemesis

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("LOCKGATE_NEMESIS_SECONDS", "300"))
# The short run: a fault every half second or so in each lane, a lighter load and a smaller burst during the
# restart than the long runs' (the CPU a loaded machine has left goes to the faults and the checks).
SHORT = Config(once=True, every=0.5, rate=3.0, burst=40, seed=7, settle_timeout=60)


def _kinds(wanted: tuple[str, ...]) -> list[str]:
    kinds, missing = available(wanted)
    if missing and in_ci():
        pytest.fail(f"this machine cannot inject {missing} (root and iproute2; libfaketime)")
    return kinds


@pytest.fixture
def logs() -> Iterator[Path]:
    """The workers' logs and, on a violation, what the checks read: kept (and named) when a test fails."""
    where = Path(tempfile.mkdtemp(prefix="lockgate-nemesis-"))
    yield where
    if not any(where.glob("*.tsv")):
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.timeout(240)
async def test_every_nemesis_once_mixed_violates_nothing(logs: Path) -> None:
    kinds = _kinds(KINDS)
    report = await nemesis(dataclasses.replace(SHORT, kinds=kinds), logs)
    print(report.render())
    assert sorted(f.kind for f in report.faults) == sorted(kinds), report.render()
    assert not report.violations, f"{report.render()}\n(logs and tables in {logs})"


@pytest.mark.skipif(not LONG, reason="LOCKGATE_TORTURE=long")
@pytest.mark.timeout(SECONDS + 600)
@pytest.mark.parametrize("kind", KINDS)
async def test_each_nemesis_alone(logs: Path, kind: str) -> None:
    kinds = _kinds((kind,))
    if not kinds:
        pytest.skip(f"this machine cannot inject {kind}")
    report = await nemesis(Config(kinds=kinds, seconds=SECONDS / len(KINDS), every=4.0), logs)
    print(report.render())
    assert not report.violations, f"{report.render()}\n(logs and tables in {logs})"


@pytest.mark.skipif(not LONG, reason="LOCKGATE_TORTURE=long")
@pytest.mark.timeout(SECONDS + 600)
async def test_a_long_mixed_run(logs: Path) -> None:
    report = await nemesis(Config(kinds=_kinds(KINDS), seconds=SECONDS, every=5.0), logs)
    print(report.render())
    assert not report.violations, f"{report.render()}\n(logs and tables in {logs})"
