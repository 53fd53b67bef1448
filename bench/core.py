"""Core engine figures beside the raw floor of the same database.

    python -m bench.core                          # SQLite, synchronous FULL and NORMAL
    python -m bench.core --store postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.core --json /tmp/core.json --plain
    python -m bench.core --encrypt                # also case (a) on a workflow with encrypt_steps=True

Cases, each on a fresh database and a fresh engine:

(a) one workflow runs ``--steps`` sequential trivial steps: microseconds per step;
(b) ``--concurrent`` one-step workflows started at once, then all awaited: workflows/s;
(c) ``--sequential`` start-and-await calls (``engine.run``) one after the other: latency;
(d) the floor: one-row insert + commit in a loop with the store's own settings (on PostgreSQL,
    case (a) divides by floor samples interleaved with its steps instead: ``case_steps``);
(a-enc) with ``--encrypt``: case (a)'s steps on a workflow declared with ``encrypt_steps=True``
    (each step's output sealed with AES-256-GCM), alternating in one engine with as many plain
    steps: µs per step, and its ratio to those plain steps (target on SQLite FULL: under 1.10);
(e) PostgreSQL only: the workflows of (b) executed by ``--workers`` ``lockgate serve bench.core:app``
    processes sharing one database, started and awaited from this process by an ``lg.Client``
    (which executes nothing): workflows/s, beside (b) of the same round; with
    ``LOCKGATE_BENCH_ROUTED=1`` in the environment, the workflow declares a version, one it is
    compatible with and a patch, and the workers ``--labels`` (a routed deploy's claim);
(f) ``--transactions`` application transactions that insert one row of their own and start a
    workflow in that transaction (``start(..., conn=)``), alternating with as many that insert,
    commit, then start it separately: transactions/s and latency of each (``bench/transactions.py``).

Ratios divide the time of one unit of work (a step, a workflow, a round trip) by the
time of one floor commit. See ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

import lockgate as lg
from lockgate.crypto import generate_key

from .floor import Floor, postgres_floor, postgres_floor_async, sqlite_floor
from .report import Cell, machine, print_table, ratio, write_json
from .signals import sigterm_cancels
from .transactions import measure as measure_transactions

__all__ = ["app", "main", "run_mode"]

HERE = Path(__file__).resolve().parent
T = TypeVar("T")

# Targets (see docs/performance.md); keyed by (store, mode, case).
TARGETS: dict[tuple[str, str, str], tuple[str, float]] = {
    ("sqlite", "full", "a"): ("ratio<=", 1.3),
    ("sqlite", "full", "b"): ("value>=", 3000.0),
    ("sqlite", "full", "c"): ("value<=", 1.5),
    ("sqlite", "normal", "a"): ("value<=", 60.0),
    ("sqlite", "full", "a-enc"): ("vs_a<=", 1.10),
    ("postgres", "default", "a"): ("ratio<=", 1.3),
    ("postgres", "default", "b"): ("value>=", 2000.0),
    ("postgres", "default", "c"): ("value<=", 3.0),
}


class Count(BaseModel):
    n: int


class Item(BaseModel):
    i: int


async def noop(i: int) -> int:
    """The trivial step: all its cost is the engine's."""
    return i


# LOCKGATE_BENCH_ROUTED=1: bench.one declares a version, an old one it runs and a patch (each run checks
# its recorded patch against the code's in the claim), and case (e)'s workers have labels: the claim
# filters as a routed deploy's does. (No runs_on: cases (a)-(c) execute in this process, unlabelled.)
ROUTED_ENV = "LOCKGATE_BENCH_ROUTED"
ROUTED: dict[str, Any] = (
    {"version": "2", "compatible_with": ["1"], "patches": ["bench-p1"]}
    if os.environ.get(ROUTED_ENV) == "1"
    else {}
)


def build_app(marks: dict[str, float], *, encrypt: bool = False) -> lg.App:
    """The bench workflows; with ``encrypt``, also ``bench.steps.sealed`` (``encrypt_steps=True``: needs a key)."""
    app = lg.App()

    async def steps(ctx: lg.Context, p: Count) -> int:
        started = time.perf_counter()
        for i in range(p.n):
            await ctx.step("s", noop, i)
        marks["steps"] = time.perf_counter() - started
        return p.n

    app.workflow(name="bench.steps")(steps)
    if encrypt:
        app.workflow(name="bench.steps.sealed", encrypt_steps=True)(steps)

    @app.workflow(name="bench.one", **ROUTED)
    async def one(ctx: lg.Context, p: Item) -> int:
        return int(await ctx.step("s", noop, p.i))

    return app


