"""What every ``lockgate`` command shares: options, argument types, app loading, the async runner.

Option decorators (``store_option``, ``format_option``, ``app_option``) give each command the
same spelling, environment variables and validation, so a new command module only stacks them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import sysconfig
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..app import App
from ..durations import to_seconds
from ..errors import ReadStoreRefused
from ..facades import Client, Engine
from ..facades.client import DEFAULT_STORE
from ..inspect import Inspector, connect, locate, open_read_store, refuse_dialects
from ..inspect.inspector import MAX_COUNT  # the largest count (--limit, --batch, ...) a command takes
from ..store import Store, open_store

__all__ = [
    "APP_ENV",
    "READ_STORE_ENV",
    "STORE_ENV",
    "DurationType",
    "InstantType",
    "JsonType",
    "SinceType",
    "app_option",
    "check_store",
    "count_type",
    "existing_store",
    "format_option",
    "inspector_of",
    "load_app",
    "open_client",
    "open_inspector",
    "open_reads",
    "read_store_beside",
    "read_store_option",
    "run_async",
    "sqlite_path",
    "store_option",
]

STORE_ENV = "LOCKGATE_STORE"
READ_STORE_ENV = "LOCKGATE_READ_STORE"
READ_STORE_HINT = "'--read-store'"
APP_ENV = "LOCKGATE_APP"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# -- argument types ----------------------------------------------------------------------

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # click < 8.2 has no type parameters at run time
    _ParamType = click.ParamType


class JsonType(_ParamType):
    """A JSON document given inline, or ``@path`` to read it from a file."""

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        text = value
        if value.startswith("@"):
            try:
                text = Path(value[1:]).read_text()
            except OSError as exc:
                self.fail(f"cannot read {value[1:]!r}: {exc.strerror}", param, ctx)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {value!r}", param, ctx)


def count_type(min: int = 1, max: int = MAX_COUNT) -> click.IntRange:
    """A whole number from ``min`` to ``max``: a larger one is refused as bad usage, never sent to a database."""
    return click.IntRange(min=min, max=max)


class DurationType(_ParamType):
    """A duration: seconds (``2.5``) or text such as ``500ms``, ``15s``, ``1h30m``; converted to seconds."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return to_seconds(value, what="duration")
        except ValueError as exc:
            self.fail(str(exc).removeprefix("duration: "), param, ctx)


class InstantType(_ParamType):
    """An ISO 8601 instant (``2025-01-01T12:00:00Z``); one without an offset is taken as UTC."""

    name = "ISO-TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        parsed = self.instant(value)
        if parsed is None:
            self.fail(f"not an ISO 8601 time (e.g. 2025-01-01T12:00:00Z): {value!r}", param, ctx)
        return parsed

    @staticmethod
    def instant(value: Any) -> datetime | None:
        """``value`` as an aware datetime (UTC when it has no offset), or ``None`` if it is not ISO 8601."""
        if isinstance(value, datetime):
            parsed = value
        else:
            try:
                parsed = datetime.fromisoformat(str(value))
            except ValueError:
                return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class SinceType(InstantType):
    """An instant: ISO 8601 (UTC without an offset), or a duration meaning that long ago (``90m``)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        parsed = self.instant(value)
        if parsed is not None:
            return parsed
        try:
            ago = to_seconds(str(value), what="time")
        except ValueError:
            self.fail(f"neither an ISO 8601 time nor a duration ago (2h, 30m): {value!r}", param, ctx)
        return datetime.now(UTC) - timedelta(seconds=ago)


# -- shared options ------------------------------------------------------------------------


def check_store(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        locate(value)  # parses and validates the URL; connects to nothing
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    except ImportError:
        raise click.BadParameter(f"no store is available for {value!r} in this installation", ctx, param) from None
    return value


def store_option(fn: F) -> F:
    """``--store URL`` (env ``LOCKGATE_STORE``, default ``sqlite:///lockgate.db``)."""
    return click.option(
        "--store",
        envvar=STORE_ENV,
        default=DEFAULT_STORE,
        show_default=True,
        show_envvar=True,
        callback=check_store,
        metavar="URL",
        help="Store URL: sqlite:///path.db or postgresql://...",
    )(fn)


def check_read_store(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else check_store(ctx, param, value)


def read_store_beside(store: str, read_store: str | None) -> None:
    """Refuse ``--read-store`` on SQLite, or beside a ``--store`` on SQLite, before anything is opened."""
    if read_store is not None:
        try:
            refuse_dialects(locate(store).dialect, locate(read_store).dialect, "--read-store")
        except ReadStoreRefused as exc:
            raise click.BadParameter(exc.problem, param_hint=READ_STORE_HINT) from None


def read_store_option(fn: F) -> F:
    """``--read-store URL`` (env ``LOCKGATE_READ_STORE``): a streaming standby the HTTP reads are served from."""
    return click.option(
        "--read-store",
        envvar=READ_STORE_ENV,
        show_envvar=True,
        callback=check_read_store,
        metavar="URL",
        help="A streaming standby of --store (PostgreSQL) to serve the dashboard, the HTTP reads and /metrics "
        "from; verbs and what must show them stay on --store.",
    )(fn)


def format_option(fn: F) -> F:
    """``--format json|table``: one JSON document on stdout, or tables for people."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="json: one machine-readable document on stdout.",
    )(fn)


def app_option(
    *, required: bool, purpose: str = "validates the payload against the declared models"
) -> Callable[[F], F]:
    """``--app MODULE:APP`` (env ``LOCKGATE_APP``): the registry a command needs; ``purpose`` says why when optional."""
    why = "" if required else f" (optional: {purpose})"

    def decorate(fn: F) -> F:
        return click.option(
            "--app",
            "app_ref",
            envvar=APP_ENV,
            show_envvar=True,
            required=required,
            metavar="MODULE:APP",
            help=f"The lockgate App to load{why}.",
        )(fn)

    return decorate


# -- loading the app -------------------------------------------------------------------------


# lockgate's own frames and the import machinery's are never the user's to read
_NOT_THEIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    os.path.dirname(importlib.__file__),
    "<frozen ",
)


class UserCodeFailed(click.ClickException):
    """The user's own code raised while a command ran it: one line, then the frames of their code alone."""

    def __init__(self, what: str, exc: BaseException) -> None:
        frames = [
            frame for frame in traceback.extract_tb(exc.__traceback__) if not frame.filename.startswith(_NOT_THEIRS)
        ]
        libraries = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})
        while frames and frames[-1].filename.startswith(libraries):
            frames.pop()  # below their last line, in a library they called: the error line says what it raised
        message = f"{what} failed: {type(exc).__name__}: {exc}"
        if frames:
            listing = "".join(traceback.format_list(frames)).rstrip()
            message += f"\nTraceback of your code (most recent call last):\n{listing}"
        super().__init__(message)


