"""PostgreSQL databases for tests: one migrated template per session, one copy per test.

Copying a template (``CREATE DATABASE ... TEMPLATE``) is much cheaper than migrating a
fresh database for every test. Where no server answers, PostgreSQL tests are skipped,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, NoReturn

import pytest

PG_ADMIN_URL = os.environ.get("LOCKGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI (where PostgreSQL must be there)."""
    if in_ci():
        pytest.fail(f"{reason} (PostgreSQL is required under CI)")
    pytest.skip(reason)


def database_url(name: str) -> str:
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def admin(sql: str) -> None:
    """Run one statement on the admin database (autocommit: CREATE/DROP DATABASE need it)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def run_in_thread(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion on a loop of its own (fixtures here are synchronous)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="lockgate-pg-template")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


async def _migrate(url: str) -> None:
    from lockgate.store.postgres import PostgresStore

    store = PostgresStore(url)
    await store.open()
    await store.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """The name of this session's migrated template database."""
    try:
        import lockgate.store.postgres  # noqa: F401
    except ImportError as exc:
        unavailable(f"the PostgreSQL store is not importable: {exc}")
    name = f"lockgate_tpl_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        unavailable(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")
    try:
        run_in_thread(_migrate(database_url(name)))
        yield name
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_database_url(request: pytest.FixtureRequest, *, migrated: bool = True) -> Iterator[str]:
    """A database of this test's own, dropped afterwards: a copy of the session template, or empty."""
    template = request.getfixturevalue("pg_template")
    name = f"lockgate_t_{uuid.uuid4().hex[:12]}"
    try:
        admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"' if migrated else f'CREATE DATABASE "{name}"')
    except Exception as exc:
        unavailable(f"cannot create a test database on {PG_ADMIN_URL}: {exc}")
    try:
        yield database_url(name)
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
