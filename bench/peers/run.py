"""lockgate beside Celery, RQ, procrastinate, pgqueuer, huey and DBOS, in one run.

    python -m bench.peers                                   # every peer, every case
    python -m bench.peers --peers celery,dbos --cases j1,j4 --scale 0.2 --plain

Every system runs the same jobs (``apps/probe.py``: a no-op, a 20 ms sleep, or a 5 s hold
with a side effect) in worker processes started the way its users start them (``systems.py``),
each installed into its own virtual environment with pinned versions (``venvs.py``); the jobs
are enqueued and measured by a driver in that environment (``apps/driver.py``) through Redis
records common to all. Cases:

(j1) ``--jobs`` (5,000) no-op jobs enqueued at once, then all done: jobs/s from the first
     enqueue to the last completion;
(j2) enqueue one job and wait for its end, 500 times in sequence: latency p50 (p99 in the detail;
     stopped after ``--cap`` seconds for a system whose polling makes it slower);
(j3) 2,000 jobs of 20 ms under a global concurrency of 10: jobs/s and the most seen in flight
     (a system without a global limit gets workers whose slots add up to 10);
(j4) 600 jobs under a rate limit of 50/s across 3 worker processes: the achieved rate and the
     most started in any rolling second (what a user really gets from a per-worker limit);
(j5) one worker holding 100 jobs of 5 s is killed with SIGKILL and started again: jobs lost and
     jobs run twice, from a side table each job increments when it completes.

Worker processes: 3 of concurrency 4 unless the case says otherwise (j5: one of 100); lockgate's run
with `lockgate serve`'s default slots (its runs are coroutines: 4 would copy a thread pool). The
floors beside the figures: one-row commits/s of PostgreSQL and of SQLite (synchronous FULL, the
setting of lockgate-sqlite), and Redis round trips/s. Scratch PostgreSQL databases are
created per system and case and dropped at the end; Redis databases 14 (the probe) and 15
(the brokers) are emptied before each case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from ..floor import postgres_floor, sqlite_floor
from ..report import Cell, machine, print_table, write_json
from . import venvs
from .systems import SYSTEMS, Case, System, Workers

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[2]
CASES = {
    "j1": "5,000 no-op jobs at once",
    "j2": "enqueue and await, in sequence",
    "j3": "2,000 x 20 ms, global concurrency 10",
    "j4": "600 jobs, rate limit 50/s, 3 processes",
    "j5": "kill -9 of a worker holding 100",
}
HIGHER_IS_BETTER = {"j1": True, "j2": False, "j3": True, "j4": None, "j5": None}


def _db_url(server: str, name: str) -> str:
    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def _recreate(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return _db_url(server, name)


def _drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM, wait: float = 15.0) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    deadline = time.monotonic() + wait
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Run:
    """One system through one case: scratch store, workers, driver, teardown."""

    def __init__(self, args: argparse.Namespace, cache: Path, scratch: Path, system: System, case: Case) -> None:
        self.args, self.cache, self.system, self.case = args, cache, system, case
        self.bin = cache / system.env / "bin"
        # the run's own name: workers left over from an interrupted run never join this one
        self.db = f"peers_{system.name.replace('-', '_')}_{case.name}_{os.getpid()}"
        self.sqlite = scratch / f"{system.name}-{case.name}.db"
        self.logs = cache / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        redis = args.redis.rstrip("/")
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PEERS_PROBE": f"{redis}/14",
            "PEERS_BROKER": f"{redis}/15",
            "PEERS_SIDE": _db_url(args.store, "peers_side"),
            "PEERS_SQLITE": str(self.sqlite),
        }

    def store_url(self) -> str:
        if self.system.store == "postgres":
            return _recreate(self.args.store, self.db)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.sqlite}{suffix}").unlink(missing_ok=True)
        if self.system.store == "sqlite":
            return f"sqlite:///{self.sqlite}"
        return self.env["PEERS_BROKER"]

    def driver(self, *argv: str, stdin: int | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(self.bin / "python"), "-m", "bench.peers.apps.driver", *argv],
            cwd=REPO, env=self.env, stdin=stdin, stdout=subprocess.PIPE,
        )

    def start_worker(self, command: list[str], index: int) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{self.system.name}-{self.case.name}-w{index}.log", "ab")
        return subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log, stderr=log, start_new_session=True)

    def execute(self) -> dict[str, Any]:
        url = self.store_url()
        if self.system.store == "postgres":
            self.env["PEERS_PG"] = url
        plan = self.system.plan(self.bin, url, self.case)
        if isinstance(plan, str):
            return {"value": None, "na": plan}
        self.env.update(plan.env)
        self.env.update(self._sizes())
        subprocess.run([str(self.bin / "python"), "-m", "bench.peers.apps.driver", "-", "reset"],
                       cwd=REPO, env=self.env, check=True)
        for command in plan.setup:
            subprocess.run(command, cwd=REPO, env=self.env, check=True, stdout=subprocess.DEVNULL)
        workers = [self.start_worker(c, i) for i, c in enumerate(plan.commands)]
        try:
            result = self._drive(plan, workers)
        finally:
            _stop(workers)
            if self.system.store == "postgres":
                _drop(self.args.store, self.db)
        result["settings"] = plan.settings
        return result

    def _sizes(self) -> dict[str, str]:
        a, case = self.args, self.case
        jobs = {
            "j1": a.jobs, "j2": a.sequential, "j3": a.gated, "j4": a.rated,
            "j5": 1 if self.system.name == "rq" else a.held,
        }[case.name]
        return {
            "PEERS_JOBS": str(jobs),
            "PEERS_WARMUP": str(1 if case.durability else case.processes * case.concurrency),
            "PEERS_CAP_S": str(a.cap),
            "PEERS_LIMIT": str(case.limit or 0),
            "PEERS_RATE_TARGET": str(case.rate or 0),
            "PEERS_J5_WAIT_S": str(a.j5_wait),
            "PEERS_SETTLE_S": "10",
        }

    def _drive(self, plan: Workers, workers: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
        driver = self.driver(self.system.app, self.case.name, stdin=subprocess.PIPE if self.case.durability else None)
        assert driver.stdout is not None
        deadline = time.monotonic() + self.args.timeout
        before: dict[str, float] | None = None
        try:
            while True:
                ready, _, _ = select.select([driver.stdout], [], [], 1.0)
                if time.monotonic() > deadline:
                    return {"value": None, "error": f"no result after {self.args.timeout} s"}
                if not ready:
                    if driver.poll() is not None:
                        return {"value": None, "error": f"driver exited {driver.returncode}"}
                    continue
                line = driver.stdout.readline().decode()
                if not line:
                    driver.wait()
                    return {"value": None, "error": f"driver exited {driver.returncode}"}
                if line.startswith("MEASURING"):
                    before = self._costs(workers)
                elif line.startswith("HOLDING"):
                    self._kill_and_restart(plan, workers)
                    assert driver.stdin is not None
                    driver.stdin.write(b"go\n")
                    driver.stdin.flush()
                elif line.startswith("RESULT "):
                    result: dict[str, Any] = json.loads(line[len("RESULT "):])
                    if before is not None and result.get("jobs"):
                        after = self._costs(workers)
                        jobs = int(result["jobs"])
                        result.update({f"{k}_per_job": (after[k] - before[k]) / jobs for k in after if k in before})
                    return result
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.wait()

    def _costs(self, workers: list[subprocess.Popen[bytes]]) -> dict[str, float]:
        """What the workers spent so far: their CPU (ms, from /proc) and, on PostgreSQL, the commits
        of the case's database (the driver's included)."""
        cpu = 0.0
        for proc in workers:
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") * 1000
        found = {"worker_cpu_ms": cpu}
        if self.system.store == "postgres":
            with psycopg.connect(self.args.store, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
                    " WHERE datname = %s", (self.db,)).fetchone()
            if row is not None:
                found.update(commits=float(row[0]), rows_written=float(row[1]))
        return found

    def _kill_and_restart(self, plan: Workers, workers: list[subprocess.Popen[bytes]]) -> None:
        _stop(workers, signal.SIGKILL, wait=5)
        workers[:] = [self.start_worker(c, i) for i, c in enumerate(plan.commands)]


def _cases(args: argparse.Namespace) -> list[Case]:
    table = {
        "j1": Case("j1", 3, 4),
        "j2": Case("j2", 3, 4),
        "j3": Case("j3", 3, 4, limit=10),
        "j4": Case("j4", 3, 4, rate=50),
        "j5": Case("j5", 1, 100, durability=True),
    }
    return [table[name] for name in args.cases]


def _floors(args: argparse.Namespace, cache: Path, scratch: Path) -> dict[str, dict[str, Any]]:
    floors = {
        "postgres": postgres_floor(_recreate(args.store, "peers_floor")).to_dict(),
        "sqlite": sqlite_floor(str(scratch / "floor.db"), "full").to_dict(),
    }
    _drop(args.store, "peers_floor")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PEERS_PROBE": f"{args.redis.rstrip('/')}/14",
           "PEERS_BROKER": f"{args.redis.rstrip('/')}/15"}
    out = subprocess.run([str(venvs.python_of(cache, "lockgate")), "-m", "bench.peers.apps.driver", "-", "floor"],
                         cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
    floors["redis"] = json.loads(out.split("RESULT ", 1)[1])
    return floors


def _detail(case: str, r: dict[str, Any]) -> str:
    if r.get("na"):
        return f"n/a: {r['na']}"
    if r.get("error"):
        return f"error: {r['error']}"
    if case == "j1":
        return f"enqueue {r['enqueue_s']:.2f} s, all done {r['seconds']:.2f} s"
    if case == "j2":
        capped = f", stopped after {r['jobs']} (cap)" if r.get("capped") else ""
        return f"p99 {r['p99_ms']:.1f} ms{capped}"
    if case == "j3":
        found = f"max in flight {r['max_in_flight']} (limit {r['limit']}); ideal {r['ideal_jobs_per_s']:.0f}/s"
        if r.get("gap_p50_ms") is not None:
            found += (f"; slot use {r['slot_use']:.0%}, end -> next start"
                      f" p50 {r['gap_p50_ms']:.1f} / p99 {r['gap_p99_ms']:.1f} ms")
        if r.get("worker_cpu_ms_per_job") is not None:
            found += f"; workers' CPU {r['worker_cpu_ms_per_job']:.2f} ms/job"
        if r.get("commits_per_job") is not None:
            found += f", {r['commits_per_job']:.2f} commits/job"
        return found
    if case == "j4":
        return f"max started in a rolling second: {r['max_in_rolling_second']} (limit {r['rate']})"
    return (f"held {r['held_when_killed']}; lost {r['lost']} of {r['jobs']}, run twice {r['run_twice']}"
            f"; watched {r['watched_s']:.0f} s")


def _ratio(case: str, value: float | None, reference: float | None) -> float | None:
    """How many times lockgate's figure is better than this one (throughput: lg/peer; latency: peer/lg)."""
    better = HIGHER_IS_BETTER[case]
    if better is None or not value or not reference:
        return None
    return reference / value if better else value / reference


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default="celery,rq,procrastinate,pgqueuer,huey,dbos",
                        help="comma-separated peers (lockgate runs on the --lockgate stores); none: lockgate only")
    parser.add_argument("--cases", default="j1,j2,j3,j4,j5")
    parser.add_argument("--lockgate", default="sqlite,pg", help="lockgate's stores to run: sqlite, pg or both")
    parser.add_argument("--lockgate-repo", default=str(REPO),
                        help="the lockgate checkout its environment installs (another one to compare; give it a --cache"
                             " of its own)")
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server for the PostgreSQL systems and the side table")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--cache", default=str(REPO / "bench" / ".tmp-peers"), help="where the environments live")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the job counts of j1-j4")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds after which j2 stops")
    parser.add_argument("--j5-wait", type=float, default=90.0, help="seconds j5 watches after the restart")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one system may take for one case")
    parser.add_argument("--json", default=str(REPO / "bench" / "results" / "peers.json"))
    parser.add_argument("--plain", action="store_true", help="plain text instead of a rich table")
    args = parser.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    args.jobs, args.sequential = max(10, int(5000 * args.scale)), max(10, int(500 * args.scale))
    args.gated, args.rated, args.held = max(20, int(2000 * args.scale)), max(60, int(600 * args.scale)), 100
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    wanted = set(args.peers.split(",")) | {f"lockgate-{store}" for store in args.lockgate.split(",") if store}
    systems = [s for s in SYSTEMS if s.name in wanted]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    for env in dict.fromkeys(s.env for s in systems):
        venvs.ensure(cache, env, Path(args.lockgate_repo))
    print("versions: " + "; ".join(f"{s.env}: {' '.join(venvs.PINS[s.env])}" for s in systems if s.env != "lockgate"))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        scratch = Path(tmp)
        _recreate(args.store, "peers_side")
        floors = _floors(args, cache, scratch)
        try:
            for case in _cases(args):
                for system in systems:
                    print(f"{case.name} {system.name} ...", flush=True)
                    started = time.monotonic()
                    try:
                        result = Run(args, cache, scratch, system, case).execute()
                    except subprocess.CalledProcessError as failed:
                        command = " ".join(map(str, failed.cmd[:3]))
                        result = {"value": None, "error": f"{command} exited {failed.returncode}"}
                    result["wall_s"] = time.monotonic() - started
                    results.setdefault(case.name, {})[system.name] = result
                    print(f"  {_detail(case.name, result)}", flush=True)
        finally:
            _drop(args.store, "peers_side")
    rows: list[list[Cell]] = []
    for case_name, by_system in results.items():
        for name, r in by_system.items():
            reference_pg = by_system.get("lockgate-pg", {}).get("value")
            reference_sqlite = by_system.get("lockgate-sqlite", {}).get("value")
            r["lockgate_pg_x"] = _ratio(case_name, r.get("value"), reference_pg)
            r["lockgate_sqlite_x"] = _ratio(case_name, r.get("value"), reference_sqlite)
            rows.append([case_name, name, r.get("value"), r.get("unit", ""), r["lockgate_pg_x"],
                         r["lockgate_sqlite_x"], _detail(case_name, r), "; ".join(r.get("settings", []))])
    print_table("lockgate beside its peers (lockgate x: how many times lockgate's figure is better)",
                ["case", "system", "figure", "unit", "lockgate-pg x", "lockgate-sqlite x", "detail", "settings"],
                rows, plain=args.plain)
    print("floors: " + "; ".join(f"{k} {v['commits_per_s']:,.0f}/s ({v['us_per_commit']:.0f} µs)"
                                 for k, v in floors.items()))
    document = {"machine": machine(), "cases": CASES, "pins": venvs.PINS, "floors": floors, "results": results}
    print(f"wrote {write_json(args.json, document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
