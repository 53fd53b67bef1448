"""The nemesis suite: every nemesis once, mixed, over a short load; every invariant holds.

Not yet in the default run: the short mixed run found nothing four times in a row, but it
takes 44-116 s on a loaded two-core machine, close to its own limit and a large share of the
suite's ten minutes (docs/reliability.md). ``LOCKGATE_NEMESIS=1`` runs the short one;
``LOCKGATE_TORTURE=long`` adds each nemesis alone and a long mixed run
(``LOCKGATE_NEMESIS_SECONDS``, default 300 s). ``python -m tests.nemesis`` prints the table of a
run of any length.
"""

from __future__ import annotations

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
SHORT = LONG or os.environ.get("LOCKGATE_NEMESIS", "") == "1"


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


@pytest.mark.skipif(not SHORT, reason="LOCKGATE_NEMESIS=1 (a minute or two of faults: docs/reliability.md)")
@pytest.mark.timeout(300)
async def test_every_nemesis_once_mixed_violates_nothing(logs: Path) -> None:
    kinds = _kinds(KINDS)
    report = await nemesis(Config(kinds=kinds, once=True, every=1.0, seed=7, settle_timeout=60), logs)
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
