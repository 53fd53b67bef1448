"""``python -m tests.nemesis``: a nemesis run on private servers; prints the table, exits 1 on a violation.

    python -m tests.nemesis --seconds 1800                  # every nemesis, mixed, for 30 minutes
    python -m tests.nemesis --seconds 60 --kinds kill,stop  # some alone
    LOCKGATE_NEMESIS_SECONDS=600 python -m tests.nemesis

Needs root (the partition's network namespace) and libfaketime (the skew) for those two nemeses;
without them they are left out and said so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .faults import KINDS
from .run import Config, available, nemesis


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nemesis", description=__doc__)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("LOCKGATE_NEMESIS_SECONDS", "120")))
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(KINDS)}")
    parser.add_argument("--every", type=float, default=4.0, help="seconds between faults (on average)")
    parser.add_argument("--rate", type=float, default=4.0, help="arrival bursts a second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    kinds, missing = available([k.strip() for k in args.kinds.split(",") if k.strip()])
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown nemesis {unknown}; known: {', '.join(KINDS)}")
    if missing:
        print(f"left out (this machine cannot inject them): {', '.join(missing)}")
    config = Config(seconds=args.seconds, kinds=kinds, every=args.every, rate=args.rate, seed=args.seed)
    logs = Path(tempfile.mkdtemp(prefix="lockgate-nemesis-"))
    logging.basicConfig(filename=logs / "driver.log", level=logging.WARNING)  # the outages the driver saw
    print(f"nemesis: {args.seconds:g}s of load, {', '.join(kinds)}, a fault every ~{args.every:g}s; logs in {logs}")
    started = time.monotonic()
    report = asyncio.run(nemesis(config, logs, say=True, keep=args.keep_logs))
    print(
        f"finished in {time.monotonic() - started:.0f}s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(report.render())
    if args.json:
        figures = {**report.figures, "violations": report.violations, "table": report.table()}
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    if not args.keep_logs and not report.violations:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
