"""lockgate beside DBOS Transact 3.4 on the same PostgreSQL server, in one run, with the server's floor.

    python -m bench.dbos --store postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.dbos --store postgresql://postgres@127.0.0.1:5432/postgres --plain --json /tmp/dbos.json

Both systems run the cases of ``bench/core.py``, so their ratios read the same way:

(a) one workflow runs N sequential trivial steps: microseconds per step, timed inside the body;
(b) M one-step workflows started at once, then all awaited: workflows/s;
(c) K start-and-await calls one after the other: mean latency (p50, p99 in the detail);
(q) Q one-step workflows through a gate of concurrency 10, all offered at once, all awaited:
    workflows/s. lockgate: ``concurrency=lg.Concurrency(limit=10)`` on the workflow, with the
    engine's defaults; the starts the gate parks have no run to await yet, so the end is
    read from ``engine.flow()`` every 10 ms. DBOS: a queue registered with
    ``global_concurrency=10`` and DBOS's default polling interval (1 s), then (q') the same
    queue polled every ``--dbos-fast-poll`` seconds (the queue's ``polling_interval_sec`` and
    the handles' ``get_result`` polling);
(d) the floor: a one-row insert per transaction (``bench/floor.py``), measured on the server
    just before each system's cases; each system's ratios divide by its own floor. lockgate's
    (a) divides by floor samples taken between parts of its steps instead (``core.case_steps``):
    its target is a ratio, and on this kind of machine the floor drifts within a minute.

Each system works in scratch databases created on the given server and dropped at the end
(whatever happens): lockgate gets a fresh one per case, as in ``bench/core.py``; DBOS gets one
system database for all its cases (it is launched once). DBOS defaults are smaller than
lockgate's because a DBOS step costs milliseconds; the per-unit figures do not depend on them.

DBOS is installed by this script into its own virtual environment (``bench/.tmp-dbos-venv/``
by default, created with ``python -m venv`` and ``pip install "dbos==3.4.*"``; reused while
dbos 3.4 imports in it). The DBOS side runs there as a subprocess: its driver (``DRIVER``
below) uses DBOS's public, synchronous API, the style of DBOS's own documentation and
templates (``DBOS(config=...)``, ``DBOS.launch()``, ``@DBOS.workflow()``, ``@DBOS.step()``,
``DBOS.start_workflow``, ``DBOS.register_queue``, ``queue.enqueue``, ``handle.get_result``,
``DBOS.destroy()``), and prints its figures as one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import lockgate as lg

from .core import (
    HERE,
    Case,
    Item,
    _create_database,
    _drop_databases,
    case_concurrent,
    case_sequential,
    case_steps,
    floor_us,
)
from .core import noop as trivial
from .floor import Floor, postgres_floor
from .report import Cell, machine, print_table, ratio, write_json

__all__ = ["DRIVER", "main"]

GATE = 10
"""The concurrency limit of case (q), on both sides."""
GATE_POLL = 0.01
"""Seconds between two reads of ``engine.flow()`` while lockgate's case (q) waits for its parked starts."""
DBOS_REQUIREMENT = "dbos==3.4.*"
DBOS_SERIES = "3.4."
VENV = HERE / ".tmp-dbos-venv"
RESULT_MARK = "BENCH-DBOS-RESULT "
"""Prefixes the driver's one line of JSON on stdout (DBOS may print log lines too)."""

LABELS = {
    "a": "(a) sequential steps, one workflow",
    "b": "(b) one-step workflows started at once",
    "c": "(c) start-and-await in sequence",
    "q": f"(q) one-step workflows through a gate of {GATE}",
    "q'": "(q') the same, DBOS queue polled faster",
}
UNITS = {"a": "µs/step", "b": "workflows/s", "c": "ms mean", "q": "workflows/s", "q'": "workflows/s"}
COUNTS = {"a": "steps", "b": "concurrent", "c": "sequential", "q": "queued", "q'": "queued"}
"""The option giving each case's size (``--dbos-<name>`` on the DBOS side)."""


