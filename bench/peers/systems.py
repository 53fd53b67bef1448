"""How each system runs a case: its worker processes (the commands its users type), the settings
a case needs beyond its defaults (printed with the figures), and the cases it cannot do.

A case asks for ``processes`` worker processes of ``concurrency`` jobs each; a system that runs
one job per process (RQ) gets as many processes as the others get job slots where the case is
about a total, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SYSTEMS", "System", "Workers"]

DEFAULT_SLOTS = 200
"""``lockgate serve``'s runs per process when ``--max-concurrent-runs`` is not given."""


@dataclass(frozen=True)
class Workers:
    """The worker processes of one case: one command per process, and the settings used."""

    commands: list[list[str]]
    env: dict[str, str] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)
    setup: list[list[str]] = field(default_factory=list)
    """Commands run once before the workers start (schema installation)."""


Plan = Callable[[Path, str, "Case"], Workers | str]
"""``(bin folder, store URL, case) -> Workers``, or why the system cannot run the case."""


@dataclass(frozen=True)
class Case:
    """What a case asks of every system."""

    name: str
    processes: int
    concurrency: int
    limit: int | None = None
    """A global concurrency limit (j3)."""
    rate: int | None = None
    """A global rate limit, jobs per second (j4)."""
    durability: bool = False
    """j5: one process holding ``concurrency`` jobs is killed."""


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _per_process(case: Case, name: str, native_limit: bool, native_rate: bool) -> tuple[list[int], list[str]] | str:
    """Per-process concurrency for ``case``; with no global limit, processes that add up to it."""
    if case.rate is not None and not native_rate:
        return f"{name} has no rate limit"
    if case.limit is not None and not native_limit:
        counts = _split(case.limit, case.processes)
        shown = "+".join(map(str, counts))
        return counts, [f"no global concurrency limit: {case.processes} workers of {shown} = {case.limit} slots"]
    return [case.concurrency] * case.processes, []


def celery(bin_: Path, url: str, case: Case) -> Workers | str:
    sizes = _per_process(case, "celery", native_limit=False, native_rate=True)
    if isinstance(sizes, str):
        return sizes
    counts, settings = sizes
    pool = ["-P", "threads"] if case.durability else []
    if case.durability:
        settings.append("-P threads (prefork would fork 100 processes on 2 cores)")
    env: dict[str, str] = {}
    if case.rate is not None:
        env["PEERS_RATE"] = str(case.rate)
        settings.append(f"task rate_limit='{case.rate}/s' (Celery applies it per worker process)")
    commands = [
        [str(bin_ / "celery"), "-A", "bench.peers.apps.celery_app", "worker", "-c", str(c), *pool,
         "-n", f"w{i}@%h", "--loglevel", "WARNING"]
        for i, c in enumerate(counts)
    ]
    return Workers(commands, env, [f"celery worker -c {'/'.join(map(str, counts))}", *settings])


def rq(bin_: Path, url: str, case: Case) -> Workers | str:
    if case.rate is not None:
        return "rq has no rate limit"
    if case.durability:
        count, settings = 1, ["one job per worker process: the worker killed holds 1 job"]
    elif case.limit is not None:
        count, settings = case.limit, [f"{case.limit} worker processes of 1 job = {case.limit} slots"]
    else:
        count = case.processes * case.concurrency
        settings = [f"{count} worker processes of 1 job (= the others' {case.processes}x{case.concurrency} slots)"]
    commands = [[str(bin_ / "rq"), "worker", "-u", url, "-q", "-n", f"w{i}-{case.name}", "peers"] for i in range(count)]
    return Workers(commands, {}, settings)


def procrastinate(bin_: Path, url: str, case: Case) -> Workers | str:
    sizes = _per_process(case, "procrastinate", native_limit=False, native_rate=False)
    if isinstance(sizes, str):
        return sizes
    counts, settings = sizes
    app = "--app=bench.peers.apps.procrastinate_app.app"
    commands = [[str(bin_ / "procrastinate"), app, "worker", "-c", str(c)] for c in counts]
    setup = [[str(bin_ / "procrastinate"), app, "schema", "--apply"]]
    return Workers(commands, {}, [f"procrastinate worker -c {'/'.join(map(str, counts))}", *settings], setup)


