"""Durable agents (``lockgate.ai``) under a tokens-per-minute key, and what the engine costs per model request.

    python -m bench.ai                           # SQLite (synchronous FULL)
    python -m bench.ai --store postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.ai --cases overhead --rounds 5  # the overhead alone (on a quiet machine)

Cases, each on a fresh database, with an ``Engine`` in this process and Pydantic AI's
``FunctionModel`` as the provider (``--latency`` per request, offline):

- ``budget``: ``--runs`` agent runs of three model requests each (two tool calls between them)
  share one weighted key of ``--rate`` tokens per ``--period``; each request reserves its
  estimate and settles at the usage the model reports. Figures: tokens per period achieved over
  the full periods of the run against the rate (target >= 90%), and the most tokens any trailing
  period held, by the time each request was sent (target: never above the rate).
- ``overhead``: the same runs with a key too wide to wait on, three ways at the same concurrency,
  alternated ``--rounds`` times: plain ``agent.run`` (no durability); ``LockgateAgent.run`` on a
  context whose steps just call their function (Pydantic AI's own durable path: its capability,
  the JSON crossing of each unit, no engine); and the engine. The engine's own overhead per model
  request is the process CPU time of the third less the second, per request (target <= 1 ms): the
  run's start, claim and end, its two tool steps, the journal, the key's reservation and
  settlement. On PostgreSQL the server's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import lockgate as lg
from lockgate.ai import LockgateAgent
from lockgate.durations import to_seconds

from .core import Place, _folder, one_place
from .report import Cell, machine, print_table, write_json

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
TURNS = 3
USED = (1_000, 1_100, 1_300)  # tokens each turn's response reports (input + output)
ESTIMATE = 1_500  # what each request reserves
BUDGET_TARGET = 0.90
OVERHEAD_TARGET_MS = 1.0


class Ask(BaseModel):
    n: int


class Provider:
    """Three turns (two tool calls, then an answer) after ``latency`` seconds each; notes when each was sent."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.sent: list[tuple[float, int]] = []

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(1 for m in messages if m.kind == "response")
        self.sent.append((time.monotonic(), USED[turn]))
        await asyncio.sleep(self.latency)
        usage = RequestUsage(input_tokens=USED[turn] - 100, output_tokens=100)
        if turn < TURNS - 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"row": f"r{turn}"})], usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    def agent(self) -> Agent[None, str]:
        agent = Agent(FunctionModel(self.respond), name="bench_agent")

        @agent.tool_plain
        def lookup(row: str) -> str:
            return f"{row} edited"

        return agent


def build_app(lg_agent: LockgateAgent[None]) -> lg.App:
    app = lg.App("bench-ai")

    @app.workflow(name="bench.agent")
    async def run_agent(ctx: lg.Context, p: Ask) -> str:
        result = await lg_agent.run(ctx, f"narrate row {p.n}")
        return str(result.output)

    return app


async def _run_all(
    url: str, provider: Provider, fc: lg.FlowControl, runs: int, seen: list[int] | None = None
) -> tuple[float, float]:
    """Run ``runs`` agent runs through an open engine: wall and CPU seconds from the first start to the last
    result (the engine's boot and close are not counted); with ``seen``, sample the key's window meanwhile."""
    lg_agent = LockgateAgent(provider.agent(), flow_control=fc, estimate=lambda messages, settings: ESTIMATE)
    async with lg.Engine(build_app(lg_agent), url, max_concurrent_runs=runs, poll_interval=0.05) as engine:
        started, cpu = time.monotonic(), time.process_time()
        handles = [await engine.start("bench.agent", {"n": i}) for i in range(runs)]
        sampler = None if seen is None else asyncio.create_task(_sample(engine, str(fc.key), seen))
        for h in handles:
            assert h.run_id is not None and await engine.result(h.run_id, timeout=3_600) == "done"
        took = time.monotonic() - started, time.process_time() - cpu
        if sampler is not None:
            sampler.cancel()
        return took