app = build_app({})
"""What case (e)'s worker processes serve (``lockgate serve bench.core:app``)."""
WORKER_APP = "bench.core:app"


@dataclass
class Case:
    """One measured figure."""

    case: str
    label: str
    value: float
    unit: str
    unit_us: float  # time of one unit of work, for the ratio to the floor
    extra: dict[str, Any] = field(default_factory=dict)
    ratio: float | None = None  # unit_us over the floor's µs per commit (the median of the rounds')


@dataclass
class ModeResult:
    store: str
    mode: str
    floor: Floor
    cases: list[Case]
    floor_samples: list[float] = field(default_factory=list)  # µs per commit, one per round
    floor_async: Floor | None = None  # PostgreSQL: the same loop through the asyncio driver (a reference)


# -- the cases --------------------------------------------------------------------------------


def _engine(app: lg.App, url: str, recording: str, keys: list[str] | None = None) -> lg.Engine:
    return lg.Engine(app, url, recording=recording, encryption_keys=keys)


async def case_steps(
    url: str, n: int, recording: str, floor: Callable[[], float] | None = None, parts: int = 4
) -> Case:
    """(a): ``n`` sequential steps in one workflow, timed inside its body: µs per step.

    With ``floor`` (a short floor loop: its µs per commit), the steps run as ``parts``
    workflows of ``n / parts`` steps with a floor sample before each and after the last,
    and the ratio divides by those samples' mean (the two ends counted half, as each
    borders one part only). On a machine whose disk and CPU change speed from one second
    to the next, a floor measured once beforehand can be a different machine's floor;
    interleaved, both sides of the ratio see the same one.
    """
    marks: dict[str, float] = {}
    parts = max(1, parts) if floor is not None else 1
    sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    floors: list[float] = []
    spent = total = cpu = 0.0
    async with _engine(build_app(marks), url, recording) as engine:
        await engine.run("bench.steps", {"n": 10})  # warm-up: imports, caches, statements
        if floor is not None:
            floors.append(floor())
        for size in sizes:
            started, cpu_at = time.perf_counter(), time.process_time()
            result = await engine.run("bench.steps", {"n": size}, timeout=600)
            total, cpu = total + time.perf_counter() - started, cpu + time.process_time() - cpu_at
            assert result == size
            spent += marks["steps"]
            if floor is not None:
                floors.append(floor())
    per_step = spent / n * 1e6
    extra: dict[str, Any] = {"total_s": total, "cpu_us_per_unit": cpu / n * 1e6}
    if floors:
        extra["floor_us"] = (sum(floors) - (floors[0] + floors[-1]) / 2) / parts
        extra["floor_samples_us"] = floors
    return Case("a", f"{n:,} sequential steps, one workflow", per_step, "µs/step", per_step, extra)


async def case_steps_encrypted(url: str, n: int, recording: str, parts: int = 8) -> Case:
    """(a-enc): ``n`` sequential steps of a workflow declared ``encrypt_steps=True``, beside as many plain ones.

    One engine, one database: the steps run as ``parts`` encrypted and ``parts`` plain
    workflows, alternating (plain first, then encrypted first, ...), so that both halves
    see the same disk and the same database size; ``vs_a`` divides the encrypted µs per
    step by the plain µs per step measured among them.
    """
    marks: dict[str, float] = {}
    sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    spent = {"bench.steps": 0.0, "bench.steps.sealed": 0.0}
    cpu = dict.fromkeys(spent, 0.0)
    async with _engine(build_app(marks, encrypt=True), url, recording, [generate_key("bench")]) as engine:
        for workflow in spent:
            await engine.run(workflow, {"n": 10})  # warm-up
        for i, size in enumerate(sizes):
            for workflow in list(spent)[:: 1 if i % 2 == 0 else -1]:
                cpu_at = time.process_time()
                assert await engine.run(workflow, {"n": size}, timeout=600) == size
                cpu[workflow] += time.process_time() - cpu_at
                spent[workflow] += marks["steps"]
    sealed, plain = spent["bench.steps.sealed"] / n * 1e6, spent["bench.steps"] / n * 1e6
    extra: dict[str, Any] = {
        "vs_a": sealed / plain,
        "plain_us_per_step": plain,
        "cpu_us_per_unit": cpu["bench.steps.sealed"] / n * 1e6,
        "plain_cpu_us_per_unit": cpu["bench.steps"] / n * 1e6,
    }
    return Case("a-enc", f"{n:,} sequential steps, encrypt_steps", sealed, "µs/step", sealed, extra)