DRIVER = r'''
"""DBOS side of bench/dbos.py: runs in DBOS's own virtual environment; argv[1] is its settings."""

import json
import statistics
import sys
import time
from importlib.metadata import version

from dbos import DBOS

settings = json.loads(sys.argv[1])
marks = {}


@DBOS.step()
def noop(i):
    """The trivial step: all its cost is DBOS's."""
    return i


@DBOS.workflow()
def steps(n):
    started = time.perf_counter()
    for i in range(n):
        noop(i)
    marks["steps"] = time.perf_counter() - started
    return n


@DBOS.workflow()
def one(i):
    return noop(i)


def pct(values, p):
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def case_steps(n):
    DBOS.start_workflow(steps, 10).get_result()  # warm-up
    started, cpu = time.perf_counter(), time.process_time()
    assert DBOS.start_workflow(steps, n).get_result() == n
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"per_step_us": marks["steps"] / n * 1e6, "total_s": total, "cpu_us_per_unit": cpu / n * 1e6}


def case_concurrent(n):
    for h in [DBOS.start_workflow(one, i) for i in range(20)]:  # warm-up
        h.get_result()
    started, cpu = time.perf_counter(), time.process_time()
    handles = [DBOS.start_workflow(one, i) for i in range(n)]
    admitted = time.perf_counter() - started
    results = [h.get_result() for h in handles]
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert results == list(range(n))
    return {"total_s": total, "starts_per_s": n / admitted, "cpu_us_per_unit": cpu / n * 1e6}


def case_sequential(n):
    for i in range(20):  # warm-up
        DBOS.start_workflow(one, i).get_result()
    latencies = []
    cpu = time.process_time()
    for i in range(n):
        started = time.perf_counter()
        DBOS.start_workflow(one, i).get_result()
        latencies.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu
    latencies.sort()
    return {
        "mean_s": statistics.fmean(latencies),
        "p50_ms": pct(latencies, 50) * 1e3,
        "p99_ms": pct(latencies, 99) * 1e3,
        "max_ms": latencies[-1] * 1e3,
        "cpu_us_per_unit": cpu / n * 1e6,
    }


def case_queued(name, n, gate, polling):
    """``n`` one-step workflows enqueued at once on a queue of concurrency ``gate``, all awaited."""
    kwargs = {} if polling is None else {"polling_interval_sec": polling}
    queue = DBOS.register_queue(name, global_concurrency=gate, **kwargs)
    wait = {} if polling is None else {"polling_interval_sec": polling}
    for h in [queue.enqueue(one, i) for i in range(gate)]:  # warm-up: the queue's worker thread is up
        h.get_result(**wait)
    started, cpu = time.perf_counter(), time.process_time()
    handles = [queue.enqueue(one, i) for i in range(n)]
    admitted = time.perf_counter() - started
    results = [h.get_result(**wait) for h in handles]
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert results == list(range(n))
    return {"total_s": total, "starts_per_s": n / admitted, "cpu_us_per_unit": cpu / n * 1e6}


DBOS(config={"name": "lockgate-bench", "system_database_url": settings["url"], "log_level": "WARNING"})
DBOS.launch()
try:
    cases = {
        "a": case_steps(settings["steps"]),
        "b": case_concurrent(settings["concurrent"]),
        "c": case_sequential(settings["sequential"]),
        "q": case_queued("bench_q", settings["queued"], settings["gate"], None),
    }
    if settings["fast_poll"]:
        cases["q'"] = case_queued("bench_q_fast", settings["queued"], settings["gate"], settings["fast_poll"])
finally:
    DBOS.destroy()
print(settings["mark"] + json.dumps({"version": version("dbos"), "api": "sync", "cases": cases}), flush=True)
'''


# -- lockgate's case (q) --------------------------------------------------------------------------


def build_gated_app() -> lg.App:
    app = lg.App()

    @app.workflow(name="bench.gated", concurrency=lg.Concurrency(limit=GATE))
    async def gated(ctx: lg.Context, p: Item) -> int:
        return int(await ctx.step("s", trivial, p.i))

    return app


