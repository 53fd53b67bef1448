"""Failover time on PostgreSQL: from ``kill -9`` of the worker holding a run to its resumption elsewhere.

    python -m bench.failover                                  # 3 workers, 5 kills, lease 2s
    python -m bench.failover --store postgresql://postgres@127.0.0.1:5432/postgres --kills 10 --lease 1s

``--store`` names the server; the benchmark works in a scratch database of its own, dropped
afterwards. ``--workers`` ``lockgate serve`` processes run ``tests/cluster/app.py``. Each round
starts one run whose step waits for a go-ahead, finds the worker executing it, kills that
worker with SIGKILL, and times two instants after the kill, both from the database:

- *claimed*: another worker holds the run (its claim's ``entered_at``);
- *resumed*: the new holder's body is back in the interrupted step (the step's own side-effect row).

A replacement worker is started only after the round is measured (a worker starting on the
same host would release a dead local worker's runs at once, which is not what is measured).
Target: median resumption within the lease + 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import lockgate as lg
from lockgate.durations import to_seconds

from .core import HERE, _create_database, _drop_databases
from .report import Cell, machine, print_table, write_json
from .signals import sigterm_cancels

__all__ = ["main"]

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


async def run_rounds(url: str, args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE.parent))  # the worker app lives with the cluster tests
    from tests.cluster.app import Job
    from tests.cluster.app import app as cluster_app
    from tests.cluster.harness import Cluster, until

    async with lg.Client(cluster_app, url) as client:  # migrates the scratch database
        cluster = Cluster(url, logs)
        await cluster.setup()
        cluster.spawn(args.workers, lease=args.lease)
        with sigterm_cancels():  # a SIGTERM stops the workers too, as Ctrl-C does
            try:
                await cluster.ready()
                rounds = []
                for n in range(args.kills):
                    await cluster.execute("DELETE FROM cluster_flags")
                    handle = await client.start("cluster.gated", Job(n=n))
                    run_id = handle.run_id
                    assert run_id is not None

                    async def started(rid: str = run_id) -> list[tuple[Any, ...]]:
                        return await cluster.fetch(
                            "SELECT e.pid, r.epoch FROM cluster_effects e JOIN lockgate_runs r ON r.id = e.run_id "
                            "WHERE e.run_id = %s AND e.step = 'work-start'",
                            rid,
                        )

                    [(pid, epoch)] = await until(started, timeout=30, what="the run's step started")
                    victim = cluster.by_pid(pid)
                    killed_at = victim.kill()

                    async def resumed(
                        rid: str = run_id, old: int = epoch, dead: int = victim.pid
                    ) -> list[tuple[Any, ...]]:
                        return await cluster.fetch(
                            "SELECT r.entered_at, e.at, e.pid FROM lockgate_runs r JOIN cluster_effects e "
                            "ON e.run_id = r.id AND e.step = 'work-start' AND e.pid <> %s "
                            "WHERE r.id = %s AND r.epoch > %s",
                            dead,
                            rid,
                            old,
                        )

                    [(claimed_at, resumed_at, survivor)] = await until(
                        resumed, timeout=args.lease_s * 4 + 30, what="the run resumed on another worker"
                    )
                    await cluster.execute("INSERT INTO cluster_flags (name) VALUES ('release')")
                    await client.result(run_id, timeout=60)
                    rounds.append(
                        {
                            "round": n + 1,
                            "killed_pid": victim.pid,
                            "survivor_pid": int(survivor),
                            "claimed_s": float(claimed_at) - killed_at,
                            "resumed_s": float(resumed_at) - killed_at,
                        }
                    )
                    print(
                        f"round {n + 1}: killed {victim.pid}, claimed after {rounds[-1]['claimed_s']:.3f}s, "
                        f"resumed on {survivor} after {rounds[-1]['resumed_s']:.3f}s",
                        flush=True,
                    )
                    replacement = cluster.spawn(1, lease=args.lease)
                    await cluster.ready(replacement)
                return rounds
            finally:
                await cluster.close()


def summarise(rounds: list[dict[str, Any]], lease: float) -> dict[str, Any]:
    claimed = [r["claimed_s"] for r in rounds]
    resumed = [r["resumed_s"] for r in rounds]
    median = statistics.median(resumed)
    return {
        "claimed_median_s": statistics.median(claimed),
        "claimed_max_s": max(claimed),
        "resumed_median_s": median,
        "resumed_max_s": max(resumed),
        "target_s": lease + 1.0,
        "met": median <= lease + 1.0,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=DEFAULT_SERVER, help="PostgreSQL server URL (a scratch database is used)")
    parser.add_argument("--kills", type=int, default=5, help="rounds: one kill -9 each")
    parser.add_argument("--lease", default="2s", help="the workers' --lease")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--json", help="where to write the JSON (default bench/results/failover-postgres.json)")
    args = parser.parse_args(argv)
    if not args.store.startswith(("postgresql:", "postgres:")):
        parser.error("--store must be a postgresql:// server URL: failover is measured between processes")
    if args.kills < 1 or args.workers < 2:
        parser.error("--kills must be >= 1 and --workers >= 2 (a survivor is needed)")
    try:
        args.lease_s = to_seconds(args.lease, what="--lease")
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    created: list[str] = []
    url = _create_database(args.store, created)
    try:
        with tempfile.TemporaryDirectory(prefix="lockgate-failover-") as logs:
            rounds = asyncio.run(run_rounds(url, args, Path(logs)))
    finally:
        _drop_databases(args.store, created)
    summary = summarise(rounds, args.lease_s)
    rows: list[list[Cell]] = [
        [r["round"], str(r["killed_pid"]), str(r["survivor_pid"]), r["claimed_s"], r["resumed_s"]] for r in rounds
    ]
    rows.append(["median", None, None, summary["claimed_median_s"], summary["resumed_median_s"]])
    rows.append(["max", None, None, summary["claimed_max_s"], summary["resumed_max_s"]])
    title = f"failover after kill -9 ({args.workers} workers, lease {args.lease_s:g}s, PostgreSQL)"
    print_table(title, ["round", "killed pid", "survivor pid", "claimed (s)", "resumed (s)"], rows)
    verdict = "met" if summary["met"] else "MISSED"
    print(f"target: median resumption <= lease + 1s = {summary['target_s']:g}s: {verdict}")
    document = {
        "benchmark": "failover",
        "store": "postgres",
        "workers": args.workers,
        "lease_s": args.lease_s,
        "kills": args.kills,
        "machine": machine(),
        "rounds": rounds,
        "summary": summary,
    }
    path = write_json(args.json or HERE / "results" / "failover-postgres.json", document)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