async def case_concurrent(url: str, n: int, recording: str) -> Case:
    async with _engine(build_app({}), url, recording) as engine:
        await asyncio.gather(*(engine.run("bench.one", {"i": i}) for i in range(20)))  # warm-up
        started, cpu = time.perf_counter(), time.process_time()
        handles = await asyncio.gather(*(engine.start("bench.one", {"i": i}) for i in range(n)))
        admitted = time.perf_counter() - started
        results = await asyncio.gather(*(h.result(timeout=600) for h in handles))
        total, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert results == list(range(n))
    rate = n / total
    return Case(
        "b",
        f"{n:,} one-step workflows started at once",
        rate,
        "workflows/s",
        total / n * 1e6,
        {"total_s": total, "starts_per_s": n / admitted, "cpu_us_per_unit": cpu / n * 1e6},
    )


async def case_sequential(url: str, n: int, recording: str) -> Case:
    latencies: list[float] = []
    async with _engine(build_app({}), url, recording) as engine:
        for i in range(20):  # warm-up
            await engine.run("bench.one", {"i": i})
        cpu = time.process_time()
        for i in range(n):
            started = time.perf_counter()
            await engine.run("bench.one", {"i": i}, timeout=60)
            latencies.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
    latencies.sort()
    mean_ms = statistics.fmean(latencies) * 1e3
    return Case(
        "c",
        f"{n:,} start-and-await in sequence",
        mean_ms,
        "ms mean",
        mean_ms * 1e3,
        {
            "p50_ms": _pct(latencies, 50) * 1e3,
            "p99_ms": _pct(latencies, 99) * 1e3,
            "max_ms": latencies[-1] * 1e3,
            "cpu_us_per_unit": cpu / n * 1e6,
        },
    )


async def case_transactions(url: str, n: int, recording: str) -> Case:
    """(f): a start in the application's transaction, beside the same insert and a separate start."""
    async with _engine(build_app({}), url, recording) as engine:
        figures = await measure_transactions(engine, url, "bench.one", n)
    joined, separate = figures.per_s("joined"), figures.per_s("separate")
    return Case(
        "f",
        f"{n:,} app transactions: insert + start(conn=)",
        joined,
        "tx/s",
        figures.mean_ms("joined") * 1e3,
        {
            "mean_ms": figures.mean_ms("joined"),
            "p50_ms": figures.pct_ms("joined", 50),
            "p99_ms": figures.pct_ms("joined", 99),
            "separate_tx_per_s": separate,
            "separate_mean_ms": figures.mean_ms("separate"),
            "separate_p50_ms": figures.pct_ms("separate", 50),
            "separate_p99_ms": figures.pct_ms("separate", 99),
            "vs_separate": joined / separate,
            "cpu_us_per_unit": figures.cpu_s / (2 * n) * 1e6,
        },
    )


# Case (e) records which worker claims each run: the store clears a run's owner when it ends.
# An unlogged table and a row trigger that fires on claims only: one small insert per claim.
_CLAIMS = """
CREATE UNLOGGED TABLE bench_claims (run_id TEXT NOT NULL, owner TEXT NOT NULL);
CREATE FUNCTION bench_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_claims (run_id, owner) VALUES (NEW.id, NEW.owner);
    RETURN NULL;
END
$$;
CREATE TRIGGER bench_claimed AFTER UPDATE OF owner ON lockgate_runs FOR EACH ROW
    WHEN (NEW.owner IS NOT NULL AND NEW.owner IS DISTINCT FROM OLD.owner)
    EXECUTE FUNCTION bench_claimed();
"""
_CLAIMS_BY_WORKER = """
SELECT w.pid, COUNT(DISTINCT c.run_id), COUNT(*) FROM bench_claims c JOIN lockgate_workers w ON w.id = c.owner
GROUP BY w.pid
"""
_RESULT_POLL = 0.05  # the client's longest wait between two reads of the runs it awaits (its default: 0.5s)