async def case_gated(url: str, n: int, recording: str) -> Case:
    """(q): ``n`` one-step workflows behind ``Concurrency(limit=10)``, started at once, all awaited.

    The starts beyond the first ten are parked at the gate: their handles have no run to
    await yet (``run_id`` is ``None``), so the end is seen through ``engine.flow()``, read
    every ``GATE_POLL`` seconds until nothing is parked or in flight; then every run is
    checked to have succeeded.
    """
    async with lg.Engine(build_gated_app(), url, recording=recording) as engine:
        await _offer_gated(engine, GATE)  # warm-up
        started, cpu = time.perf_counter(), time.process_time()
        admitted = await _offer_gated(engine, n)
        total, cpu = time.perf_counter() - started, time.process_time() - cpu
        runs = await engine.list_runs(workflow="bench.gated", limit=n + 2 * GATE)
    ended = [r for r in runs if r.status == "succeeded"]
    assert len(ended) == len(runs) == n + GATE, f"{len(ended)} of {len(runs)} runs succeeded, {n + GATE} expected"
    return Case(
        "q",
        f"{n:,} one-step workflows through a gate of {GATE}",
        n / total,
        "workflows/s",
        total / n * 1e6,
        {"total_s": total, "starts_per_s": n / admitted, "cpu_us_per_unit": cpu / n * 1e6},
    )


async def _offer_gated(engine: lg.Engine, n: int) -> float:
    """Start ``n`` gated workflows at once and wait until all have ended; the seconds the starts took."""
    started = time.perf_counter()
    handles = await asyncio.gather(*(engine.start("bench.gated", {"i": i}) for i in range(n)))
    admitted = time.perf_counter() - started
    await asyncio.gather(*(h.result(timeout=600) for h in handles if h.run_id is not None))
    while any(row.queued or row.in_flight for row in await engine.flow(workflow="bench.gated")):
        await asyncio.sleep(GATE_POLL)
    return admitted


# -- the two systems ------------------------------------------------------------------------------


@dataclass
class System:
    """One system's figures: its floor (measured just before its cases) and its cases by letter."""

    name: str
    floor: Floor
    cases: dict[str, Case] = field(default_factory=dict)
    about: dict[str, Any] = field(default_factory=dict)


def run_lockgate(server_url: str, scratch: list[str], args: argparse.Namespace) -> System:
    system = System("lockgate", postgres_floor(_create_database(server_url, scratch), seconds=args.floor_seconds))

    floor_url = _create_database(server_url, scratch)

    def sample_floor() -> float:
        return postgres_floor(floor_url, seconds=args.floor_seconds / 4).us_per_commit

    async def cases() -> list[Case]:
        return [
            await case_steps(_create_database(server_url, scratch), args.steps, args.recording, sample_floor),
            await case_concurrent(_create_database(server_url, scratch), args.concurrent, args.recording),
            await case_sequential(_create_database(server_url, scratch), args.sequential, args.recording),
            await case_gated(_create_database(server_url, scratch), args.queued, args.recording),
        ]

    for case in asyncio.run(cases()):
        case.ratio = ratio(case.unit_us, floor_us(case, system.floor))
        system.cases[case.case] = case
    system.about = {"recording": args.recording, "api": "asyncio"}
    return system


def dbos_python(venv: Path) -> Path:
    """The python of a virtual environment where DBOS 3.4 imports: ``venv``, created and filled if need be."""
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    check = f"import dbos, importlib.metadata as m; assert m.version('dbos').startswith({DBOS_SERIES!r})"
    if python.exists() and subprocess.run([python, "-c", check], capture_output=True, check=False).returncode == 0:
        return python
    print(f"installing {DBOS_REQUIREMENT} into {venv} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", DBOS_REQUIREMENT], check=True)
    subprocess.run([python, "-c", check], check=True)
    return python


