"""Every statement about one run reads one partition of the run history, at size (docs/history.md).

A database with ten days of partitions (made ahead, as the retention sweep does) and 10,000 journal rows,
attempts and events in each; the planner's own answers, read with EXPLAIN, for a statement planned for its
values and for a prepared statement's generic plan (the store prepares its statements), which prunes at
execution start.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import psycopg
import pytest

from lockgate.ids import id_floor, id_millis
from lockgate.store.sql_files import load_queries

from .history_fill import DAYS, event_partition_starts, history_database

PINNED = [
    "load_journal",
    "list_attempts",
    "list_events",
    "has_compensations",
    "delete_journal_from",
    "stream_state",
    "stream_chunks",
]
_PARAM = re.compile(r"%\(([a-z_]+)\)s")
_SCANNED = re.compile(r"Scan(?: using \S+)? on (lockgate_(?:journal|step_attempts|run_events|stream_chunks)_\w+)")
# Only scans count: a generic plan of a DELETE still names every partition as a target (PostgreSQL 15), but
# reads the one its run's id leads to.


def _scanned(plan: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name in _SCANNED.findall(plan):
        table = re.sub(r"_(p\w+|kept)$", "", name)
        found.setdefault(table, set()).add(name)
    return found


def _values(query: str, run_id: str) -> dict[str, Any]:
    given: dict[str, Any] = {"run_id": run_id, "topic": "default", "limit": 10}
    return {name: given.get(name, 0) for name in _PARAM.findall(query)}


@pytest.fixture(scope="module")
def filled() -> tuple[str, str]:
    """The database of ten days' history every test process shares (tests/history_fill.py), and the id of a
    run in its middle partition."""
    return history_database()


@pytest.mark.parametrize("name", PINNED)
def test_a_statement_about_one_run_reads_one_partition(filled: tuple[str, str], name: str) -> None:
    url, run_id = filled
    query = load_queries("postgres")[name]
    with psycopg.connect(url) as conn:
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, _values(query, run_id)).fetchall())
    scanned = _scanned(plan)
    assert scanned, plan
    assert all(len(parts) == 1 for parts in scanned.values()), plan


@pytest.mark.parametrize("name", PINNED)
def test_a_prepared_statement_s_generic_plan_prunes_to_one_partition(filled: tuple[str, str], name: str) -> None:
    url, run_id = filled
    query = load_queries("postgres")[name]
    names = list(dict.fromkeys(_PARAM.findall(query)))
    numbered = _PARAM.sub(lambda m: f"${names.index(m[1]) + 1}", query)
    values = _values(query, run_id)
    with psycopg.connect(url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE pinned AS {numbered}")  # type: ignore[arg-type]
        args = ", ".join(psycopg.sql.quote(values[n]) if isinstance(values[n], str) else str(values[n]) for n in names)
        plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN EXECUTE pinned({args})").fetchall())  # type: ignore[arg-type]
    assert "Subplans Removed" in plan, plan
    assert all(len(parts) == 1 for parts in _scanned(plan).values()), plan


RANGED = ["history_forget_runs", "history_forget_records"]


@pytest.mark.parametrize("name", RANGED)
def test_retiring_a_partition_reads_its_runs_and_their_records_by_range_of_id(
    filled: tuple[str, str], name: str
) -> None:
    """Retention forgets a partition's runs by the primary key's range, and their records by their index on
    run_id, never reading all the runs (or all the expired ones)."""
    url, run_id = filled
    query = load_queries("postgres")[name]
    lo, hi = run_id, id_floor("run", id_millis(run_id) + 86_400_000)
    values = {"lo": lo, "hi": hi, "cutoff": 0}
    with psycopg.connect(url) as conn:
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, values).fetchall())
    assert "Seq Scan on lockgate_runs " not in plan and "Seq Scan on lockgate_messages " not in plan, plan
    assert "hashed SubPlan" not in plan, plan  # a parent is looked up by its id, not among every live run
    assert re.search(r"Scan (using|on) lockgate_runs_pkey", plan), plan
    if name == "history_forget_records":
        assert re.search(r"Scan (using|on) lockgate_messages_run", plan), plan


def test_the_run_selection_reads_only_runs_older_than_the_partitions(filled: tuple[str, str]) -> None:
    """Runs created in a partition of one interval are not read one by one: the selection of expired runs
    stops at the oldest (created_before), by the by-status index."""
    url, run_id = filled
    query = load_queries("postgres")["ended_before"]
    first = min(id_millis(run_id) / 1000 - 86400 * (DAYS // 2), time.time())
    values = {"cutoff": time.time() + DAYS * 86400, "created_before": first, "limit": 500}
    with psycopg.connect(url) as conn:
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN ANALYZE " + query, values).fetchall())
    assert "Seq Scan on lockgate_runs " not in plan, plan
    assert re.search(r"Index Cond: .*created_at < ", plan), plan


@pytest.mark.parametrize(("name", "behind"), [("stream_tail", 5), ("stream_tail", None), ("stream_last_id", 0)])
def test_every_run_s_new_chunks_are_read_by_each_partition_s_index_on_id(
    filled: tuple[str, str], name: str, behind: int | None
) -> None:
    """The readers of every run's new chunks follow the id across the partitions: each partition's index on
    it (an index probe per partition, a few dozen), never a scan of one; a reader far behind (``behind``
    None: from the first) has them merged in order, not every chunk sorted."""
    url, _ = filled
    query = load_queries("postgres")[name]
    with psycopg.connect(url) as conn:
        (top,) = conn.execute("SELECT max(id) FROM lockgate_stream_chunks").fetchone() or (0,)
        values = {"after": 0 if behind is None else top - behind, "limit": 100}
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN ANALYZE " + query, values).fetchall())
    # (the empty first and default partitions here are read as they are: no pages)
    assert not re.search(r"Seq Scan on lockgate_stream_chunks_p\d{12}", plan), plan
    indexed = re.findall(r"Index (?:Only )?Scan (?:Backward )?using lockgate_stream_chunks_p\d+_pkey", plan)
    assert len(indexed) >= DAYS, plan  # every filled partition, by its index on id
    if behind is None:
        assert "Merge Append" in plan and "Sort  (" not in plan, plan  # a merge, no Sort node


LEDGER_LOOKUPS = {
    "ledger_for_ticket": lambda run_id: {"ticket": f"tkt_{run_id}"},
    "ledger_for_pending": lambda run_id: {"pending_id": f"pnd_{run_id}"},
    "ledger_for_tickets": lambda run_id: {"tickets": json.dumps([f"tkt_{run_id}"])},
    "ledger_for_pendings": lambda run_id: {"ids": json.dumps([f"pnd_{run_id}"])},
}


@pytest.mark.parametrize("name", sorted(LEDGER_LOOKUPS))
def test_a_start_s_decisions_are_read_by_each_ledger_partition_s_index(filled: tuple[str, str], name: str) -> None:
    """The ledger is partitioned by time, not by ticket: a start's decisions (a ticket's, a parked row's) are
    looked up by each partition's index (a probe per partition, a few dozen), never a scan of one."""
    url, run_id = filled
    query = load_queries("postgres")[name]
    with psycopg.connect(url) as conn:
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, LEDGER_LOOKUPS[name](run_id)).fetchall())
    assert not re.search(r"Seq Scan on lockgate_ledger_p\d{12}", plan), plan
    assert len(re.findall(r"Scan (?:using \S+ )?on lockgate_ledger_p\d{12}", plan)) >= DAYS, plan