async def case_workers(url: str, n: int, recording: str, workers: int) -> Case:
    """(e): ``workers`` worker processes execute what (b) executes in one; this process starts and awaits.

    The workers are ``lockgate serve`` processes with the engine's defaults (200 runs at
    once, lease 15s), started by the cluster tests' harness. Each has executed warm-up runs
    before the clock starts. Time runs from the first start to the last result the client
    sees; ``last_finish_s`` is the same span to the last run's end as the database has it
    (without the client's polling).
    """
    from tests.cluster.harness import Cluster  # importable from the repository root, as ``bench`` is

    with tempfile.TemporaryDirectory(prefix="lockgate-core-workers-") as logs, sigterm_cancels():
        async with lg.Client(app, url, recording=recording, poll_interval=_RESULT_POLL) as client:  # migrates
            cluster = Cluster(url, Path(logs))
            await cluster.execute(_CLAIMS)
            try:
                labels = ["--labels", "pool=bench,zone=eu"] if ROUTED else []
                cluster.spawn(workers, lease="15s", max_runs=200, app=WORKER_APP, args=labels)
                await cluster.ready()
                pids = {w.pid: w.name for w in cluster.workers}

                deadline = time.monotonic() + 60
                while len(await cluster.fetch(_CLAIMS_BY_WORKER)) < workers:  # warm-up: every worker ran some
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"warm-up: not every worker took a run within 60s\n{cluster.logs()}")
                    handles = await asyncio.gather(*(client.start("bench.one", {"i": i}) for i in range(20 * workers)))
                    await cluster.guard(asyncio.gather(*(h.result(timeout=60) for h in handles)))
                await cluster.execute("TRUNCATE bench_claims")
                cpu0 = [_cpu_s(pid) for pid in pids]
                wall = time.time()
                started, cpu = time.perf_counter(), time.process_time()
                handles = await asyncio.gather(*(client.start("bench.one", {"i": i}) for i in range(n)))
                admitted = time.perf_counter() - started
                results = await cluster.guard(asyncio.gather(*(h.result(timeout=600) for h in handles)))
                total, cpu = time.perf_counter() - started, time.process_time() - cpu
                cpu += sum(_cpu_s(pid) - before for pid, before in zip(pids, cpu0, strict=True))
                ids = [h.run_id for h in handles]
                [(last_finish,)] = await cluster.fetch(
                    "SELECT MAX(finished_at) FROM lockgate_runs WHERE id = ANY(%s)", ids
                )
                claims = await cluster.fetch(_CLAIMS_BY_WORKER)
            finally:
                await cluster.close()
    assert results == list(range(n))
    spread = {pids[pid]: runs for pid, runs, _ in claims}
    return Case(
        "e",
        f"{n:,} one-step workflows, {workers} worker processes",
        n / total,
        "workflows/s",
        total / n * 1e6,
        {
            "total_s": total,
            "starts_per_s": n / admitted,
            "last_finish_s": float(last_finish) - wall,
            "finished_per_s": n / (float(last_finish) - wall),
            "cpu_us_per_unit": cpu / n * 1e6,  # this process and the workers together
            "runs_per_worker": {name: spread.get(name, 0) for name in pids.values()},
            "reclaims": sum(c for _, _, c in claims) - sum(r for _, r, _ in claims),
        },
    )


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(sorted_values: list[float], pct: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


# -- stores -------------------------------------------------------------------------------------


class Place:
    """Where one mode's databases live: files in a folder (SQLite) or scratch databases (Postgres)."""

    def __init__(self, store: str, mode: str, folder: Path | None = None, server_url: str | None = None) -> None:
        self.store, self.mode, self.folder, self.server_url = store, mode, folder, server_url
        self._scratch: list[str] = []

    def url(self, name: str) -> str:
        if self.store == "sqlite":
            assert self.folder is not None
            query = "" if self.mode == "full" else f"?synchronous={self.mode}"
            return f"sqlite:///{self.folder / f'{self.mode}-{name}.db'}{query}"
        assert self.server_url is not None
        return _create_database(self.server_url, self._scratch)

    def floor(self, seconds: float) -> Floor:
        if self.store == "sqlite":
            assert self.folder is not None
            return sqlite_floor(str(self.folder / f"{self.mode}-floor.db"), self.mode, seconds=seconds)
        return postgres_floor(self.url("floor"), seconds=seconds)

    def floor_sampler(self, seconds: float) -> Callable[[], float] | None:
        """A floor loop of ``seconds`` to run again and again (PostgreSQL): µs per commit.

        ``None`` on SQLite: its floor starts on a fresh file whose WAL grows through a short
        loop, and a growing file's fsync costs more, so short samples read slower than the floor.
        """
        if self.store == "sqlite":
            return None
        url = self.url("floor-samples")
        return lambda: postgres_floor(url, seconds=seconds).us_per_commit

    async def floor_async(self, seconds: float) -> Floor | None:
        """The floor through the asyncio driver (PostgreSQL only): a round trip before any engine work."""
        if self.store == "sqlite":
            return None
        return await postgres_floor_async(self.url("floor-async"), seconds=seconds)

    def cleanup(self) -> None:
        if self.server_url is not None:
            _drop_databases(self.server_url, self._scratch)


def _create_database(server_url: str, created: list[str]) -> str:
    import psycopg

    name = f"lockgate_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    created.append(name)
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _drop_databases(server_url: str, names: list[str]) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        for name in names:
            with contextlib.suppress(psycopg.Error):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    names.clear()


@contextlib.contextmanager
def _folder(given: str | None) -> Iterator[Path]:
    """A scratch folder on the same disk as the repository (or the one given), removed afterwards."""
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=".tmp-core-", dir=HERE))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- running ------------------------------------------------------------------------------------


