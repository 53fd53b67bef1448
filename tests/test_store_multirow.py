"""Multi-row statements: one-row VALUES queries rewritten for bursts, per dialect."""

from __future__ import annotations

import re
import sqlite3

import pytest

from lockgate.store.multirow import MultiRow
from lockgate.store.sql_files import load_queries


def test_rows_travel_in_power_of_two_statements_in_order() -> None:
    form = MultiRow("q", "INSERT INTO t (a, b) VALUES (:a, :b) RETURNING a;", dialect="sqlite")
    rows = [{"a": i, "b": -i} for i in range(300)]
    statements = form.statements(rows)
    assert [len(params) // 2 for _, params in statements] == [256, 32, 8, 4]
    assert [p for _, params in statements for p in params] == [v for i in range(300) for v in (i, -i)]
    sql, _ = statements[-1]
    assert sql == "INSERT INTO t (a, b) VALUES (?, ?),(?, ?),(?, ?),(?, ?) RETURNING a"


def test_the_rewritten_statement_inserts_every_row_and_returns_them() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    form = MultiRow(
        "q", "INSERT INTO t (a, b) VALUES (:a, :b) ON CONFLICT (a) DO NOTHING RETURNING a;", dialect="sqlite"
    )
    returned = []
    rows = [{"a": i % 70, "b": str(i)} for i in range(100)]  # the last 30 conflict with earlier rows
    for sql, params in form.statements(rows):
        returned += [r[0] for r in conn.execute(sql, params).fetchall()]
    assert sorted(returned) == list(range(70))
    assert conn.execute("SELECT b FROM t WHERE a = 5").fetchone() == ("5",)


def test_postgres_placeholders_and_the_parameter_ceiling() -> None:
    names = ", ".join(f"%(c{i})s" for i in range(300))
    form = MultiRow("q", f"INSERT INTO t VALUES ({names})", dialect="postgres")
    statements = form.statements([{f"c{i}": i for i in range(300)}] * 500)
    assert max(len(params) for _, params in statements) <= 65535
    assert sum(len(params) for _, params in statements) == 300 * 500
    sql, params = statements[0]
    numbers = [int(n) for n in re.findall(r"\$(\d+)", sql)]
    assert "%(" not in sql and numbers == list(range(1, len(params) + 1))  # the server's own numbered form


def test_postgres_literal_percent_is_sent_as_one() -> None:
    form = MultiRow("q", "INSERT INTO t (a, b) VALUES (%(a)s, 'x%%' || %(b)s)", dialect="postgres")
    [(sql, params)] = form.statements([{"a": 1, "b": "p"}, {"a": 2, "b": "q"}])
    assert sql == "INSERT INTO t (a, b) VALUES ($1, 'x%' || $2),($3, 'x%' || $4)" and params == [1, "p", 2, "q"]


def test_queries_it_cannot_rewrite_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'q' has no VALUES"):
        MultiRow("q", "UPDATE t SET a = :a", dialect="sqlite")
    with pytest.raises(ValueError, match="'q' has parameters outside its VALUES group"):
        MultiRow("q", "INSERT INTO t (a) VALUES (:a) ON CONFLICT (a) DO UPDATE SET b = :b", dialect="sqlite")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_the_queries_bursts_use_can_be_rewritten(dialect: str) -> None:
    queries = load_queries(dialect)
    for name in ("insert_run", "insert_event", "insert_ledger", "insert_ledger_rows", "insert_pending_rows"):
        assert MultiRow(name, queries[name], dialect=dialect).names


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_loaded_queries_carry_no_comment_lines(dialect: str) -> None:
    """Comments document the SQL files; what a store rewrites, sends or inspects is SQL alone."""
    for name, sql in load_queries(dialect).items():
        assert not any(line.lstrip().startswith("--") for line in sql.splitlines()), name
    assert load_queries(dialect)["window_nth"].startswith("SELECT at FROM lockgate_window_hits")