@pytest.mark.parametrize("name", ["admissions_per_bucket", "flow_ledger"])
def test_the_ledger_since_a_moment_reads_the_partitions_since_then(filled: tuple[str, str], name: str) -> None:
    """The dashboard's and flow()'s reads of the decisions since a moment prune to the partitions after it."""
    url, run_id = filled
    query = load_queries("postgres")[name]
    since = id_millis(run_id) / 1000 + 60
    values = {"since": since, "width": 60, "workflow": None}
    with psycopg.connect(url) as conn:
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, values).fetchall())
    scanned = set(re.findall(r"on (lockgate_ledger_p\d{12})", plan))
    assert 1 <= len(scanned) <= DAYS // 2 + 1, plan  # the middle day and those after it, not the older ones


def test_retention_deletes_no_decision_of_a_ledger_partition_one_by_one(filled: tuple[str, str]) -> None:
    """Past retention, a ledger partition is dropped whole; the decisions deleted one by one are those
    older than every partition of one interval (store/history.py ledger_before), and no partition of one
    interval is read for them."""
    url, _ = filled
    query = load_queries("postgres")["forget_ledger"]
    with psycopg.connect(url) as conn:
        (first,) = conn.execute(
            "SELECT min(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''([^'']*)''\\)')::float8)"
            " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'lockgate_ledger'::regclass AND c.relname ~ '_p[0-9]{12}$'"
        ).fetchone() or (0.0,)
        plan = "\n".join(
            str(r[0]) for r in conn.execute("EXPLAIN " + query, {"cutoff": first, "limit": 500}).fetchall()
        )
    assert not re.search(r"on lockgate_ledger_p\d{12}", plan), plan


