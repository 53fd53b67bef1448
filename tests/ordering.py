"""The order xdist's work stealing hands the tests out in: each worker starts with its share of the longest.

``--dist worksteal`` splits the collected tests into one contiguous run per worker and, when a worker runs
dry, moves the end of the longest queue to it. A test of a minute near the end of a queue is then the last
thing the whole suite waits for, alone on one worker. Here the known-long tests (``LONGEST``, timed on the
suite's own runs) are shared out longest first, each to the worker with the least of them so far, and put
at the head of its run; the other tests keep their order and fill the runs behind them, and what is stolen
at the end is short. The split mirrors worksteal's first one (every worker idle, each given an equal part
of what is left); were it to differ, every test still runs, only less well ordered.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

import pytest

# Node id (a test, or every parametrisation of it) -> its seconds in a run of the whole suite on a busy
# 2-core machine (--durations): inflated, but their order is what counts here. Left out: tests sharing a
# private PostgreSQL server with others of their file (each worker would start its own).
LONGEST: dict[str, float] = {
    "tests/soak/test_soak.py::test_a_minute_of_mixed_load_under_kill_9_loses_nothing": 123,
    "tests/test_docs.py::test_example_runs_to_completion[transactions_shop.py]": 60,
    "tests/test_cli_gate.py::test_why_places_a_queued_concurrency_start[sqlite]": 53,
    "tests/nemesis/test_nemesis.py::test_every_nemesis_once_mixed_violates_nothing": 52,
    "tests/test_serve_shutdown.py::test_a_step_in_a_thread_longer_than_the_grace_keeps_its_run_until_it_returns": 50,
    "tests/test_cli.py::test_start_then_list_and_show[postgres]": 42,
    "tests/test_gate_properties.py::test_a_throttle_under_a_concurrency_limit_never_admits_past_its_window": 41,
    "tests/test_schedule_cluster.py::test_three_processes_fire_each_second_once_through_a_kill_9": 38,
    "tests/test_routing_deploy.py::test_a_rolling_deploy_fails_no_run[postgres-incompatible]": 35,
    "tests/test_routing_deploy.py::test_each_process_executes_only_the_runs_its_labels_match[sqlite]": 32,
    "tests/test_cli.py::test_start_then_list_and_show[sqlite]": 31,
    "tests/test_cli_schedules.py::test_serve_fires_the_schedule_and_a_removed_one_shows_orphaned[sqlite]": 31,
    "tests/test_docs.py::test_example_runs_to_completion[agent_narration.py]": 30,
    "tests/test_routing_deploy.py::test_a_rolling_deploy_fails_no_run[postgres-compatible]": 29,
    "tests/test_routing_deploy.py::test_each_process_executes_only_the_runs_its_labels_match[postgres]": 28,
    "tests/test_step_flow.py::test_parallelism_never_exceeded_under_200_runs[postgres]": 27,
    "tests/test_cli.py::test_demo_runs_to_completion": 26,
    "tests/test_step_flow_handoff.py::test_a_burst_key_under_the_hand_off_never_exceeds_its_limits[postgres]": 26,
    "tests/test_cli_schedules.py::test_serve_fires_the_schedule_and_a_removed_one_shows_orphaned[postgres]": 25,
    "tests/test_compensation.py::test_kill_9_during_a_compensation_does_not_run_a_completed_one_again[postgres]": 25,
    "tests/test_serve_shutdown.py::test_sigterm_lets_the_running_step_finish_and_journals_it": 24,
    "tests/test_schedule_cluster.py::test_three_processes_fire_runtime_schedules_once_through_a_kill_9": 23,
    "tests/test_gate_properties.py::test_random_arrivals_and_completions_keep_the_gate_invariants": 23,
    "tests/test_event_waits_cluster.py::test_waits_are_each_satisfied_once_across_three_workers": 22,
    "tests/test_events_cluster.py::test_events_fan_out_once_and_cancel_once_across_three_workers": 20,
}


def _seconds(nodeid: str) -> float:
    return LONGEST.get(nodeid, LONGEST.get(nodeid.split("[", 1)[0], 0.0))


def longest_first(items: Sequence[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered so that each of ``workers`` contiguous runs starts with its share of the longest."""
    timed = sorted(
        ((-seconds, index) for index, item in enumerate(items) if (seconds := _seconds(item.nodeid)) > 0),
    )
    if workers < 2 or not timed:
        return list(items)
    sizes, left = [], len(items)
    for worker in range(workers):
        sizes.append(left // (workers - worker))
        left -= sizes[-1]
    heads: list[list[int]] = [[] for _ in sizes]
    loads = [0.0] * workers
    for negative, index in timed:
        open_runs = [w for w in range(workers) if len(heads[w]) < sizes[w]]
        worker = min(open_runs, key=lambda w: (loads[w], w))
        heads[worker].append(index)
        loads[worker] -= negative
    placed = {index for head in heads for index in head}
    rest = (index for index in range(len(items)) if index not in placed)
    order: list[int] = []
    for worker, head in enumerate(heads):
        order += head
        order += islice(rest, sizes[worker] - len(head))
    assert sorted(order) == list(range(len(items)))
    return [items[index] for index in order]
