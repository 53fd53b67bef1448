"""``python -m tests.soak --minutes N``: the long soak, on a private PostgreSQL; prints the figures.

Exits 1 when an invariant was violated.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ..pgserver import private_postgres
from .run import Soak, soak


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the load runs")
    parser.add_argument(
        "--rate", type=float, default=4.0, help="arrival bursts a second (one in four is 3-8 starts at once)"
    )
    parser.add_argument("--kill-every", type=float, default=4.0, help="seconds between kill -9s (on average)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs (their directory is printed)")
    args = parser.parse_args()
    config = Soak(seconds=args.minutes * 60, rate=args.rate, kill_every=args.kill_every, seed=args.seed)
    logs = Path(tempfile.mkdtemp(prefix="lockgate-soak-"))
    started = time.monotonic()
    with private_postgres() as server:
        print(
            f"soak: {args.minutes:g} min, {args.rate:g} arrivals/s, "
            f"a kill -9 every ~{args.kill_every:g}s; logs in {logs}"
        )
        report = asyncio.run(soak(server, logs, config, say=True))
    print(f"soak finished in {time.monotonic() - started:.0f}s")
    print(report.render())
    if not args.keep_logs and not report.violations:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
