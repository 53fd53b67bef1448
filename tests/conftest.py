"""Shared fixtures: every store-backed test runs on SQLite and on PostgreSQL.

Each test's store is a migrated copy of a template built once per test process (per xdist
worker): a SQLite test copies the template's file (``tests/apps/sqlite_copies.py``), a
PostgreSQL test gets a database of its own made from a template database (``tests/pg.py``).
Opening the copy still reads and checks its schema version as any store's open does; the
tests of migration itself build their databases from scratch. Where no PostgreSQL server
answers, its tests are skipped, except under ``CI=true``, where that fails the run.
``LOCKGATE_TEST_STORES`` (e.g. ``sqlite``) narrows the store kinds for a quick local run.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lockgate import App, Engine
from lockgate.testing import TestEnv

from .apps.sqlite_copies import copy_store
from .cluster.harness import Cluster
from .ordering import longest_first
from .pg import PgProxy, in_ci, pg_database_url, pg_template
from .pgserver import PrivatePostgres, Replicas, private_postgres, replicas

__all__ = ["LONG", "STORES", "in_ci", "pg_template"]

# LOCKGATE_TORTURE=long: the fault tests' long versions (every variant, more fuzzed examples).
LONG = os.environ.get("LOCKGATE_TORTURE", "") == "long"


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of this session's own (tests/pgserver.py), to restart and kill at will."""
    with private_postgres() as server:
        yield server


@pytest.fixture
async def proxy() -> AsyncIterator[PgProxy]:
    """A relay to PostgreSQL the test can cut (requested before ``cluster``, it is torn down after it)."""
    relay = PgProxy()
    await relay.start()
    yield relay
    await relay.stop()


@pytest.fixture(scope="session")
def replica_pair() -> Iterator[Replicas]:
    """A private primary and its streaming standby (tests/pgserver.py), shared by the session's tests.

    A failover swaps their parts and uses the standby up: a test calls ``ensure_standby()`` first.
    """
    with replicas() as servers:
        yield servers


KNOWN_STORES = ("sqlite", "postgres")


def _stores() -> list[str]:
    wanted = [s.strip() for s in os.environ.get("LOCKGATE_TEST_STORES", ",".join(KNOWN_STORES)).split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(KNOWN_STORES))
    if unknown:
        raise pytest.UsageError(f"LOCKGATE_TEST_STORES: unknown store kind(s) {unknown}; known: {list(KNOWN_STORES)}")
    return wanted


STORES = _stores()


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh store of each kind, migrated and holding nothing yet (a copy of a template)."""
    if store_kind == "sqlite":
        yield copy_store(tmp_path / "lockgate.db")
    else:
        yield from pg_database_url(request)


@pytest.fixture
def make_engine(store_url: str) -> object:
    """``async with make_engine(app, **options) as engine``: a real engine on the test store."""

    def make(app: App, **options: object) -> Engine:
        opts: dict[str, object] = {"poll_interval": 0.05, "lease": "2s"}
        opts.update(options)
        return Engine(app, store_url, **opts)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def env_factory(store_url: str) -> AsyncIterator[object]:
    """``async with env_factory(app) as env``: a ``TestEnv`` (fake clock) on the test store."""

    def make(app: App, **options: object) -> TestEnv:
        return TestEnv(app, store=store_url, **options)  # type: ignore[arg-type]

    yield make


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own (for the tests that are about PostgreSQL)."""
    yield from pg_database_url(request)


@pytest.fixture
async def cluster(pg_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Worker processes of ``tests/cluster/harness.py`` over ``pg_url``, stopped after the test."""
    group = Cluster(pg_url, tmp_path)
    await group.setup()
    try:
        yield group
    finally:
        await group.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start filling the plan tests' shared history (tests/history_fill.py) while the tests before them run."""
    if any(item.path.name == "test_history_plans.py" for item in session.items):
        from .history_fill import prefill

        prefill()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, start each on its share of the longest tests (tests/ordering.py: made for the test
    command's ``--dist worksteal``, whose mode a worker is not told; under another mode only the order moves)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        items[:] = longest_first(items, int(workerinput["workercount"]))