def test_a_parked_start_finds_its_arrival_s_decision_in_one_ledger_partition(filled: tuple[str, str]) -> None:
    """A parked row's seq is its arrival's ledger id, looked up as the row is written (insert_pending_rows):
    by the parked row's id and the arrival's time, so that even a prepared statement's generic plan reads
    one partition of the ledger, not each."""
    url, run_id = filled
    lookup = "SELECT l.id FROM lockgate_ledger l WHERE l.pending_id = %(id)s AND l.at = %(first_at)s"
    assert f"({lookup})" in load_queries("postgres")["insert_pending_rows"]
    with psycopg.connect(url) as conn:
        pending_id, at = conn.execute(
            "SELECT pending_id, at FROM lockgate_ledger WHERE pending_id IS NOT NULL AND run_id >= %s"
            " ORDER BY run_id LIMIT 1",
            (run_id,),
        ).fetchone() or (None, None)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        prepared = lookup.replace("%(id)s", "$1").replace("%(first_at)s", "$2")
        conn.execute(f"PREPARE lookup (text, float8) AS {prepared}")  # type: ignore[arg-type]
        call = f"EXECUTE lookup('{pending_id}', {at!r})"
        plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN {call}").fetchall())  # type: ignore[arg-type]
        found = conn.execute(call).fetchone()  # type: ignore[arg-type]
    assert found is not None, plan
    assert "Subplans Removed" in plan, plan
    assert len(re.findall(r"on lockgate_ledger_\w+", plan)) == 1, plan


# -- domain events, deliveries and schedule firings: partitioned by their own time (migrations 0053-0055) ------


