"""PostgreSQL databases for tests: one template per session, one copy per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_ADMIN_URL = os.environ.get("LOCKGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pg_database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database for one test; skipped (or failed under CI) when PostgreSQL is unusable."""
    try:
        import lockgate.store.postgres  # noqa: F401
    except ImportError:
        if _ci():
            pytest.fail("the PostgreSQL store is not importable")
        pytest.skip("the PostgreSQL store is not available")
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            name = f"lockgate_t_{uuid.uuid4().hex[:12]}"
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        if _ci():
            pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is unreachable under CI: {exc}")
        pytest.skip(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
