"""``lockgate serve MODULE:APP``: run workers and sweeps until SIGINT or SIGTERM.

The engine (dispatcher, lease renewal, sweeps) opens first; then every service from
``build_services`` runs beside it. On the first SIGINT/SIGTERM the services are cancelled
and ``Engine.close()`` stops local executions and releases their leases, so another
worker can take them at once. A second signal interrupts the shutdown itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import click

from ..app import App
from ..callbacks import check_base_url
from ..durations import format_seconds
from ..errors import InvalidArgument, InvalidHistoryOption, UnknownWorkflow
from ..facades import Engine
from ..facades.engine import MIN_RETENTION
from ..history import INTERVALS, partition_interval
from ..http import (
    DEFAULT_BIND,
    READ_TOKEN_ENV,
    TOKEN_ENV,
    AccessPolicy,
    bind_refusal,
    bind_socket,
    create_app,
    parse_bind,
    serve_http,
)
from ..inspect import Inspector
from ..routing import Labels, Selection, taken
from ..store import open_store
from .common import (
    DurationType,
    count_type,
    load_app,
    open_reads,
    read_store_beside,
    read_store_option,
    run_async,
    store_option,
)
from .groups import cli
from .output import display_url

__all__ = [
    "BindRefused",
    "ServeConfig",
    "Service",
    "access_policy",
    "build_services",
    "check_http_bind",
    "cluster_reporter",
    "display_url",
    "http_options",
    "serve_app",
]

log = logging.getLogger("lockgate.serve")


@dataclass(frozen=True)
class ServeConfig:
    """What ``lockgate serve`` was asked to run."""

    app_ref: str
    store: str
    max_concurrent_runs: int
    lease: float
    retention: float | None
    event_retention: float | None = 30 * 86400.0  # domain events (docs/events.md)
    delivery_retention: float | None = 30 * 86400.0  # their deliveries: a custom key's dedupe window
    http: tuple[str, int] | None = None  # where the HTTP API listens (None: not served)
    http_required: bool = True  # False (the default bind): a taken port leaves the workers running without it
    policy: AccessPolicy | None = None  # the API's tokens (None: from the environment)
    cluster_metrics: str = "auto"  # which replica serves the store-wide gauges on /metrics (cluster_reporter)
    migrate: bool = True  # False: refuse a store whose schema is not current instead of migrating it
    grace: float = 30.0  # at shutdown, how long running step attempts may finish before their runs are released
    public_url: str | None = None  # the base of callback tokens' URLs (None: LOCKGATE_PUBLIC_URL, if set)
    read_store: str | None = None  # a streaming standby the HTTP reads, the dashboard and /metrics read from
    history_partition: str | None = None  # what one partition of the run history spans (docs/history.md)
    selection: Selection = field(default_factory=Selection)  # --labels, --workflows, --exclude (routing.py)
    unroutable_after: float = 60.0  # due runs no live worker takes this long are reported


@dataclass(frozen=True)
class Service:
    """A long-running coroutine that ``serve`` runs beside the engine (cancelled at shutdown)."""

    name: str
    run: Callable[[], Coroutine[Any, Any, None]]


def build_services(engine: Engine, config: ServeConfig, reads: Inspector | None = None) -> list[Service]:
    """The services to run beside the engine's own workers and sweeps.

    This is where surfaces that need an open engine join ``serve`` (the HTTP inspect API; its reads
    from ``reads``, the read store's Inspector, when there is one).
    A service that ends or fails before shutdown stops the whole process with exit code 1.
    """
    if config.http is None:
        return []
    host, port = config.http
    api = create_app(engine.client, policy=config.policy, cluster_metrics=cluster_reporter(engine, config), reads=reads)

    async def run() -> None:
        try:
            sock = bind_socket(host, port)
        except OSError as exc:
            if config.http_required:
                raise
            # several workers on one host: the first serves the API, the others run without it
            log.warning("HTTP API not served: cannot listen on %s:%d (%s); pass --http or --no-http", host, port, exc)
            await asyncio.Event().wait()
            return
        where = f"http://{host}:{port}"
        log.info("HTTP API on %s/api/v1, dashboard on %s/ui (metrics on /metrics)", where, where)
        await serve_http(api, host, port, sock)

    return [Service("http", run)]


def cluster_reporter(engine: Engine, config: ServeConfig) -> bool | Callable[[], bool]:
    """Whether this replica's ``/metrics`` serves the store-wide gauges: ``on``, ``off``, or ``auto``.

    ``auto``: always on SQLite; on PostgreSQL only the replica holding the drain lease (one at
    a time), so that a sum over replicas counts the store once.
    """
    if config.cluster_metrics != "auto":
        return config.cluster_metrics == "on"
    if engine.store.dialect == "sqlite":
        return True
    return lambda: engine.drainer.holds_lease


class BindRefused(click.ClickException):
    """The HTTP API may not listen where it was asked to (exit code 2)."""

    exit_code = 2


def check_http_bind(bind: str | None, policy: AccessPolicy | None = None) -> tuple[str, int] | None:
    """``--http HOST:PORT`` checked: ``BindRefused`` for a malformed one, or a non-loopback one without a token."""
    if bind is None:
        return None
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        raise BindRefused(f"--http: {exc}") from exc
    why = bind_refusal(host, policy or AccessPolicy.from_env())
    if why is not None:
        raise BindRefused(why)
    return host, port


def access_policy(token_file: str | None, read_token_file: str | None) -> AccessPolicy:
    """The API's tokens from ``--token-file`` / ``--read-token-file``, else the environment."""
    try:
        return AccessPolicy.load(token_file, read_token_file)
    except ValueError as exc:
        hint = "'--token-file'" if token_file is not None and token_file in str(exc) else "'--read-token-file'"
        raise click.BadParameter(str(exc), param_hint=hint) from exc


def http_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--http HOST:PORT``, ``--no-http`` and the token files, shared by ``serve`` and ``inspect``."""
    fn = click.option(
        "--read-token-file",
        type=click.Path(dir_okay=False),
        help=f"A file holding the read-only token (instead of {READ_TOKEN_ENV}).",
    )(fn)
    fn = click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        help=f"A file holding the read-and-operate token (instead of {TOKEN_ENV}).",
    )(fn)
    fn = click.option("--no-http", is_flag=True, help="Do not serve the HTTP API.")(fn)
    return click.option(
        "--http",
        "http_bind",
        metavar="HOST:PORT",
        default=DEFAULT_BIND,
        show_default=True,
        help="Where the HTTP inspect API listens; off loopback it needs LOCKGATE_TOKEN or LOCKGATE_TOKEN_READ.",
    )(fn)


class RetentionType(DurationType):
    """A retention period (``30d``, ``12h``), at least a minute, or ``never`` (``None``)."""

    name = "DURATION|never"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | None:  # type: ignore[override]
        if value is None or (isinstance(value, str) and value.strip().lower() == "never"):
            return None
        seconds = super().convert(value, param, ctx)
        if seconds < MIN_RETENTION:
            self.fail(f"must be at least 1m or 'never', got {value!r}", param, ctx)
        return seconds


async def serve_app(app: App, config: ServeConfig) -> int:
    """Run until a stop signal; the exit code (1 if a service ended on its own)."""
    store = open_store(config.store)
    store.schema_mode = "migrate" if config.migrate else "check"
    store.share_file = False  # an application's file gets lockgate's tables from code, not from serve
    engine = Engine(
        app,
        store,
        max_concurrent_runs=config.max_concurrent_runs,
        lease=config.lease,
        retention=config.retention,
        event_retention=config.event_retention,
        delivery_retention=config.delivery_retention,
        public_url=config.public_url,
        labels=config.selection.labels,
        workflows=config.selection.workflows,
        exclude=config.selection.exclude,
        unroutable_after=config.unroutable_after,
        history_partition=config.history_partition,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()
        for s in (signal.SIGINT, signal.SIGTERM):  # a second signal interrupts a stuck shutdown
            loop.remove_signal_handler(s)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    failed: list[str] = []
    await engine.open()
    try:
        if store.created:
            log.info("created a new lockgate database at %s", display_url(config.store))
        log.info(
            "worker %s started (store %s, app %s: %d workflow(s), max %d concurrent runs, lease %gs, retention %s)",
            engine.worker_id,
            display_url(config.store),
            config.app_ref,
            len(app.definitions()),
            config.max_concurrent_runs,
            config.lease,
            "never" if config.retention is None else format_seconds(config.retention),
        )
        if not config.selection.default:
            takes = taken(app.definitions(), app.queues, config.selection)
            log.info("takes %s (labels: %s)", ", ".join(takes) or "no workflow", config.selection.labels or "none")
        async with open_reads(engine.client, config.read_store) as reads:
            if config.read_store is not None:
                log.info("HTTP reads served from the standby %s", display_url(config.read_store))
            services = [*build_services(engine, config, reads), Service("store", _until_broken(engine))]
            await _run_services(services, stop, failed)
    finally:
        if received:
            log.info(
                "stopping: no new work is claimed; running steps may finish for %s (then a step awaited on the "
                "event loop is cancelled, and one in a thread keeps its run leased here until it returns)",
                format_seconds(config.grace),
            )
        shutdown = await engine.close(grace=config.grace if received and not failed else 0)
    if failed == ["store"]:
        why = "the store is corrupt"
    else:
        why = received[0] if received else f"service {failed[0]} ended"
    log.info(
        "worker %s stopped (%s): %d step attempt(s) finished and journaled while stopping, %d ended after the "
        "grace, %d run(s) released",
        engine.worker_id,
        why,
        shutdown.finished,
        shutdown.ended,
        shutdown.released,
    )
    return 1 if failed else 0


async def _run_services(services: list[Service], stop: asyncio.Event, failed: list[str]) -> None:
    """Run ``services`` until ``stop`` or until one ends (its name added to ``failed``)."""
    tasks: dict[asyncio.Task[Any], Service] = {
        asyncio.create_task(s.run(), name=f"lockgate-serve-{s.name}"): s for s in services
    }
    stopper: asyncio.Task[Any] = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if task in tasks:
            error = task.exception()
            failed.append(tasks[task].name)
            if tasks[task].name != "store":  # a corrupt store was logged where it was found
                log.error("service %s ended unexpectedly: %r; shutting down", tasks[task].name, error)
    for task in [stopper, *tasks]:
        task.cancel()
    for task in [stopper, *tasks]:
        with contextlib.suppress(BaseException):
            await task


def _until_broken(engine: Engine) -> Callable[[], Coroutine[Any, Any, None]]:
    """A service that ends (stopping ``serve`` with exit 1) when the engine finds its store corrupt."""

    async def watch() -> None:
        await engine.dispatcher.broken.wait()

    return watch


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line: ``time``, ``level``, ``logger``, ``message``."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(quiet: bool, log_format: str) -> None:
    """Log lines on stderr, as text or JSON; ``quiet`` drops the line per run start and end."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("lockgate.runs").setLevel(logging.WARNING if quiet else logging.INFO)


@cli.command()
@click.argument("app_ref", metavar="MODULE:APP")
@store_option
@read_store_option
@click.option(
    "--max-concurrent-runs",
    type=count_type(1, 10_000),
    metavar="N",
    default=200,
    show_default=True,
    help="Most runs this process executes at once.",
)
@click.option(
    "--lease",
    type=DurationType(),
    default="15s",
    show_default=True,
    help="How long a run held by a dead process waits before another worker takes it (at least 500ms).",
)
@click.option(
    "--retention",
    type=RetentionType(),
    default="30d",
    show_default=True,
    help="Delete runs that ended longer ago than this, with their records, and ledger rows as old "
    "(at least 1m; 'never' keeps everything).",
)
@click.option(
    "--history-partition",
    type=click.Choice(sorted(INTERVALS)),
    default=None,
    help="PostgreSQL: what one partition of the run history spans (default: day, or hour under a retention "
    "shorter than a day); retention drops whole partitions (docs/history.md).",
)
@click.option(
    "--event-retention",
    type=RetentionType(),
    default="30d",
    show_default=True,
    help="Delete domain events published longer ago than this ('never' keeps them).",
)
@click.option(
    "--delivery-retention",
    type=RetentionType(),
    default="30d",
    show_default=True,
    help="Delete event deliveries older than this; a trigger's custom idempotency key deduplicates only "
    "this long ('never' keeps them).",
)
@click.option(
    "--grace",
    type=DurationType(),
    default="30s",
    show_default=True,
    help="At SIGINT/SIGTERM, how long the step attempts running here may finish (their results are journaled) "
    "before the runs are released for other workers.",
)
@click.option(
    "--public-url",
    metavar="URL",
    help="Where this service is reached from outside (https://...): callback tokens' URLs start with it "
    "(default: LOCKGATE_PUBLIC_URL).",
)
@click.option("-q", "--quiet", is_flag=True, help="No log line per run start and end.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object a line.",
)
@click.option(
    "--no-migrate", is_flag=True, help="Do not migrate the store at boot: refuse one whose schema is not current."
)
@click.option(
    "--labels",
    metavar="K=V,...",
    default="",
    help="This process's labels: it takes a workflow declared with runs_on=lg.Labels(...) only if it has them all.",
)
@click.option(
    "--workflows",
    metavar="A,B",
    default=None,
    help="Take only these workflows (or queue:NAME, a queue's members); default: every one the app defines.",
)
@click.option("--exclude", metavar="C,...", default=None, help="Never take these workflows (or queue:NAME).")
@click.option(
    "--unroutable-after",
    type=DurationType(),
    default="1m",
    show_default=True,
    help="Report (log line, doctor, /metrics) due runs that no live worker takes for this long.",
)
@http_options
@click.option(
    "--cluster-metrics",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Serve the store-wide gauges on /metrics: auto = on SQLite, and on PostgreSQL from the replica "
    "holding the drain lease only.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    app_ref: str,
    store: str,
    read_store: str | None,
    max_concurrent_runs: int,
    lease: float,
    retention: float | None,
    history_partition: str | None,
    event_retention: float | None,
    delivery_retention: float | None,
    http_bind: str,
    no_http: bool,
    token_file: str | None,
    read_token_file: str | None,
    cluster_metrics: str,
    no_migrate: bool,
    grace: float,
    public_url: str | None,
    quiet: bool,
    log_format: str,
    labels: str,
    workflows: str | None,
    exclude: str | None,
    unroutable_after: float,
) -> None:
    """Run the workflows of MODULE:APP (workers + sweeps) until SIGINT or SIGTERM.

    MODULE is imported from the current directory or the Python path; APP defaults to
    `app`. Several `serve` processes may share one store. The HTTP inspect API listens on
    127.0.0.1:8484 unless `--no-http`.
    """
    if lease < 0.5:
        raise click.BadParameter("must be at least 500ms", param_hint="'--lease'")
    try:
        public_url = check_base_url(public_url, what="--public-url")
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="'--public-url'") from None
    policy = access_policy(token_file, read_token_file)
    http = None if no_http else check_http_bind(http_bind, policy)
    if read_store is not None and no_http:
        raise click.UsageError("--read-store serves the HTTP API's reads: drop --no-http or --read-store")
    read_store_beside(store, read_store)
    try:
        partition_interval(history_partition, retention)
    except InvalidHistoryOption as exc:
        raise click.BadParameter(exc.problem, param_hint=f"'--{exc.field.replace('_', '-')}'") from None
    app = load_app(app_ref, param_hint="'MODULE:APP'")
    selection = check_selection(app, labels, workflows, exclude)
    configure_logging(quiet, log_format)
    config = ServeConfig(
        app_ref=app_ref,
        store=store,
        max_concurrent_runs=max_concurrent_runs,
        lease=lease,
        retention=retention,
        history_partition=history_partition,
        event_retention=event_retention,
        delivery_retention=delivery_retention,
        http=http,
        http_required=ctx.get_parameter_source("http_bind") is not click.core.ParameterSource.DEFAULT,
        policy=policy,
        cluster_metrics=cluster_metrics,
        migrate=not no_migrate,
        grace=grace,
        public_url=public_url,
        read_store=read_store,
        selection=selection,
        unroutable_after=unroutable_after,
    )
    code = run_async(serve_app(app, config))
    ctx.exit(code)


def check_selection(app: App, labels: str, workflows: str | None, exclude: str | None) -> Selection:
    """``--labels``, ``--workflows``, ``--exclude`` checked against the app (a name it does not define: exit 2)."""
    try:
        parsed = Labels.parse(labels)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), param_hint="'--labels'") from exc
    for hint, given in (("'--workflows'", workflows), ("'--exclude'", exclude)):
        try:
            names = None if given is None else given.split(",")  # each name checked alone
            taken(app.definitions(), app.queues, Selection.of(None, names if hint == "'--workflows'" else None))
            taken(app.definitions(), app.queues, Selection.of(None, None, names if hint == "'--exclude'" else None))
        except (InvalidArgument, UnknownWorkflow) as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from exc
    return Selection.of(parsed, workflows, exclude)