def pgqueuer(bin_: Path, url: str, case: Case) -> Workers | str:
    sizes = _per_process(case, "pgqueuer", native_limit=True, native_rate=False)
    if isinstance(sizes, str):
        return sizes
    counts, settings = sizes
    env: dict[str, str] = {}
    if case.limit is not None:
        env["PEERS_GLOBAL"] = str(case.limit)
        settings.append(f"entrypoint concurrency_limit={case.limit} (global, in the database)")
    # pgq refuses a --max-concurrent-tasks under twice its --batch-size (10 by default).
    batch = max(1, min(10, min(counts) // 2))
    if batch != 10:
        settings.append(f"--batch-size {batch} (pgq needs max-concurrent-tasks >= 2 x batch size)")
    commands = [
        [str(bin_ / "pgq"), "run", "bench.peers.apps.pgqueuer_app:main", "--max-concurrent-tasks", str(c),
         "--batch-size", str(batch), "--log-level", "WARNING"]
        for c in counts
    ]
    setup = [[str(bin_ / "pgq"), "--pg-dsn", url, "install"]]
    return Workers(commands, env, [f"pgq run --max-concurrent-tasks {'/'.join(map(str, counts))}", *settings], setup)


def huey(bin_: Path, url: str, case: Case) -> Workers | str:
    sizes = _per_process(case, "huey", native_limit=False, native_rate=False)
    if isinstance(sizes, str):
        return sizes
    counts, settings = sizes
    commands = [
        [str(bin_ / "huey_consumer"), "bench.peers.apps.huey_app.huey", "-w", str(c), "-k", "thread"] for c in counts
    ]
    return Workers(commands, {}, [f"huey_consumer -k thread -w {'/'.join(map(str, counts))}", *settings])


def dbos(bin_: Path, url: str, case: Case) -> Workers | str:
    env: dict[str, str] = {}
    settings = [f"queue worker_concurrency={case.concurrency}, polling_interval_sec=1 (its default)"]
    if case.limit is not None:
        env["PEERS_GLOBAL"] = str(case.limit)
        settings.append(f"queue global_concurrency={case.limit}")
    if case.rate is not None:
        env["PEERS_RATE"] = str(case.rate)
        settings.append(f"queue limiter={{limit: {case.rate}, period: 1}}")
    commands = [[str(bin_ / "python"), "-m", "bench.peers.apps.dbos_app"] for _ in range(case.processes)]
    env["PEERS_CONCURRENCY"] = str(case.concurrency)
    setup = [[str(bin_ / "python"), "-m", "bench.peers.apps.dbos_app", "migrate"]]
    return Workers(commands, env, settings, setup)


def lockgate(bin_: Path, url: str, case: Case) -> Workers | str:
    """``lockgate serve`` as deployed: its default slots (runs are coroutines, not threads)."""
    env: dict[str, str] = {"PEERS_LOCKGATE_STORE": url}
    slots = [] if case.concurrency <= DEFAULT_SLOTS else ["--max-concurrent-runs", str(case.concurrency)]
    # -q: no log line per run start and end, as every peer here runs with its logging at WARNING
    settings = [f"lockgate serve -q {' '.join(slots) or f'(default slots: {DEFAULT_SLOTS})'}"]
    if case.limit is not None:
        env["PEERS_GLOBAL"] = str(case.limit)
        settings.append(f"concurrency=lg.Concurrency(limit={case.limit})")
    if case.rate is not None:
        env["PEERS_RATE"] = str(case.rate)
        if os.environ.get("PEERS_RATE_AT") == "gate":
            settings.append(f"throttle=lg.Throttle({case.rate}, '1s') (paces admissions)")
        else:
            settings.append(f"flow_control=lg.FlowControl('provider', rate={case.rate}, period='1s') (step starts)")
    commands = [
        [str(bin_ / "lockgate"), "serve", "bench.peers.apps.lockgate_app:app", "--store", url, *slots, "--no-http",
         "-q"]
        for _ in range(case.processes)
    ]
    return Workers(commands, env, settings)


@dataclass(frozen=True)
class System:
    """One column of the comparison."""

    name: str
    env: str
    """Its virtual environment (``venvs.PINS``)."""
    app: str
    """Its module in ``bench.peers.apps`` (without ``_app``)."""
    store: str
    """``redis``, ``postgres`` or ``sqlite``: where its jobs live."""
    plan: Plan


SYSTEMS = [
    System("celery", "celery", "celery", "redis", celery),
    System("rq", "rq", "rq", "redis", rq),
    System("procrastinate", "procrastinate", "procrastinate", "postgres", procrastinate),
    System("pgqueuer", "pgqueuer", "pgqueuer", "postgres", pgqueuer),
    System("huey", "huey", "huey", "sqlite", huey),
    System("dbos", "dbos", "dbos", "postgres", dbos),
    System("lockgate-sqlite", "lockgate", "lockgate", "sqlite", lockgate),
    System("lockgate-pg", "lockgate", "lockgate", "postgres", lockgate),
]
