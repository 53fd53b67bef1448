"""Shared fixtures: every store-backed test runs on SQLite and on PostgreSQL.

PostgreSQL tests use a database of their own per test, copied from a template built
once per session. Where no server answers they are skipped, except under ``CI=true``,
where an unreachable database fails the run.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lockgate import App, Engine
from lockgate.testing import TestEnv

from .pg import pg_database_url


def _postgres_store_exists() -> bool:
    import importlib.util

    return importlib.util.find_spec("lockgate.store.postgres") is not None


STORES = ["sqlite", "postgres"] if _postgres_store_exists() else ["sqlite"]


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty store of each kind."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path}/lockgate.db"
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


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