@pytest.fixture(scope="module")
def events_filled(filled: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    """The same database's events, deliveries and firings (``history_fill._fill_events``): its dated partitions'
    starts, and a delivery and a firing of the middle day."""
    url, _ = filled
    with psycopg.connect(url, autocommit=True) as conn:
        starts = event_partition_starts(conn)
        assert len(starts) >= DAYS
        middle = starts[len(starts) // 2]
        delivery = conn.execute(
            "SELECT id, created_at, event_id FROM lockgate_deliveries WHERE created_at >= %s ORDER BY created_at"
            " LIMIT 1",
            (middle,),
        ).fetchone()
        firing = conn.execute(
            "SELECT id, scheduled_at, schedule FROM lockgate_schedule_firings WHERE scheduled_at >= %s"
            " ORDER BY scheduled_at LIMIT 1",
            (middle,),
        ).fetchone()
    assert delivery is not None and firing is not None
    return url, {
        "first": starts[0],
        "delivery": delivery[0],
        "created_at": delivery[1],
        "event_id": delivery[2],
        "firing": firing[0],
        "scheduled_at": firing[1],
        "schedule": firing[2],
    }


_TIMED = re.compile(r"Scan(?: using \S+)? on (lockgate_(?:events|deliveries|schedule_firings)_\w+)")


def _explain(url: str, query: str, values: dict[str, Any], *, analyze: bool = False) -> str:
    with psycopg.connect(url) as conn:
        head = "EXPLAIN ANALYZE " if analyze else "EXPLAIN "
        return "\n".join(str(r[0]) for r in conn.execute(head + query, values).fetchall())  # type: ignore[arg-type]


def _timed_values(query: str, known: dict[str, Any]) -> dict[str, Any]:
    given: dict[str, Any] = {
        "id": known["delivery"],
        "created_at": known["created_at"],
        "event_id": known["event_id"],
        "now": time.time(),
        "status": "started",
        "limit": 100,
        "triggers": json.dumps(["on-paid"]),
        "workflow": "w",
        "idempotency_key": "key-none",
        "names": json.dumps(["s1", "s2"]),
        "schedule": known["schedule"],
    }
    return {name: given.get(name) for name in _PARAM.findall(query)}


ONE_PARTITION = {
    "settle_delivery": ("lockgate_deliveries_", {}),
    "mark_event_swept": ("lockgate_events_", {"id": "event_id", "occurred_at": "created_at", "problem": None}),
}


@pytest.mark.parametrize("name", sorted(ONE_PARTITION))
def test_settling_a_delivery_or_sweeping_an_event_reads_its_partition_alone(
    events_filled: tuple[str, dict[str, Any]], name: str
) -> None:
    """A delivery is settled, an event marked swept, by its id and its time (a delivery's is its event's): one
    partition, planned for its values or as a prepared statement's generic plan."""
    url, known = events_filled
    table, renamed = ONE_PARTITION[name]
    query = load_queries("postgres")[name]
    values = _timed_values(query, known)
    values.update({k: None if v is None else known[v] for k, v in renamed.items()})
    scanned = set(_TIMED.findall(_explain(url, query, values)))
    assert len(scanned) == 1 and all(n.startswith(table + "p") for n in scanned), scanned
    names = list(dict.fromkeys(_PARAM.findall(query)))
    numbered = _PARAM.sub(lambda m: f"${names.index(m[1]) + 1}", query)
    with psycopg.connect(url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE pinned AS {numbered}")  # type: ignore[arg-type]
        args = ", ".join("NULL" if values[n] is None else psycopg.sql.quote(values[n]) for n in names)
        plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN EXECUTE pinned({args})").fetchall())  # type: ignore[arg-type]
    assert "Subplans Removed" in plan, plan
    # (a DELETE or UPDATE still names every partition as a target, PostgreSQL 15: only scans count)
    assert len({n for n in _TIMED.findall(plan) if n.startswith(table)}) == 1, plan


PROBED = ["pending_deliveries", "started_delivery_by_key", "unswept_events", "get_domain_event", "list_deliveries"]
FIRING_PROBES = ["firings_open", "firings_live_of", "firing_update", "firing_take", "firings_live"]


@pytest.mark.parametrize("name", PROBED + FIRING_PROBES)
def test_the_fan_out_cancel_on_and_firing_reads_probe_each_partition_s_index(
    events_filled: tuple[str, dict[str, Any]], name: str
) -> None:
    """What no time names — a pending delivery, a key's started delivery, an event unswept or by id, a live firing
    or one by id — is looked up by each partition's index (partial where the rows looked for are few: a probe per
    partition, a few dozen at the defaults), never a scan of one."""
    url, known = events_filled
    query = load_queries("postgres")[name]
    values = _timed_values(query, known)
    if name.startswith("firing"):
        values.update({k: v for k, v in {"id": known["firing"], "expect": "claimed"}.items() if k in values})
    writes = query.lstrip().upper().startswith(("UPDATE", "DELETE", "INSERT"))
    plan = _explain(url, query, values, analyze=not writes)  # a write is planned, not run: the fill stays
    assert not re.search(r"Seq Scan on lockgate_(?:events|deliveries|schedule_firings)_p\d{12}", plan), plan
    assert len({n for n in _TIMED.findall(plan) if re.search(r"_p\d{12}$", n)}) >= 1, plan


@pytest.mark.parametrize(
    ("name", "table"),
    [
        ("forget_domain_events", "lockgate_events"),
        ("forget_deliveries", "lockgate_deliveries"),
        ("firings_forget", "lockgate_schedule_firings"),
    ],
)
def test_retention_deletes_none_of_their_dated_partitions_rows_one_by_one(
    events_filled: tuple[str, dict[str, Any]], name: str, table: str
) -> None:
    """Past retention their partitions are retired whole; what is deleted one by one is older than every
    partition of one interval (store/timed.py before), and no partition of one interval is read for it."""
    url, known = events_filled
    query = load_queries("postgres")[name]
    values = {"cutoff": known["first"], "before": known["first"], "limit": 500}
    plan = _explain(url, query, values)
    assert not re.search(rf"on {table}_p\d{{12}}", plan), plan
