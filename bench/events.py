"""Domain event figures beside the raw floor of the same database.

    python -m bench.events                                   # SQLite (synchronous FULL), scratch files
    python -m bench.events --store postgresql://postgres@127.0.0.1:5432/postgres

Cases, each on a fresh database:

(a) publish throughput: ``--events`` publishes at once from a ``Client`` (nothing fans out), for an
    event with 1 trigger and one with 3: events/s, beside the floor's commits/s;
(b) publish -> triggered start: ``--sequential`` publishes one after the other, each timed until the
    triggered run's body is entered on an ``Engine`` in this process: p50/p99 ms;
(c) publish -> cancel: a run sleeping (parked on a timer) is cancelled by a published event through
    ``cancel_on``; the time until its waiter learns it: p50/p99 ms;
(d)-(f) publish -> a run parked in ``ctx.wait_for_event`` resumes, among ``--waiters`` runs waiting on
    distinct keys, in-process and cross-process, and signed webhooks/s (``bench/event_waits.py``).

Latencies (b) and (c) are bounded by the sweeps' tick (``--poll``, the engine's ``poll_interval``)
when the publisher is another process; here the publish pokes the local fan-out at once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import lockgate as lg

from . import event_waits
from .core import Place, _folder, _pct, one_place
from .report import Cell, machine, print_table, ratio, write_json

__all__ = ["build_app", "main"]

HERE = Path(__file__).resolve().parent


class Key(BaseModel):
    id: str


class Data(BaseModel):
    n: int


class Mark(BaseModel):
    id: str


def build_app(entered: dict[str, float]) -> tuple[lg.App, dict[str, lg.EventDef]]:
    app = lg.App("bench-events")
    one = app.event("bench.one", key=Key, payload=Data)
    three = app.event("bench.three", key=Key, payload=Data)
    stop = app.event("bench.stop", key=Key, payload=Data)

    @app.workflow(name="bench.react")
    async def react(ctx: lg.Context, p: Mark) -> None:
        entered.setdefault(p.id, time.perf_counter())

    @app.workflow(name="bench.other")
    async def other(ctx: lg.Context, p: Mark) -> None:
        return None

    @app.workflow(name="bench.sleeper", cancel_on=[lg.CancelOn(event=stop, match=lambda ev, p: ev.key.id == p.id)])
    async def sleeper(ctx: lg.Context, p: Mark) -> None:
        await ctx.sleep("long", "1h")

    def mark(ev: lg.Event) -> dict[str, str]:
        return {"id": ev.key.id}

    app.trigger(on=one, workflow="bench.react", payload=mark)
    app.trigger(on=three, workflow="bench.react", name="three-a", payload=mark)
    app.trigger(on=three, workflow="bench.other", name="three-b", payload=mark)
    app.trigger(on=three, workflow="bench.other", name="three-c", payload=mark)
    return app, {"one": one, "three": three, "stop": stop}


async def case_publish(url: str, n: int, which: str) -> float:
    """Events/s for ``n`` concurrent publishes of an event with 1 or 3 triggers."""
    app, events = build_app({})
    async with lg.Client(app, url) as client:
        await client.publish(events[which], {"id": "warm"}, {"n": 0})
        start = time.perf_counter()
        await asyncio.gather(*(client.publish(events[which], {"id": f"e{i}"}, {"n": i}) for i in range(n)))
        return n / (time.perf_counter() - start)


async def case_trigger(url: str, n: int, poll: float) -> list[float]:
    """Milliseconds from each publish to the triggered run's body."""
    entered: dict[str, float] = {}
    app, events = build_app(entered)
    out = []
    async with lg.Engine(app, url, poll_interval=poll, inline_sleep=0) as engine:
        for i in range(n):
            key = f"t{i}"
            start = time.perf_counter()
            await engine.publish(events["one"], {"id": key}, {"n": i})
            while key not in entered:
                await asyncio.sleep(0.0005)
            out.append((entered[key] - start) * 1000)
    return out


async def case_cancel(url: str, n: int, poll: float) -> list[float]:
    """Milliseconds from publishing the cancelling event to the sleeping run's waiter seeing it cancelled."""
    app, events = build_app({})
    out = []
    async with lg.Engine(app, url, poll_interval=poll, inline_sleep=0) as engine:
        for i in range(n):
            key = f"c{i}"
            handle = await engine.start("bench.sleeper", {"id": key})
            assert handle.run_id is not None
            while (await engine.get_run(handle.run_id)).waiting_on != "timer":
                await asyncio.sleep(0.002)
            start = time.perf_counter()
            await engine.publish(events["stop"], {"id": key}, {"n": i})
            try:
                await engine.result(handle.run_id, timeout=30)
            except lg.RunCancelled:
                out.append((time.perf_counter() - start) * 1000)
            else:
                raise AssertionError("the sleeping run was not cancelled")
    return out


