"""A worker process for crash tests: ``python -m tests.apps.runner --store URL [options]``.

Runs an ``Engine`` over the app named by ``--app`` (``module:attribute``) until it is
killed or receives SIGTERM/SIGINT (then it closes cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal

import lockgate as lg


def load_app(ref: str) -> lg.App:
    module, _, attr = ref.partition(":")
    app = getattr(importlib.import_module(module), attr or "app")
    if not isinstance(app, lg.App):
        raise SystemExit(f"{ref} is not a lockgate App")
    return app


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = lg.Engine(
        load_app(args.app),
        args.store,
        lease=args.lease,
        poll_interval=args.poll,
        inline_sleep=args.inline_sleep,
        max_reclaims=args.max_reclaims,
    )
    async with engine:
        print(f"ready {engine.worker_id}", flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.apps.runner")
    parser.add_argument("--store", required=True)
    parser.add_argument("--app", default="tests.apps.crashy:app")
    parser.add_argument("--lease", default="1h", help="long by default: only dead-process release frees runs")
    parser.add_argument("--poll", default="50ms")
    parser.add_argument("--inline-sleep", default="0s")
    parser.add_argument("--max-reclaims", type=int, default=3)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