async def _sample(engine: lg.Engine, key: str, seen: list[int]) -> None:
    """The units the key's own window holds (reserved and settled), every 100 ms."""
    while True:
        for row in await engine.flow_keys(key):
            seen.append((row.units_reserved or 0) + (row.units_settled or 0))
        await asyncio.sleep(0.1)


class _Inline(lg.Context):
    """A context whose steps just call their function: Pydantic AI's durable path with no engine under it."""

    run_id = "inline"
    workflow = "inline"
    attempt = 1

    async def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        for option in ("retry", "flow_control", "input", "cost", "settle"):
            kwargs.pop(option, None)
        return await fn(*args, **kwargs)

    def _nothing(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the inline context only runs steps")

    sleep = sleep_until = wait_for_signal = handle_update = start_child = wait_child = publish = _nothing
    now = uuid = random = patch = _nothing


async def _inline(provider: Provider, runs: int) -> None:
    lg_agent = LockgateAgent(provider.agent(), estimate=lambda messages, settings: ESTIMATE)
    ctx = _Inline()
    results = await asyncio.gather(*(lg_agent.run(ctx, f"narrate row {i}") for i in range(runs)))
    assert all(r.output == "done" for r in results)


async def case_budget(url: str, args: argparse.Namespace) -> dict[str, Any]:
    provider = Provider(args.latency)
    period = to_seconds(args.period, what="--period")
    fc = lg.FlowControl("bench-tokens", rate=args.rate, period=args.period, parallelism=args.parallelism, cost=1)
    seen: list[int] = []
    elapsed, _ = await _run_all(url, provider, fc, args.runs, seen)
    sent = sorted(provider.sent)
    t0 = sent[0][0]
    times = [t - t0 for t, _ in sent]
    tokens = [n for _, n in sent]
    # the most any trailing period held: the window ending at each request's send time
    prefix = [0]
    for n in tokens:
        prefix.append(prefix[-1] + n)
    most = 0
    for i, t in enumerate(times):
        first = bisect.bisect_right(times, t - period)
        most = max(most, prefix[i + 1] - prefix[first])
    full = int(times[-1] // period)  # the periods the run filled from start to end
    per_period = [
        prefix[bisect.bisect_left(times, (k + 1) * period)] - prefix[bisect.bisect_left(times, k * period)]
        for k in range(full)
    ]
    achieved = sum(per_period) / full if full else None
    return {
        "runs": args.runs,
        "requests": len(sent),
        "rate": args.rate,
        "period_s": period,
        "elapsed_s": elapsed,
        "tokens_per_full_period": per_period,
        "achieved_per_period": achieved,
        "achieved_ratio": None if achieved is None else achieved / args.rate,
        "most_sent_in_any_trailing_period": most,
        "most_in_the_key_window": max(seen, default=0),
    }


async def _plain(provider: Provider, runs: int) -> None:
    agent = provider.agent()
    results = await asyncio.gather(*(agent.run(f"narrate row {i}") for i in range(runs)))
    assert all(r.output == "done" for r in results)


async def case_overhead(place: Place, args: argparse.Namespace) -> dict[str, Any]:
    wide = lg.FlowControl("bench-wide", rate=2_000_000_000, period="1m", cost=1)  # never waited on
    await _inline(Provider(0.0), 20)  # imports and first-use caches, outside the figures
    rounds: list[tuple[float, float, float]] = []
    for i in range(args.rounds):  # alternate the three, so the machine's noise falls on each
        cpu = time.process_time()
        await _plain(Provider(args.latency), args.runs)
        plain = time.process_time() - cpu
        cpu = time.process_time()
        await _inline(Provider(args.latency), args.runs)
        inline = time.process_time() - cpu
        _, engine = await _run_all(place.url(f"overhead{i}"), Provider(args.latency), wide, args.runs)
        rounds.append((plain, inline, engine))
    requests: int = args.runs * TURNS

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2] / requests * 1_000

    return {
        "runs": args.runs,
        "requests": requests,
        "rounds": [{"plain_cpu_s": p, "durable_inline_cpu_s": i, "engine_cpu_s": e} for p, i, e in rounds],
        "plain_ms_per_request": median([p for p, _, _ in rounds]),
        "durable_path_ms_per_request": median([i - p for p, i, _ in rounds]),
        "overhead_ms_per_request": median([e - i for _, i, e in rounds]),
        "target_ms": OVERHEAD_TARGET_MS,
    }


async def run(place: Place, args: argparse.Namespace) -> dict[str, Any]:
    cases = set(args.cases.split(","))
    overhead = await case_overhead(place, args) if "overhead" in cases else None
    budget = await case_budget(place.url("budget"), args) if "budget" in cases else None
    return {"store": place.store, "latency_s": args.latency, "budget": budget, "overhead": overhead}


def _rows(result: dict[str, Any]) -> list[list[Cell]]:
    return _budget_rows(result["budget"]) + _overhead_rows(result["overhead"])


def _budget_rows(b: dict[str, Any] | None) -> list[list[Cell]]:
    if b is None:
        return []
    ratio = b["achieved_ratio"]
    return [
        [
            f"tokens per {b['period_s']:g}s achieved (full periods)",
            b["achieved_per_period"],
            "tokens",
            b["rate"] * BUDGET_TARGET,
            "yes" if ratio is not None and ratio >= BUDGET_TARGET else "no",
        ],
        ["  as a share of the rate", None if ratio is None else ratio * 100, "%", BUDGET_TARGET * 100, None],
        [
            "most tokens the key's window held (sampled)",
            b["most_in_the_key_window"],
            "tokens",
            b["rate"],
            "yes" if b["most_in_the_key_window"] <= b["rate"] else "no",
        ],
        ["most tokens sent in any trailing period", b["most_sent_in_any_trailing_period"], "tokens", None, None],
        [f"{b['runs']} runs x {TURNS} requests, wall time", b["elapsed_s"], "s", None, None],
    ]


def _overhead_rows(o: dict[str, Any] | None) -> list[list[Cell]]:
    if o is None:
        return []
    return [
        ["plain agent.run CPU per request", o["plain_ms_per_request"], "ms", None, None],
        ["Pydantic AI's durable path, added", o["durable_path_ms_per_request"], "ms", None, None],
        [
            "engine overhead per model request (CPU)",
            o["overhead_ms_per_request"],
            "ms",
            o["target_ms"],
            "yes" if o["overhead_ms_per_request"] <= o["target_ms"] else "no",
        ],
    ]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ai", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="sqlite (default) or a postgresql:// server URL")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per model request")
    parser.add_argument("--rate", type=int, default=600_000, help="tokens per period of the budget case")
    parser.add_argument("--period", default="1m")
    parser.add_argument("--parallelism", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the overhead case")
    parser.add_argument("--cases", default="budget,overhead", help="which cases, comma-separated")
    parser.add_argument("--dir", help="where SQLite files go (default: a scratch folder beside bench/)")
    parser.add_argument("--json", help="where the JSON goes (default: bench/results/ai-<store>.json)")
    parser.add_argument("--plain", action="store_true", help="plain text table")
    args = parser.parse_args(argv)
    unknown = set(args.cases.split(",")) - {"budget", "overhead"}
    if unknown:
        parser.error(f"--cases: unknown {', '.join(sorted(unknown))} (budget, overhead)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with _folder(args.dir) as folder:
        place = one_place(args.store, folder, "bench.ai")
        try:
            result = asyncio.run(run(place, args))
        finally:
            place.cleanup()
    print_table(
        f"lockgate.ai on {place.store}: {args.runs} agent runs of {TURNS} requests, {args.latency * 1000:g} ms each",
        ["case", "value", "unit", "target", "met"],
        _rows(result),
        plain=args.plain,
    )
    path = write_json(args.json or HERE / "results" / f"ai-{place.store}.json", {"machine": machine(), **result})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