async def run(place: Place, args: argparse.Namespace) -> dict[str, Any]:
    floor = place.floor(args.floor_seconds)
    one = statistics.median(
        [await case_publish(place.url(f"pub1-{r}"), args.events, "one") for r in range(args.repeat)]
    )
    three = statistics.median(
        [await case_publish(place.url(f"pub3-{r}"), args.events, "three") for r in range(args.repeat)]
    )
    starts = sorted(await case_trigger(place.url("trigger"), args.sequential, args.poll))
    cancels = sorted(await case_cancel(place.url("cancel"), args.cancels, args.poll))
    waits: dict[str, Any] = {}
    if args.waiters:
        local = await event_waits.case_wait_local(place.url("wait-local"), args.waiters, args.resumes, args.poll)
        waits["wait_resume_in_process_ms"] = event_waits.summary(local)
        cross = await event_waits.case_wait_cross(place.url("wait-cross"), args.waiters, args.resumes, args.poll)
        waits["wait_resume_cross_process_ms"] = event_waits.summary(cross)
        waits["waiters"] = args.waiters
    if args.hooks:
        waits["webhooks_per_s"] = await event_waits.case_hooks(place.url("hooks"), args.hooks)
    return {
        "store": place.store,
        "mode": place.mode,
        "floor": floor.to_dict(),
        "publish_1_trigger_per_s": one,
        "publish_3_triggers_per_s": three,
        "publish_to_start_ms": {"p50": _pct(starts, 50), "p99": _pct(starts, 99), "n": len(starts)},
        "publish_to_cancel_ms": {"p50": _pct(cancels, 50), "p99": _pct(cancels, 99), "n": len(cancels)},
        **waits,
    }


def _rows(result: dict[str, Any]) -> list[list[Cell]]:
    floor = result["floor"]["commits_per_s"]
    starts, cancels = result["publish_to_start_ms"], result["publish_to_cancel_ms"]
    return [
        ["floor", floor, "commits/s", None],
        [
            "(a) publish, 1 trigger",
            result["publish_1_trigger_per_s"],
            "events/s",
            ratio(result["publish_1_trigger_per_s"], floor),
        ],
        [
            "(a) publish, 3 triggers",
            result["publish_3_triggers_per_s"],
            "events/s",
            ratio(result["publish_3_triggers_per_s"], floor),
        ],
        ["(b) publish -> start p50", starts["p50"], "ms", None],
        ["(b) publish -> start p99", starts["p99"], "ms", None],
        ["(c) publish -> cancel p50", cancels["p50"], "ms", None],
        ["(c) publish -> cancel p99", cancels["p99"], "ms", None],
        *_wait_rows(result),
    ]


def _wait_rows(result: dict[str, Any]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    n = result.get("waiters")
    for key, label in (("wait_resume_in_process_ms", "(d) in-process"), ("wait_resume_cross_process_ms", "(e) cross")):
        if key in result:
            for pct in ("p50", "p99"):
                rows.append([f"{label} publish -> wait resumes {pct} ({n} waiting)", result[key][pct], "ms", None])
    if "webhooks_per_s" in result:
        rows.append(["(f) signed webhooks, end to end", result["webhooks_per_s"], "requests/s", None])
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="'sqlite' (scratch files) or a postgresql:// URL")
    parser.add_argument("--json", help="where to write the JSON (default bench/results/events-<store>.json)")
    parser.add_argument("--dir", help="folder for the SQLite files (default: a scratch folder beside this script)")
    parser.add_argument("--events", type=int, default=2000, help="case (a): publishes at once")
    parser.add_argument("--sequential", type=int, default=200, help="case (b): publishes one after the other")
    parser.add_argument("--cancels", type=int, default=50, help="case (c): sleeping runs cancelled one by one")
    parser.add_argument("--poll", type=float, default=0.5, help="the engine's poll interval (sweep tick), seconds")
    parser.add_argument("--waiters", type=int, default=10_000, help="cases (d)/(e): runs waiting (0: skip)")
    parser.add_argument("--resumes", type=int, default=200, help="cases (d)/(e): publishes timed one by one")
    parser.add_argument("--hooks", type=int, default=2000, help="case (f): webhook deliveries (0: skip)")
    parser.add_argument("--floor-seconds", type=float, default=1.0, help="how long the floor loop runs")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of case (a); the median is reported")
    parser.add_argument("--plain", action="store_true", help="plain-text table")
    args = parser.parse_args(argv)
    for name in ("events", "sequential", "cancels", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with _folder(args.dir) as folder:
        place = one_place(args.store, folder, "bench.events")
        try:
            result = asyncio.run(run(place, args))
        finally:
            place.cleanup()
    print_table(
        f"lockgate events on {place.store}", ["case", "value", "unit", "x floor"], _rows(result), plain=args.plain
    )
    path = write_json(args.json or HERE / "results" / f"events-{place.store}.json", {"machine": machine(), **result})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