def load_app(ref: str | None, *, param_hint: str = "'--app'") -> App:
    """The ``App`` named by ``MODULE:ATTR`` (``ATTR`` defaults to ``app``); an empty ``App`` for ``None``.

    The current directory is importable, as it is for ``python -m``.
    """
    if ref is None:
        return App()
    module_name, _, attr = ref.partition(":")
    attr = attr or "app"
    if not module_name or not all(part.isidentifier() for part in [*module_name.split("."), *attr.split(".")]):
        raise click.BadParameter(
            f"expected MODULE:APP (e.g. myproject.workflows:app), got {ref!r}", param_hint=param_hint
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise click.BadParameter(f"cannot import module {module_name!r}", param_hint=param_hint) from None
        raise UserCodeFailed(f"importing {module_name!r}", exc) from None  # one of its own imports is missing
    except Exception as exc:
        raise UserCodeFailed(f"importing {module_name!r}", exc) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {attr!r}", param_hint=param_hint
            ) from None
    if not isinstance(obj, App):
        kind = "class" if isinstance(obj, type) else type(obj).__name__
        raise click.BadParameter(f"{ref!r} is a {kind}, not a lockgate App", param_hint=param_hint)
    return obj


# -- running ---------------------------------------------------------------------------------


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine to completion on a fresh event loop."""
    return asyncio.run(main)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


async def file_replaced(path: str, poll: float = 1.0) -> None:
    """Return once another file stands at ``path`` than the one there now (deleted, then made anew)."""
    first = _identity(path)
    while True:
        await asyncio.sleep(poll)
        now = _identity(path)
        if now is not None and now != first:
            return


def sqlite_path(url: str) -> str | None:
    """The database file a ``sqlite:`` URL names (``None`` for other stores and in-memory databases)."""
    return locate(url).path


def existing_store(url: str, *, writes: bool) -> Store:
    """The store at ``url``, to be opened only if it is a current lockgate database (nothing is
    created or migrated); without ``writes``, the database is opened read-only."""
    store = open_store(url)
    store.schema_mode = "check" if writes else "read"
    store.share_file = False  # a mistyped --store never writes into another application's file
    return store


@asynccontextmanager
async def open_client(app: App, store: str) -> AsyncIterator[Client]:
    """An open ``Client`` on an existing, current lockgate database: nothing is created or migrated, so
    that a mistyped ``--store`` is an error, not a new database nobody serves."""
    async with Client(app, existing_store(store, writes=True)) as client:
        client.source = "cli"  # what its starts and publishes record as their source
        yield client


@asynccontextmanager
async def open_inspector(app: App, store: str, *, writes: bool = False) -> AsyncIterator[Inspector]:
    """An ``Inspector`` on an existing, current lockgate database, read-only unless ``writes``."""
    async with connect(existing_store(store, writes=writes), app) as inspector:
        yield inspector


@asynccontextmanager
async def open_reads(client: Client, url: str | None) -> AsyncIterator[Inspector | None]:
    """The Inspector over ``--read-store`` (``None`` without one), checked against the client's store: a
    refusal is bad usage naming the option."""
    async with AsyncExitStack() as stack:
        reads = None
        if url is not None:
            try:
                reads = await stack.enter_async_context(open_read_store(client.inspector, url, field="--read-store"))
            except ReadStoreRefused as exc:
                raise click.BadParameter(exc.problem, param_hint=READ_STORE_HINT) from None
        yield reads


def inspector_of(client: Client | Engine) -> Inspector:
    """An ``Inspector`` on an open client's store, app and clock (a verb that reads before or after it acts)."""
    return client.inspector
