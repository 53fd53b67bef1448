"""The store seam on every store kind: group commit, per-op refusal, fencing, claiming."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.store import Store, Tx, gate, journal, messages, open_store, shared
from lockgate.store import runs as store_runs
from lockgate.store.base import GROUP_FIRST, GROUP_LIMIT


@pytest.fixture
async def stores(store_url: str) -> AsyncIterator[Callable[[], Any]]:
    """``await stores()``: another open store on the test database, closed afterwards."""
    opened: list[Store] = []

    async def make() -> Store:
        store = open_store(store_url)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def run_row(run_id: str, workflow: str = "w") -> dict[str, Any]:
    return {"id": run_id, "workflow": workflow, "payload": "{}", "patches": "[]"}


async def run_ids(store: Store) -> list[str]:
    return sorted(r["id"] for r in await store.read(store_runs.list_runs, limit=1000))


async def test_a_refused_op_rolls_back_only_itself(stores: Any) -> None:
    store = await stores()
    before = store.commits

    async def create_then_refuse(tx: Tx) -> None:
        await store_runs.create_run(tx, run_row("r2"), 1.0)
        raise ValueError("refused after writing")

    outcomes = await asyncio.gather(
        store.write(store_runs.create_run, run_row("r1"), 1.0),
        store.write(create_then_refuse),
        store.write(store_runs.create_run, run_row("r3"), 1.0),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], ValueError)
    assert [o[1] for o in outcomes if isinstance(o, tuple)] == [True, True]
    assert store.commits == before + 1  # the three went in one transaction
    assert await run_ids(store) == ["r1", "r3"]
    assert await store.read(journal.list_events, "r2") == []


async def test_a_fenced_write_fails_its_caller_and_the_store_carries_on(stores: Any) -> None:
    store = await stores()
    await store.write(store_runs.create_run, run_row("r1"), 1.0)
    [claimed] = await store.write(store_runs.claim_runs, "w1", 2.0, 10.0, 5, ["w"])
    stale = shared.Fence("r1", "w1", int(claimed["epoch"]) - 1)
    live = shared.Fence("r1", "w1", int(claimed["epoch"]))
    with pytest.raises(shared.Fenced):
        await asyncio.wait_for(store.write(journal.touch, stale, 3.0), 10)
    outcomes = await asyncio.gather(
        store.write(journal.touch, stale, 4.0), store.write(journal.touch, live, 4.0), return_exceptions=True
    )
    assert isinstance(outcomes[0], shared.Fenced) and outcomes[1] is None
    assert (await store.read(shared.get_run, "r1"))["progress_at"] == 4.0


async def test_a_fenced_journal_write_in_a_batch_is_refused_alone(stores: Any) -> None:
    store = await stores()
    for run_id in ("r1", "r2"):
        await store.write(store_runs.create_run, run_row(run_id), 1.0)
    claimed = {r["id"]: r for r in await store.write(store_runs.claim_runs, "w1", 2.0, 10.0, 5, ["w"])}
    live = shared.Fence("r1", "w1", int(claimed["r1"]["epoch"]))
    stale = shared.Fence("r2", "w1", int(claimed["r2"]["epoch"]) - 1)

    def entry(key: str) -> dict[str, Any]:
        return {"step_key": key, "kind": "step", "status": "completed", "output": "1", "seq": 0}

    before = store.commits
    # A lone entry first, with the writer idle, could be committed on its own at once: it comes last here.
    outcomes = await asyncio.gather(
        store.write(journal.record_entry, live, entry("a#0"), 3.0, progress=True),
        store.write(journal.record_entry, stale, entry("b#0"), 3.0, progress=True),
        store.write(journal.record_entry, live, entry("c#0"), 3.0),
        return_exceptions=True,
    )
    assert outcomes[0] is None and isinstance(outcomes[1], shared.Fenced) and outcomes[2] is None
    assert store.commits == before + 1
    assert sorted(e["step_key"] for e in await store.read(journal.load_journal, "r1")) == ["a#0", "c#0"]
    assert await store.read(journal.load_journal, "r2") == []
    assert (await store.read(shared.get_run, "r1"))["progress_at"] == 3.0  # touched with its entry
    assert (await store.read(shared.get_run, "r2"))["progress_at"] == 1.0


async def test_a_failing_statement_fails_only_its_op(stores: Any) -> None:
    store = await stores()
    await store.write(store_runs.create_run, run_row("r1"), 1.0)
    message = {"id": "m1", "run_id": "r1", "kind": "signal", "name": "go", "payload": "{}"}
    await store.write(messages.send_message, message, 2.0)
    outcomes = await asyncio.gather(
        store.write(shared.add_event, "r1", "before", 3.0, None),
        store.write(messages.send_message, message, 3.0),  # the same message id again: the insert fails
        store.write(shared.add_event, "r1", "after", 3.0, None),
        return_exceptions=True,
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], Exception)
    types = [e["type"] for e in await store.read(journal.list_events, "r1")]
    assert types == ["run-started", "signal-sent", "before", "after"]


async def test_insert_gives_the_id_of_the_row_it_added(stores: Any) -> None:
    """``Tx.insert`` (the ledger's arrival order): each op's own row, in one group commit or across several."""
    store = await stores()

    async def decide(tx: Tx, ticket: str) -> int:
        return await gate.ledger(tx, ticket=ticket, kind="arrival", workflow="w", outcome="admitted", at=1.0)

    async def decide_then_refuse(tx: Tx) -> int:
        await decide(tx, "refused")
        raise ValueError("refused after writing")

    ids = await asyncio.gather(
        store.write(decide, "a"),
        store.write(decide_then_refuse),
        store.write(decide, "b"),
        return_exceptions=True,
    )
    later = await store.write(decide, "c")
    assert isinstance(ids[1], ValueError)
    for ticket, got in (("a", ids[0]), ("b", ids[2]), ("c", later)):
        (row,) = await store.read(lambda tx, t=ticket: tx.execute("ledger_for_ticket", {"ticket": t}))
        assert row["id"] == got
    assert ids[0] < ids[2] < later


async def test_write_nowait_joins_the_next_commit_and_close_flushes_it(store_url: str, stores: Any) -> None:
    store = open_store(store_url)
    await store.open()
    await store.write(store_runs.create_run, run_row("r1"), 1.0)
    store.write_nowait(shared.add_event, "r1", "first", 2.0, None)
    await store.write(shared.add_event, "r1", "second", 3.0, None)
    store.write_nowait(shared.add_event, "r1", "at-close", 4.0, None)
    await store.close()
    reader = await stores()
    events = [e["type"] for e in await reader.read(journal.list_events, "r1")]
    assert events == ["run-started", "first", "second", "at-close"]


async def test_replicas_claiming_at_once_take_disjoint_runs(stores: Any) -> None:
    first, second = await stores(), await stores()

    async def create_all(tx: Tx) -> None:
        for i in range(40):
            await store_runs.create_run(tx, run_row(f"r{i:02}"), 1.0)

    await first.write(create_all)
    claims: dict[str, list[str]] = {"a": [], "b": []}
    for _ in range(5):
        got = await asyncio.gather(
            first.write(store_runs.claim_runs, "a", 2.0, 60.0, 40, ["w"]),
            second.write(store_runs.claim_runs, "b", 2.0, 60.0, 40, ["w"]),
        )
        claims["a"] += [r["id"] for r in got[0]]
        claims["b"] += [r["id"] for r in got[1]]
    assert not set(claims["a"]) & set(claims["b"])
    assert sorted(claims["a"] + claims["b"]) == await run_ids(first)
    assert {r["epoch"] for r in await first.read(store_runs.list_runs, limit=100)} == {1}  # each claimed once


# -- a group commit is its ops one by one ------------------------------------------------------

KINDS = ("create", "refuse", "fail", "fenced", "read", "event")
"""What one queued write does: adds a run; adds one then refuses; runs a statement the server refuses;
writes a journal entry under a stale lease; reads a row, then adds a run; adds an event."""


async def _create_then_refuse(tx: Tx, run: dict[str, Any]) -> None:
    await store_runs.create_run(tx, run, 1.0)
    raise ValueError("refused after writing")


async def _read_then_create(tx: Tx, seen: str, run: dict[str, Any]) -> str:
    row = await shared.get_run(tx, seen)  # its rows are read mid-batch: an exchange before the rest is sent
    await store_runs.create_run(tx, run, 1.0)
    return str(row["id"])


async def _one_group_commit(url: str, kinds: list[str], tag: str) -> None:
    store = open_store(url)
    await store.open()
    try:
        workflow = f"w-{tag}"
        held = f"{tag}-held"
        await store.write(store_runs.create_run, run_row(held, workflow), 1.0)
        [claimed] = await store.write(store_runs.claim_runs, "w1", 2.0, 60.0, 5, [workflow])
        stale = shared.Fence(held, "w1", int(claimed["epoch"]) - 1)
        message = {"id": f"{tag}-m", "run_id": held, "kind": "signal", "name": "go", "payload": "{}"}
        await store.write(messages.send_message, message, 2.0)
        entry = {"step_key": "s#0", "kind": "step", "status": "completed", "output": "1", "seq": 0}

        calls = []
        for i, kind in enumerate(kinds):
            run = run_row(f"{tag}-{i}", workflow)
            calls.append(
                {
                    "create": lambda run=run: store.write(store_runs.create_run, run, 1.0),
                    "refuse": lambda run=run: store.write(_create_then_refuse, run),
                    "fail": lambda: store.write(messages.send_message, message, 3.0),  # its id is taken
                    "fenced": lambda: store.write(journal.record_entry, stale, entry, 3.0),
                    "read": lambda run=run: store.write(_read_then_create, held, run),
                    "event": lambda i=i: store.write(shared.add_event, held, f"e{i}", 3.0, None),
                }[kind]()
            )
        outcomes = await asyncio.gather(*calls, return_exceptions=True)

        for kind, outcome in zip(kinds, outcomes, strict=True):
            if kind == "refuse":
                assert isinstance(outcome, ValueError), outcome
            elif kind == "fail":
                assert isinstance(outcome, Exception) and not isinstance(outcome, ValueError), outcome
            elif kind == "fenced":
                assert isinstance(outcome, shared.Fenced), outcome
            elif kind == "read":
                assert outcome == held
            elif kind == "create":
                assert isinstance(outcome, tuple) and outcome[1] is True, outcome
            else:
                assert outcome is None, outcome
        runs = {r["id"] for r in await store.read(store_runs.list_runs, limit=1000) if r["workflow"] == workflow}
        added = {f"{tag}-{i}" for i, kind in enumerate(kinds) if kind in ("create", "read")}
        assert runs == {held} | added
        events = [e["type"] for e in await store.read(journal.list_events, held)]
        assert events == ["run-started", "signal-sent"] + [f"e{i}" for i, kind in enumerate(kinds) if kind == "event"]
        assert await store.read(journal.load_journal, held) == []
    finally:
        await store.close()


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=12))
def test_a_group_commit_leaves_what_its_ops_one_by_one_would(store_url: str, kinds: list[str]) -> None:
    """Any mix of writes queued together: each gets its own outcome, and only the refused ones leave nothing.

    On PostgreSQL a mix with a refusal, a failed statement or a stale lease sends its group commit
    down the way back (rolled back, then op by op under savepoints); a mix without, through the
    pipeline with rows read mid-batch. Each example works on runs of its own in the test's database.
    """
    asyncio.run(_one_group_commit(store_url, kinds, uuid.uuid4().hex[:8]))


async def test_a_burst_at_rest_commits_its_head_first(stores: Any) -> None:
    """A burst queued at an idle writer commits its first GROUP_FIRST writes alone, then at most
    GROUP_LIMIT a commit (what a transaction locks, other processes wait for), every write once."""
    store = await stores()
    await store.write(store_runs.create_run, run_row("warm"), 1.0)
    seen: list[int] = []  # the commit count each write ran under: one value a transaction

    async def numbered(tx: Tx, i: int) -> int:
        seen.append(store.commits)
        await store_runs.create_run(tx, run_row(f"b{i:04d}"), 1.0)
        return i

    count = GROUP_FIRST + 2 * GROUP_LIMIT + 10
    done = await asyncio.gather(*(store.write(numbered, i) for i in range(count)))
    assert done == list(range(count))
    sizes = [seen.count(c) for c in sorted(set(seen))]
    assert sizes == [GROUP_FIRST, GROUP_LIMIT, GROUP_LIMIT, 10]
    assert len(await run_ids(store)) == count + 1
