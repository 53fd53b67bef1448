"""The store operations behind each ``Inspector`` answer (``store.read(op, ...)``), for callers
that hold a store and compose their own reads."""

from __future__ import annotations

from .cluster import cluster_status
from .flow import FlowRow, flow
from .gate import ledger_page, parked_page, pauses
from .listing import runs_page
from .runs import run_detail
from .stats import hourly, stats
from .trace import Trace, trace

__all__ = [
    "FlowRow",
    "Trace",
    "cluster_status",
    "flow",
    "hourly",
    "ledger_page",
    "parked_page",
    "pauses",
    "run_detail",
    "runs_page",
    "stats",
    "trace",
]
