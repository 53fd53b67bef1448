"""The suite's own order under work stealing (tests/ordering.py): the longest tests head the workers' runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from .ordering import longest_first


@dataclass
class _Item:
    nodeid: str


def test_each_worker_s_run_starts_with_its_share_of_the_longest(monkeypatch: pytest.MonkeyPatch) -> None:
    items: list[Any] = [_Item(f"tests/test_a.py::test_{n}") for n in range(10)]
    items[9] = _Item("tests/test_a.py::test_9[sqlite]")
    timed = {"tests/test_a.py::test_2": 30.0, "tests/test_a.py::test_5": 50.0, "tests/test_a.py::test_9": 40.0}
    monkeypatch.setattr("tests.ordering.LONGEST", timed)
    ordered = [item.nodeid.removeprefix("tests/test_a.py::test_") for item in longest_first(items, 3)]
    # worksteal's first split of ten tests on three workers: 3, 3 and 4 in a row
    assert ordered[:3][0] == "5" and ordered[3:6][0] == "9[sqlite]" and ordered[6:][0] == "2"
    assert sorted(ordered) == sorted(item.nodeid.removeprefix("tests/test_a.py::test_") for item in items)
    rest = [n for n in ordered if n not in ("5", "9[sqlite]", "2")]
    assert rest == ["0", "1", "3", "4", "6", "7", "8"]  # the others keep their order


def test_without_workers_or_known_times_the_order_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    items: list[Any] = [_Item(f"tests/test_a.py::test_{n}") for n in range(4)]
    monkeypatch.setattr("tests.ordering.LONGEST", {"tests/test_a.py::test_3": 9.0})
    assert longest_first(items, 1) == items
    monkeypatch.setattr("tests.ordering.LONGEST", {})
    assert longest_first(items, 3) == items