async def run_mode(place: Place, args: argparse.Namespace) -> ModeResult:
    """``--repeat`` rounds of the floor then cases (a), (b), (c) (and (e), (f)), each on a fresh database; the medians.

    Each round measures its own floor just before its cases, and each ratio divides by the
    floor of its round: a disk that slows down for a while (other work on the machine) slows
    both sides of that ratio. The reported ratio is the median of the rounds' ratios; so is
    (e)'s ratio to (b), taken within each round.
    """
    floors: list[Floor] = []
    async_floors: list[Floor] = []
    rounds: list[list[Case]] = []
    for r in range(args.repeat):
        floor = place.floor(args.floor_seconds)
        floors.append(floor)
        async_floor = await place.floor_async(args.floor_seconds)
        if async_floor is not None:
            async_floors.append(async_floor)
        cases = [
            await case_steps(
                place.url(f"steps{r}"), args.steps, args.recording, place.floor_sampler(args.floor_seconds / 4)
            ),
            await case_concurrent(place.url(f"concurrent{r}"), args.concurrent, args.recording),
            await case_sequential(place.url(f"sequential{r}"), args.sequential, args.recording),
        ]
        if args.encrypt:  # after the default cases, so that they run as they do without the flag
            cases.append(await case_steps_encrypted(place.url(f"steps-enc{r}"), args.steps, args.recording))
        if place.store == "postgres" and args.workers:
            workers = await case_workers(place.url(f"workers{r}"), args.concurrent, args.recording, args.workers)
            workers.extra["vs_b"] = workers.value / next(c.value for c in cases if c.case == "b")
            cases.append(workers)
        if args.transactions:  # after the others, so that they run as they do without it
            cases.append(await case_transactions(place.url(f"transactions{r}"), args.transactions, args.recording))
        for case in cases:
            case.ratio = ratio(case.unit_us, floor_us(case, floor))
            if async_floor is not None:
                case.extra["ratio_to_async_floor"] = ratio(case.unit_us, async_floor.us_per_commit)
        rounds.append(cases)
    floor = _median(floors, lambda f: f.us_per_commit)
    cases = []
    for samples in zip(*rounds, strict=True):
        chosen = _median(list(samples), lambda c: c.value)
        chosen.extra["samples"] = [c.value for c in samples]
        ratios = [c.ratio for c in samples if c.ratio is not None]
        chosen.extra["ratio_samples"] = ratios
        chosen.ratio = _median(ratios, float) if ratios else None
        for vs in ("vs_a", "vs_b", "vs_separate"):
            if vs in chosen.extra:
                chosen.extra[f"{vs}_samples"] = [c.extra[vs] for c in samples]
                chosen.extra[vs] = _median(chosen.extra[f"{vs}_samples"], float)
        cases.append(chosen)
    floor_async = _median(async_floors, lambda f: f.us_per_commit) if async_floors else None
    return ModeResult(place.store, place.mode, floor, cases, [f.us_per_commit for f in floors], floor_async)