def run_dbos(server_url: str, scratch: list[str], args: argparse.Namespace, python: Path) -> System:
    system = System("DBOS", postgres_floor(_create_database(server_url, scratch), seconds=args.floor_seconds))
    settings = {
        "url": _create_database(server_url, scratch),
        "steps": args.dbos_steps,
        "concurrent": args.dbos_concurrent,
        "sequential": args.dbos_sequential,
        "queued": args.dbos_queued,
        "gate": GATE,
        "fast_poll": args.dbos_fast_poll,
        "mark": RESULT_MARK,
    }
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-dbos-") as folder:
        driver = Path(folder) / "driver.py"
        driver.write_text(DRIVER)
        done = subprocess.run(
            [python, str(driver), json.dumps(settings)],
            cwd=folder,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
            timeout=args.dbos_timeout,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"bench.dbos: the DBOS driver failed (exit {done.returncode}); stdout:\n{done.stdout}")
    figures: dict[str, Any] = json.loads(lines[-1].removeprefix(RESULT_MARK))
    system.about = {"version": figures["version"], "api": figures["api"]}
    for letter, extra in figures["cases"].items():
        n = _count(args, "DBOS", letter)
        if letter == "a":
            value = unit_us = extra.pop("per_step_us")
        elif letter == "c":
            value = extra.pop("mean_s") * 1e3
            unit_us = value * 1e3
        else:
            value, unit_us = n / extra["total_s"], extra["total_s"] / n * 1e6
        system.cases[letter] = Case(letter, LABELS[letter], value, UNITS[letter], unit_us, extra)
        system.cases[letter].ratio = ratio(unit_us, system.floor.us_per_commit)
    return system


# -- report ---------------------------------------------------------------------------------------


def _count(args: argparse.Namespace, system: str, letter: str) -> int:
    name = COUNTS[letter]
    return int(getattr(args, f"dbos_{name}" if system == "DBOS" else name))


def _detail(name: str, case: Case, args: argparse.Namespace) -> str:
    bits = [f"n={_count(args, name, case.case):,}"]
    if case.case == "c":
        bits.append(f"p50 {case.extra['p50_ms']:.2f}, p99 {case.extra['p99_ms']:.2f} ms")
    bits.append(f"cpu {case.extra['cpu_us_per_unit']:,.0f} µs/unit")
    if "floor_us" in case.extra:
        bits.append(f"floor {case.extra['floor_us']:,.0f} µs interleaved")
    if name == "DBOS" and case.case == "q":
        bits.append("queue polled every 1 s (DBOS's default)")
    if name == "DBOS" and case.case == "q'":
        bits.append(f"queue and results polled every {args.dbos_fast_poll * 1e3:g} ms")
    return f"{name}: {', '.join(bits)}"


def _rows(lockgate: System, dbos: System, args: argparse.Namespace) -> list[list[Cell]]:
    per_s = f"{lockgate.floor.commits_per_s:,.0f} / {dbos.floor.commits_per_s:,.0f} commits/s"
    rows: list[list[Cell]] = [
        [
            "(d) floor: 1-row insert per transaction",
            lockgate.floor.us_per_commit,
            dbos.floor.us_per_commit,
            "µs/commit",
            None,
            None,
            None,
            f"{per_s}, each measured just before that system's cases",
        ]
    ]
    for letter, theirs in dbos.cases.items():
        ours = lockgate.cases["q" if letter == "q'" else letter]
        details = [_detail("DBOS", theirs, args)]
        if letter != "q'":
            details.insert(0, _detail("lockgate", ours, args))
        rows.append(
            [
                LABELS[letter],
                ours.value,
                theirs.value,
                theirs.unit,
                ratio(theirs.unit_us, ours.unit_us),
                ours.ratio,
                theirs.ratio,
                "; ".join(details),
            ]
        )
    return rows


