"""Step flow control figures: many runs' steps under one key with a rate and a parallelism.

    python -m bench.stepflow                      # SQLite, synchronous FULL and NORMAL
    python -m bench.stepflow --store postgresql://postgres@127.0.0.1:5432/postgres

``--runs`` runs (2,000) of a three-step workflow are started at once under
``FlowControl("provider", rate=500, period="1s", parallelism=10)``; each step sleeps
``--step-ms`` (20 ms: ten at once make 500 a second, so both limits bind). One engine
executes them with ``max_concurrent_runs=100``: the waiting runs park. Reported:

- achieved step starts per second, against the configured rate;
- the worst overlap seen (steps running at once, counted in the steps themselves) and the
  most starts seen in any rolling period: neither may exceed its limit;
- the added latency per step from waiting to start: for each step that waited, the time
  from the last step end before its start (the slot it took freeing) to its start, p50/p99.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import statistics
import time
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from .core import HERE, Place, _folder, _places
from .report import machine, print_table, write_json

__all__ = ["main"]

KEY = "provider"


class Job(BaseModel):
    n: int


class Probe:
    """What the steps saw: start and end instants, and the most running at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.running = 0
        self.peak = 0

    async def step(self, n: int) -> int:
        self.starts.append(time.perf_counter())
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running -= 1
            self.ends.append(time.perf_counter())
        return n


def build_app(probe: Probe, rate: int, parallelism: int) -> lg.App:
    app = lg.App()

    @app.workflow(
        name="bench.stepflow", flow_control=lg.FlowControl(KEY, rate=rate, period="1s", parallelism=parallelism)
    )
    async def three_steps(ctx: lg.Context, p: Job) -> int:
        a = await ctx.step("one", probe.step, p.n)
        b = await ctx.step("two", probe.step, a)
        return int(await ctx.step("three", probe.step, b))

    return app


def _max_in_window(starts: list[float], period: float) -> int:
    worst, lo = 0, 0
    for hi, at in enumerate(starts):
        while starts[lo] <= at - period:
            lo += 1
        worst = max(worst, hi - lo + 1)
    return worst


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_case(url: str, runs: int, rate: int, parallelism: int, step_ms: float) -> dict[str, Any]:
    probe = Probe(step_ms / 1000)
    app = build_app(probe, rate, parallelism)
    async with lg.Engine(app, url, max_concurrent_runs=100) as engine:
        began = time.perf_counter()
        handles = await asyncio.gather(*(engine.start("bench.stepflow", {"n": i}) for i in range(runs)))
        for h in handles:
            assert h.run_id is not None
            await engine.result(h.run_id, timeout=600)
        seconds = time.perf_counter() - began
    starts, ends = sorted(probe.starts), sorted(probe.ends)
    waits = []
    for at in starts[parallelism:]:  # every later start waited: all the runs arrived at once
        i = bisect.bisect_right(ends, at)
        if i:
            waits.append(at - ends[i - 1])
    span = starts[-1] - starts[0] if len(starts) > 1 else seconds
    return {
        "runs": runs,
        "steps": len(starts),
        "seconds": seconds,
        "starts_per_s": (len(starts) - 1) / span if span > 0 else 0.0,
        "rate": rate,
        "parallelism": parallelism,
        "peak_running": probe.peak,
        "max_starts_in_period": _max_in_window(starts, 1.0),
        "handoff_p50_ms": _percentile(waits, 0.5) * 1000,
        "handoff_p99_ms": _percentile(waits, 0.99) * 1000,
        "handoff_mean_ms": (statistics.fmean(waits) * 1000) if waits else 0.0,
        "slot_use": sum(e - s for s, e in zip(probe.starts, probe.ends, strict=False)) / (span * parallelism)
        if span > 0
        else 0.0,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.stepflow", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", default="sqlite", help="'sqlite' (both synchronous modes), a sqlite:/// URL, or a postgresql:// URL"
    )
    parser.add_argument("--json", help="where to write the JSON (default bench/results/stepflow-<store>.json)")
    parser.add_argument("--dir", help="folder for the SQLite files (default: a scratch folder beside this script)")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=500, help="step starts per second under the key")
    parser.add_argument("--parallelism", type=int, default=10)
    parser.add_argument("--step-ms", type=float, default=20.0, help="how long each step runs")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    for name in ("runs", "rate", "parallelism"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    results: list[tuple[Place, dict[str, Any]]] = []
    with _folder(args.dir) as folder:
        for place in _places(args, folder):
            try:
                result = asyncio.run(
                    run_case(place.url("stepflow"), args.runs, args.rate, args.parallelism, args.step_ms)
                )
            finally:
                place.cleanup()
            results.append((place, result))
    store = results[0][0].store
    rows = []
    for place, r in results:
        rows += [
            [place.mode, "step starts/s", r["starts_per_s"], f"configured rate {r['rate']}/s"],
            [place.mode, "worst overlap", r["peak_running"], f"parallelism {r['parallelism']}"],
            [place.mode, "most starts in 1 s", r["max_starts_in_period"], f"rate {r['rate']}"],
            [place.mode, "wait->start p50 ms", r["handoff_p50_ms"], "slot freed -> waiting step starts"],
            [place.mode, "wait->start p99 ms", r["handoff_p99_ms"], ""],
            [place.mode, "slots in use", r["slot_use"], "share of parallelism x time"],
            [place.mode, "total s", r["seconds"], f"{r['runs']} runs, {r['steps']} steps"],
        ]
    print_table(
        f"lockgate step flow control on {store}", ["mode", "figure", "value", "against"], rows, plain=args.plain
    )
    document = {
        "benchmark": "stepflow",
        "store": store,
        "machine": machine(),
        "settings": {"runs": args.runs, "rate": args.rate, "parallelism": args.parallelism, "step_ms": args.step_ms},
        "modes": [{"mode": p.mode, **r} for p, r in results],
    }
    path = write_json(args.json or HERE / "results" / f"stepflow-{store}.json", document)
    print(f"wrote {path}")
    for _, r in results:
        if r["peak_running"] > r["parallelism"] or r["max_starts_in_period"] > r["rate"]:
            print("LIMIT EXCEEDED")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