def floor_us(case: Case, floor: Floor) -> float:
    """The floor ``case`` is divided by: its own interleaved samples' (case (a)), else the round's."""
    return float(case.extra.get("floor_us", floor.us_per_commit))


def _median(items: list[T], key: Callable[[T], float]) -> T:
    """The middle item by ``key`` (the lower middle of an even count)."""
    return sorted(items, key=key)[(len(items) - 1) // 2]


def _target(store: str, mode: str, case: Case, floor: Floor) -> tuple[str | None, bool | None]:
    if (store, mode, case.case) not in TARGETS:
        return None, None
    kind, bound = TARGETS[(store, mode, case.case)]
    if kind == "vs_a<=":
        return f"≤ {bound:g}x plain", case.extra["vs_a"] <= bound
    if kind == "ratio<=":
        value = case.ratio
        return f"≤ {bound}x floor", value is not None and value <= bound
    if kind == "value>=":
        return f"≥ {bound:,.0f}", case.value >= bound
    return f"≤ {bound:g}", case.value <= bound


def _rows(results: list[ModeResult]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for r in results:
        rows.append(
            [r.mode, "(d) floor: 1-row insert+commit", r.floor.us_per_commit, "µs/commit", None, None, None, None]
        )
        rows[-1][4] = f"{r.floor.commits_per_s:,.0f} commits/s"
        if r.floor_async is not None:
            floor_async = r.floor_async
            per_s = f"{floor_async.commits_per_s:,.0f} commits/s"
            rows.append([r.mode, "    the same, asyncio driver", floor_async.us_per_commit, "µs/commit", per_s])
            rows[-1].extend([None, None, None])  # no ratio, no target: a reference
        for c in r.cases:
            target, met = _target(r.store, r.mode, c, r.floor)
            detail = ", ".join(f"{k.removesuffix('_ms')} {v:.2f}" for k, v in c.extra.items() if k.endswith("_ms"))
            cpu = c.extra.get("cpu_us_per_unit")
            if cpu is not None:
                detail = ", ".join(x for x in (detail, f"cpu {cpu:.0f} µs/unit") if x)
            if "floor_us" in c.extra:
                detail = ", ".join(x for x in (detail, f"floor {c.extra['floor_us']:.0f} µs interleaved") if x)
            beside_async = c.extra.get("ratio_to_async_floor")
            if c.case == "a" and beside_async is not None:
                detail = ", ".join(x for x in (detail, f"{beside_async:.2f}x asyncio floor") if x)
            if c.case == "a-enc":
                plain = f"{c.extra['vs_a']:.3f}x plain ({c.extra['plain_us_per_step']:,.0f} µs/step, "
                plain += f"cpu {c.extra['plain_cpu_us_per_unit']:.0f})"
                detail = ", ".join(x for x in (plain, detail) if x)
            if c.case == "f":
                separate = f"{c.extra['vs_separate']:.2f}x separate ({c.extra['separate_tx_per_s']:,.0f} tx/s)"
                detail = ", ".join(x for x in (separate, detail) if x)
            if c.case == "e":
                spread = "/".join(str(v) for v in c.extra["runs_per_worker"].values())
                ended = f"{c.extra['finished_per_s']:,.0f}/s by finished_at"
                detail = ", ".join((f"{c.extra['vs_b']:.2f}x (b)", f"runs per worker {spread}", ended, detail))
            rows.append(
                [
                    r.mode,
                    f"({c.case}) {c.label}",
                    c.value,
                    c.unit,
                    detail or None,
                    c.ratio,
                    target,
                    None if met is None else ("yes" if met else "NO"),
                ]
            )
    return rows


def _document(results: list[ModeResult], args: argparse.Namespace) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for r in results:
        cases: dict[str, Any] = {}
        for c in r.cases:
            target, met = _target(r.store, r.mode, c, r.floor)
            cases[c.case] = {
                "label": c.label,
                "value": c.value,
                "unit": c.unit,
                "unit_us": c.unit_us,
                "ratio_to_floor": c.ratio,
                "target": target,
                "met": met,
                **c.extra,
            }
        modes[r.mode] = {"floor": {**r.floor.to_dict(), "samples_us_per_commit": r.floor_samples}, "cases": cases}
        if r.floor_async is not None:
            modes[r.mode]["floor_asyncio_driver"] = r.floor_async.to_dict()
    return {
        "bench": "core",
        "store": results[0].store if results else None,
        "settings": {
            "steps": args.steps,
            "concurrent": args.concurrent,
            "sequential": args.sequential,
            "workers": args.workers,
            "transactions": args.transactions,
            "recording": args.recording,
            "encrypt": args.encrypt,
            "floor_seconds": args.floor_seconds,
            "repeat": args.repeat,
        },
        "machine": machine(),
        "modes": modes,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.core", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        default="sqlite",
        help="'sqlite' (both synchronous modes, scratch files), a sqlite:/// URL (its folder and mode), "
        "or a postgresql:// URL (scratch databases on that server)",
    )
    parser.add_argument("--json", help="where to write the JSON (default bench/results/core-<store>.json)")
    parser.add_argument("--dir", help="folder for the SQLite files (default: a scratch folder beside this script)")
    parser.add_argument("--steps", type=int, default=2000, help="case (a): steps in the one workflow")
    parser.add_argument("--concurrent", type=int, default=2000, help="cases (b), (e): workflows started at once")
    parser.add_argument("--sequential", type=int, default=500, help="case (c): start-and-await calls")
    parser.add_argument(
        "--workers", type=int, default=3, help="case (e), PostgreSQL only: worker processes (0 skips the case)"
    )
    parser.add_argument(
        "--transactions", type=int, default=300, help="case (f): application transactions each way (0 skips it)"
    )
    parser.add_argument("--recording", choices=("full", "coarse"), default="full", help="the engine's recording")
    parser.add_argument("--floor-seconds", type=float, default=1.0, help="how long each floor loop runs")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every case; the median is reported")
    parser.add_argument(
        "--encrypt", action="store_true", help="also case (a) on an encrypt_steps=True workflow, beside (a)"
    )
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    for name in ("steps", "concurrent", "sequential", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.workers < 0 or args.transactions < 0:
        parser.error("--workers and --transactions must be at least 0")
    return args


def one_place(store: str, folder: Path, bench: str) -> Place:
    """The one store a bench that measures a single place runs on: ``sqlite`` (synchronous FULL) or a PostgreSQL URL."""
    if store == "sqlite":
        return Place("sqlite", "full", folder)
    if store.startswith(("postgresql:", "postgres:")):
        return Place("postgres", "default", server_url=store)
    raise SystemExit(f"{bench}: unsupported --store {store!r}: use sqlite or postgresql://...")


def _places(args: argparse.Namespace, folder: Path) -> list[Place]:
    store: str = args.store
    if store == "sqlite":
        return [Place("sqlite", "full", folder), Place("sqlite", "normal", folder)]
    if store.startswith("sqlite:"):
        from lockgate.store.sqlite import SQLiteStore

        parsed = SQLiteStore(store)
        return [Place("sqlite", parsed.synchronous, Path(parsed.path).parent)]
    if store.startswith(("postgresql:", "postgres:")):
        if importlib.util.find_spec("lockgate.store.postgres") is None:
            raise SystemExit(
                "bench.core: the PostgreSQL store (lockgate.store.postgres) is not available in this checkout; "
                "run with --store sqlite"
            )
        return [Place("postgres", "default", server_url=store)]
    raise SystemExit(f"bench.core: unsupported --store {store!r}: use sqlite, sqlite:///path.db or postgresql://...")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with _folder(args.dir) as folder:
        places = _places(args, folder)
        results: list[ModeResult] = []
        for place in places:
            try:
                results.append(asyncio.run(run_mode(place, args)))
            finally:
                place.cleanup()
    store = results[0].store
    print_table(
        f"lockgate core on {store} (recording={args.recording})",
        ["mode", "case", "value", "unit", "detail", "x floor", "target", "met"],
        _rows(results),
        plain=args.plain,
    )
    path = write_json(args.json or HERE / "results" / f"core-{store}.json", _document(results, args))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
