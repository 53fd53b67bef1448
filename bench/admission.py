"""Admission figures: durable starts per second through each control, and drain rows per second.

    python -m bench.admission                      # SQLite, synchronous FULL and NORMAL
    python -m bench.admission --store postgresql://postgres@127.0.0.1:5432/postgres

Every start is decided by the real gate and committed (group commit) before its handle
returns; starts come from ``--callers`` concurrent callers through a ``Client`` (the gate
runs in the caller's process; nothing executes). Cases, each on a fresh database:

- ``none``: a workflow with no control (the fast path);
- ``concurrency``: ``Concurrency(limit=10)`` over 100 keys (admitted, then queued);
- ``debounce``: ``Debounce(period="1h")`` over 100 keys (folds);
- ``throttle``: ``Throttle(limit=1000, period="1h")`` (admitted, then queued);
- ``rate_limit``: ``RateLimit(limit=1000, period="1h")`` (admitted, then dropped);
- ``throttled_slot``: ``Throttle(limit=1000, period="1h")`` before ``Concurrency(limit=10)`` over
  100 keys, as a provider's two limits are declared (admitted, then queued for a slot);
- ``limited_slot``: ``RateLimit(limit=1000, period="1h")`` before ``Concurrency(limit=10)`` over
  100 keys (admitted, then queued for a slot, then dropped);
- ``batch``: ``Batch(max_size=100)`` over 10 keys (flushes in the arrival's transaction);
- ``drain``: ``--drain`` starts parked by a pause, then unpaused: park → drain → admit rows/s
  (the drainer's own passes, timed until nothing is parked).

Each figure stands beside the floor of the same database (one-row insert + commit loop).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .core import HERE, Place, _folder, _places
from .floor import Floor
from .report import Cell, machine, print_table, ratio, write_json

__all__ = ["main"]

# Targets on SQLite, durable (synchronous=FULL), from the issue that asked for this benchmark.
# Targets per store (SQLite: in synchronous FULL), by case.
TARGETS = {
    "sqlite": {"none": 20_000.0, "concurrency": 10_000.0, "drain": 20_000.0},
    "postgres": {"concurrency": 1_000.0},
}
CASES = (
    "none",
    "concurrency",
    "debounce",
    "throttle",
    "rate_limit",
    "throttled_slot",
    "limited_slot",
    "batch",
    "drain",
)


class Job(BaseModel):
    key: str
    n: int


class Jobs(BaseModel):
    items: list[Job]


async def noop(ctx: lg.Context, p: Job) -> int:
    return p.n


async def noop_batch(ctx: lg.Context, p: Jobs) -> int:
    return len(p.items)


def build_app() -> lg.App:
    app = lg.App()

    def key(p: Job) -> str:  # one key function for every control
        return p.key

    app.workflow(name="none")(noop)
    app.workflow(name="concurrency", concurrency=lg.Concurrency(limit=10, key=key))(noop)
    app.workflow(name="debounce", debounce=lg.Debounce(period="1h", key=key))(noop)
    app.workflow(name="throttle", throttle=lg.Throttle(limit=1000, period="1h"))(noop)
    app.workflow(name="rate_limit", rate_limit=lg.RateLimit(limit=1000, period="1h"))(noop)
    app.workflow(
        name="throttled_slot",
        throttle=lg.Throttle(limit=1000, period="1h"),
        concurrency=lg.Concurrency(limit=10, key=key),
    )(noop)
    app.workflow(
        name="limited_slot",
        rate_limit=lg.RateLimit(limit=1000, period="1h"),
        concurrency=lg.Concurrency(limit=10, key=key),
    )(noop)
    app.workflow(name="batch", batch=lg.Batch(item=Job, max_size=100, timeout="1h", key=key))(noop_batch)
    app.workflow(name="drain")(noop)
    return app


@dataclass
class Result:
    case: str
    starts: int
    seconds: float
    outcomes: dict[str, int]

    @property
    def per_s(self) -> float:
        return self.starts / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "starts": self.starts,
            "seconds": self.seconds,
            "per_s": self.per_s,
            "outcomes": self.outcomes,
        }


async def _offer_all(client: lg.Client | lg.Engine, workflow: str, n: int, callers: int, keys: int) -> dict[str, int]:
    """``n`` starts of ``workflow`` from ``callers`` concurrent callers; counts per handle status."""
    outcomes: dict[str, int] = {}
    queue = iter(range(n))

    async def caller() -> None:
        for i in queue:
            handle = await client.start(workflow, {"key": f"k{i % keys}", "n": i})
            outcomes[handle.status] = outcomes.get(handle.status, 0) + 1

    await asyncio.gather(*(caller() for _ in range(callers)))
    return outcomes


async def case_starts(url: str, case: str, n: int, callers: int) -> Result:
    keys = {"batch": 10, "debounce": 100, "concurrency": 100}.get(case, 100)
    async with lg.Client(build_app(), url) as client:
        await _offer_all(client, case, min(200, n), callers, keys)  # warm-up: caches, first pages
        started = time.perf_counter()
        outcomes = await _offer_all(client, case, n, callers, keys)
        seconds = time.perf_counter() - started
    return Result(case, n, seconds, outcomes)


async def case_drain(url: str, n: int, callers: int) -> Result:
    app = build_app()
    async with lg.Engine(app, url, max_concurrent_runs=50) as engine:
        await engine.pause("drain")
        parked = await _offer_all(engine, "drain", n, callers, 100)
        started = time.perf_counter()
        await engine.unpause("drain")  # wakes the engine's own drainer
        while any(r.queued for r in await engine.flow(workflow="drain")):
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - started
    return Result("drain", n, seconds, parked)


async def run_mode(place: Place, args: argparse.Namespace) -> tuple[Floor, list[Result]]:
    floor = place.floor(args.floor_seconds)
    results = []
    for case in args.cases:
        if case == "drain":
            results.append(await case_drain(place.url(case), args.drain, args.callers))
        else:
            results.append(await case_starts(place.url(case), case, args.starts, args.callers))
    return floor, results


def _rows(store: str, modes: list[tuple[Place, Floor, list[Result]]]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for place, floor, results in modes:
        rows.append([place.mode, "floor", floor.commits_per_s, "commits/s", "", None, None])
        for r in results:
            target = TARGETS[store].get(r.case) if store == "postgres" or place.mode == "full" else None
            detail = " ".join(f"{k}={v}" for k, v in sorted(r.outcomes.items()))
            rows.append(
                [
                    place.mode,
                    r.case,
                    r.per_s,
                    "rows/s" if r.case == "drain" else "starts/s",
                    detail,
                    ratio(r.per_s, floor.commits_per_s),
                    None if target is None else f">= {target:,.0f}",
                ]
            )
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", default="sqlite", help="'sqlite' (both synchronous modes), a sqlite:/// URL, or a postgresql:// URL"
    )
    parser.add_argument("--json", help="where to write the JSON (default bench/results/admission-<store>.json)")
    parser.add_argument("--dir", help="folder for the SQLite files (default: a scratch folder beside this script)")
    parser.add_argument("--starts", type=int, default=5000, help="starts per case")
    parser.add_argument("--drain", type=int, default=5000, help="parked rows drained in the drain case")
    parser.add_argument("--callers", type=int, default=200, help="concurrent callers")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    parser.add_argument("--floor-seconds", type=float, default=1.0, help="how long each floor loop runs")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    for name in ("starts", "drain", "callers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    modes: list[tuple[Place, Floor, list[Result]]] = []
    with _folder(args.dir) as folder:
        for place in _places(args, folder):
            try:
                floor, results = asyncio.run(run_mode(place, args))
            finally:
                place.cleanup()
            modes.append((place, floor, results))
    store = modes[0][0].store
    print_table(
        f"lockgate admission on {store} ({args.callers} callers)",
        ["mode", "case", "value", "unit", "outcomes", "x floor", "target"],
        _rows(store, modes),
        plain=args.plain,
    )
    document = {
        "benchmark": "admission",
        "store": store,
        "machine": machine(),
        "settings": {"starts": args.starts, "drain": args.drain, "callers": args.callers},
        "modes": [{"mode": p.mode, "floor": f.to_dict(), "cases": [r.to_dict() for r in rs]} for p, f, rs in modes],
    }
    path = write_json(args.json or HERE / "results" / f"admission-{store}.json", document)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
