"""Write only where it belongs: read commands never create, migrate or write; a foreign SQLite file
is refused before anything is written; ``lockgate migrate`` and ``serve --no-migrate``."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate.cli import run
from lockgate.store.sql_files import migrations

from .pg import admin, pg_database_url

READS = [
    ["workflows", "list"],
    ["workflows", "show", "run_x"],
    ["workflows", "flow"],
    ["workflows", "why", "tkt_x"],
    ["workflows", "stats"],
    ["cluster", "status"],
]
LATEST = max(version for version, _, _ in migrations("sqlite"))


def lockgate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(argv))
    return code, out.getvalue(), err.getvalue()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another application's SQLite file."""
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.commit()
    return path


START = ["workflows", "start", "x", "--app", "lockgate.demo_app:app"]


@pytest.mark.parametrize("argv", [*READS, START, ["migrate"]])
def test_a_foreign_sqlite_file_is_refused_and_left_as_it_was(foreign: Path, argv: list[str]) -> None:
    before = _digest(foreign)
    code, _, err = lockgate(*argv, "--store", f"sqlite:///{foreign}")
    assert code == 1
    assert err == f"error: {foreign} is not a lockgate database (it holds other tables); nothing was written\n"
    assert _digest(foreign) == before
    assert sorted(p.name for p in foreign.parent.iterdir()) == ["app.db"]  # no -wal, no -journal


@pytest.mark.parametrize("argv", READS)
def test_a_read_command_on_a_missing_database_creates_nothing(tmp_path: Path, argv: list[str]) -> None:
    target = tmp_path / "typo" / "lockgate.db"
    code, _, err = lockgate(*argv, "--store", f"sqlite:///{target}")
    assert code == 1
    assert err.startswith(f"error: no lockgate database at {target} (run 'lockgate migrate --store ")
    assert list(tmp_path.iterdir()) == []


def test_read_commands_neither_migrate_nor_write(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    assert lockgate("migrate", "--store", f"sqlite:///{db}")[0] == 0
    with contextlib.closing(sqlite3.connect(db)) as conn:  # as a database made by an older lockgate
        conn.execute("DELETE FROM lockgate_migrations WHERE version = ?", (LATEST,))
        conn.commit()
    before = _digest(db)
    for argv in READS:
        code, _, err = lockgate(*argv, "--store", f"sqlite:///{db}")
        assert code == 1
        assert f"is missing migration(s) {LATEST:04d} of this lockgate's schema (version {LATEST}): run" in err
    assert _digest(db) == before
    with contextlib.closing(sqlite3.connect(db)) as conn:  # as a database of a newer lockgate
        conn.execute("INSERT INTO lockgate_migrations VALUES (?, 'x', 0), (?, 'y', 0)", (LATEST, LATEST + 1))
        conn.commit()
    code, _, err = lockgate("workflows", "list", "--store", f"sqlite:///{db}")
    assert code == 1 and f"holds migration(s) {LATEST + 1:04d} that this lockgate (schema version {LATEST})" in err
    assert f"is at schema version {LATEST + 1}" in err


def test_migrate_creates_a_database_and_says_its_version(tmp_path: Path) -> None:
    db = tmp_path / "new" / "lockgate.db"
    code, out, _ = lockgate("migrate", "--store", f"sqlite:///{db}")
    assert (code, out) == (0, f"created a lockgate database at version {LATEST}: sqlite:///{db}\n")
    assert lockgate("migrate", "--store", f"sqlite:///{db}")[0] == 0  # again: nothing to do
    assert lockgate("workflows", "list", "--store", f"sqlite:///{db}")[0] == 0


def test_a_read_command_opens_sqlite_read_only(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    assert lockgate("migrate", "--store", f"sqlite:///{db}")[0] == 0
    before = _digest(db)
    code, out, _ = lockgate("workflows", "list", "--store", f"sqlite:///{db}", "--format", "json")
    assert code == 0 and out.strip().startswith("{")
    assert _digest(db) == before


@pytest.mark.parametrize("under", ["file", "proc"])
def test_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path, under: str) -> None:
    (tmp_path / "f").write_text("in the way")
    target = tmp_path / "f" / "x.db" if under == "file" else Path("/proc/lockgate/x.db")
    code, _, err = lockgate("migrate", "--store", f"sqlite:///{target}")
    assert code == 1
    assert err.startswith(f"error: cannot create the folder of SQLite database {target}: ") and err.count("\n") == 1


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture
def empty_pg(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from pg_database_url(request, migrated=False)


@pytest.fixture
def reader(empty_pg: str) -> Iterator[str]:
    """A role that may read the lockgate tables of ``empty_pg`` (once migrated), and nothing more."""
    role = f"lockgate_reader_{uuid.uuid4().hex[:8]}"
    admin(f"CREATE ROLE {role} LOGIN")
    try:
        yield role
    finally:
        database = empty_pg.rsplit("/", 1)[1]
        admin(f'REVOKE ALL ON DATABASE "{database}" FROM {role}')
        with contextlib.suppress(Exception):
            admin(f"DROP ROLE {role}")


def test_postgres_read_commands_need_a_migrated_schema_and_never_write(empty_pg: str, reader: str) -> None:
    code, _, err = lockgate("workflows", "list", "--store", empty_pg)
    assert code == 1 and "no lockgate database at" in err and "lockgate migrate --store" in err
    code, _, err = lockgate("serve", "lockgate.demo_app:app", "--no-migrate", "--no-http", "--store", empty_pg)
    assert code == 1 and "no lockgate database at" in err
    assert lockgate("migrate", "--store", empty_pg)[0] == 0

    with psycopg.connect(empty_pg, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
    as_reader = empty_pg.replace("postgres@", f"{reader}@", 1)
    for argv in READS:
        code, _, err = lockgate(*argv, "--store", as_reader)
        assert code in (0, 1), err
        assert "permission denied" not in err and "read-only transaction" not in err, (argv, err)
