"""The short soak (60 s of load under kill -9), and the checks' own arithmetic.

The long one: ``python -m tests.soak --minutes 10``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..pgserver import PrivatePostgres
from .checks import max_overlap, window_excess
from .run import Soak, soak


@pytest.fixture
def server(private_pg: PrivatePostgres) -> PrivatePostgres:
    return private_pg


def test_overlap_counts_half_open_spans() -> None:
    assert max_overlap([]) == 0
    assert max_overlap([(0, 1), (1, 2), (2, 3)]) == 1  # an end frees room for a start at the same instant
    assert max_overlap([(0, 2), (1, 3), (1.5, 1.6)]) == 3


def test_window_excess_finds_a_crowded_window() -> None:
    assert window_excess([0, 0.5, 1.0, 1.5], limit=2, period=1.0) == []
    assert window_excess([0, 0.4, 0.9, 2.0], limit=2, period=1.0) == [0.9]


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_a_minute_of_mixed_load_under_kill_9_loses_nothing(server: PrivatePostgres, tmp_path: Path) -> None:
    report = await soak(server, tmp_path, Soak(seconds=60, rate=4, kill_every=3))
    print(report.render())
    assert report.figures["kills (kill -9)"] >= 10
    assert not report.violations, report.render()