def _document(lockgate: System, dbos: System, args: argparse.Namespace) -> dict[str, Any]:
    def figures(system: System) -> dict[str, Any]:
        return {
            **system.about,
            "floor": system.floor.to_dict(),
            "cases": {
                letter: {
                    "label": c.label,
                    "value": c.value,
                    "unit": c.unit,
                    "unit_us": c.unit_us,
                    "ratio_to_floor": c.ratio,
                    **c.extra,
                }
                for letter, c in system.cases.items()
            },
        }

    speed_ups = {
        letter: ratio(c.unit_us, lockgate.cases["q" if letter == "q'" else letter].unit_us)
        for letter, c in dbos.cases.items()
    }
    parts = urlsplit(args.store)
    return {
        "bench": "dbos",
        "store": "postgres",
        "server": f"{parts.hostname}:{parts.port or 5432}",
        "settings": {
            "lockgate": {
                "steps": args.steps,
                "concurrent": args.concurrent,
                "sequential": args.sequential,
                "queued": args.queued,
                "recording": args.recording,
            },
            "dbos": {
                "steps": args.dbos_steps,
                "concurrent": args.dbos_concurrent,
                "sequential": args.dbos_sequential,
                "queued": args.dbos_queued,
                "fast_poll_s": args.dbos_fast_poll,
            },
            "gate": GATE,
            "floor_seconds": args.floor_seconds,
        },
        "machine": machine(),
        "lockgate": figures(lockgate),
        "dbos": figures(dbos),
        "speed_up": speed_ups,  # DBOS's time per unit over lockgate's
    }


# -- running --------------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dbos", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", required=True, help="a postgresql:// URL: the server both systems use (scratch databases on it)"
    )
    parser.add_argument("--json", help="where to write the JSON (default bench/results/dbos-postgres.json)")
    parser.add_argument("--steps", type=int, default=2000, help="lockgate, case (a): steps in the one workflow")
    parser.add_argument("--concurrent", type=int, default=2000, help="lockgate, case (b): workflows started at once")
    parser.add_argument("--sequential", type=int, default=500, help="lockgate, case (c): start-and-await calls")
    parser.add_argument("--queued", type=int, default=2000, help="lockgate, case (q): workflows through the gate")
    parser.add_argument("--dbos-steps", type=int, default=500, help="DBOS, case (a)")
    parser.add_argument("--dbos-concurrent", type=int, default=500, help="DBOS, case (b)")
    parser.add_argument("--dbos-sequential", type=int, default=200, help="DBOS, case (c)")
    parser.add_argument("--dbos-queued", type=int, default=200, help="DBOS, cases (q) and (q')")
    parser.add_argument(
        "--dbos-fast-poll",
        type=float,
        default=0.01,
        help="DBOS, case (q'): seconds between polls of the queue and of the results (0 skips the case)",
    )
    parser.add_argument("--dbos-venv", default=str(VENV), help="DBOS's virtual environment (made if need be)")
    parser.add_argument("--dbos-timeout", type=float, default=1800, help="seconds the DBOS side may take")
    parser.add_argument("--recording", choices=("full", "coarse"), default="full", help="lockgate's recording")
    parser.add_argument("--floor-seconds", type=float, default=1.0, help="how long each floor loop runs")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    if not args.store.startswith(("postgresql://", "postgres://")):
        parser.error(f"--store must be a postgresql:// URL (DBOS and lockgate on one server), not {args.store!r}")
    for name in sorted(set(COUNTS.values())):
        for option in (name, f"dbos_{name}"):
            if getattr(args, option) < 1:
                parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if args.dbos_fast_poll < 0:
        parser.error("--dbos-fast-poll must be at least 0")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    python = dbos_python(Path(args.dbos_venv))
    scratch: list[str] = []
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM unwinds as Ctrl-C does: the scratch databases go
    try:
        lockgate = run_lockgate(args.store, scratch, args)
        dbos = run_dbos(args.store, scratch, args, python)
    finally:
        _drop_databases(args.store, scratch)
    version = dbos.about["version"]
    print_table(
        f"lockgate beside DBOS Transact {version} on PostgreSQL (DBOS: sync API; lockgate: recording={args.recording})",
        ["case", "lockgate", "DBOS", "unit", "lockgate speed-up", "lockgate x floor", "DBOS x floor", "detail"],
        _rows(lockgate, dbos, args),
        plain=args.plain,
    )
    path = write_json(args.json or HERE / "results" / "dbos-postgres.json", _document(lockgate, dbos, args))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
