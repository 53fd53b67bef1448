"""How the PostgreSQL store tells failures apart: a lost server, a stale plan, a refusal; and what it says of them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import PoolTimeout

from ...errors import StoreError
from ..coalesce import Call
from .tx import Conn

__all__ = [
    "RETRIES",
    "StalePlan",
    "backoff",
    "cannot_connect",
    "connection_lost",
    "discarding_stale_plans",
    "disk_full",
    "fail",
    "first_line",
    "is_stale_plan",
    "redact",
    "refusal_error",
]

log = logging.getLogger("lockgate.store")
RETRIES = 5  # re-runs of a batch (or read) whose connection failed before COMMIT


class StalePlan(Exception):
    """A statement prepared on this connection no longer fits its table (another process migrated)."""


def is_stale_plan(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan must not change" in str(exc)


@contextlib.asynccontextmanager
async def discarding_stale_plans(conn: Conn) -> AsyncIterator[None]:
    """Close ``conn`` (the pool then replaces it) when its prepared statements went stale; raise ``StalePlan``."""
    try:
        yield
    except psycopg.Error as exc:
        if not is_stale_plan(exc):
            raise
        with contextlib.suppress(psycopg.Error):
            await conn.close()
        raise StalePlan(first_line(exc)) from exc


def refusal_error(exc: BaseException) -> BaseException:
    """What the writer of a refused op is told: its own exception, or a ``StoreError`` for SQL errors."""
    if isinstance(exc, psycopg.Error):
        error = StoreError(f"PostgreSQL refused the write: {first_line(exc)}")
        error.__cause__ = exc
        return error
    return exc


def fail(batch: list[tuple[Call, asyncio.Future[Any] | None]], error: StoreError) -> None:
    lost = 0
    for _, future in batch:
        if future is None:
            lost += 1
        elif not future.done():
            future.set_exception(error)
    if lost:
        log.warning("%d introspection write(s) lost: %s", lost, error)


def connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` means the server (or the way to it) is gone, rather than a transient conflict."""
    if isinstance(exc, PoolTimeout):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def disk_full(exc: BaseException) -> bool:
    """Whether the server refused for want of disk (SQLSTATE 53100): no retry mends it until space is freed."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == "53100"


def backoff(attempt: int) -> float:
    return float(min(2.0, 0.1 * 2**attempt))


_ATTEMPT = re.compile(r"^- host: '([^']*)', port: '([^']*)'.*?failed: (?:.*? failed: )?(.*)$")
_ONE = re.compile(r'connection to server at "([^"]*)"(?: \([^)]*\))?, port (\d+) failed: (.*)$')
_UNRESOLVED = "name not resolved"


def _hosts(where: str) -> list[str]:
    """``host:port`` of each host of the URL ``where``, in its order (libpq's default port where none is given)."""
    netloc = urlsplit(where).netloc.rpartition("@")[2]
    return [h if re.search(r":\d+$", h) else f"{h}:5432" for h in netloc.split(",")]


def cannot_connect(where: str, exc: BaseException) -> StoreError:
    """The one-line error of a failed connection; with several hosts, what each one said.

    A host whose name does not resolve is left out by the driver without a word when another
    one resolves: it is named too, so that the line names every host of the URL.
    """
    text = str(exc)
    attempts = [m.groups() for line in text.splitlines() if (m := _ATTEMPT.match(line.strip()))]
    if not attempts and (one := _ONE.search(first_line(exc))):
        attempts = [one.groups()]
    hosts = _hosts(where)
    if len(hosts) > 1 and (attempts or text.startswith("failed to resolve host")):
        said_by = {f"{host}:{port}": why.strip() for host, port, why in attempts}
        split = [h.rsplit(":", 1) for h in hosts]
        attempts = [(host, port, said_by.get(f"{host}:{port}", _UNRESOLVED)) for host, port in split]
    if len(attempts) < 2:
        return StoreError(f"cannot connect to PostgreSQL at {where}: {first_line(exc)}")
    said = "; ".join(f"{host}:{port} {why.strip()}" for host, port, why in attempts)
    if all("read-only" in why or "standby" in why for _, _, why in attempts):
        return StoreError(f"no primary among the hosts of {where} (each is a standby or read-only): {said}")
    return StoreError(f"no host of {where} could be used: {said}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def redact(url: str) -> str:
    """``url`` without its password, fit for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
