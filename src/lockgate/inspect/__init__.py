"""The query layer every surface reads through: the CLI today, the HTTP API and the dashboard next.

``Inspector(store, app, clock)`` answers each question with typed, JSON-ready records;
``connect(url)`` opens a store for it. The modules below also hold the store operations
behind each answer (``flow``, ``trace``, ...), for callers that compose their own reads.
"""

from __future__ import annotations

from ..store.keys import Rotation, Unopened
from .cluster import ClusterStatus, SweepLease, WorkerStatus
from .connect import StoreLocation, connect, locate
from .flow import FlowRow
from .flowkeys import FlowKeyRow
from .gate import LedgerEntry, ParkedStart, Pause
from .inspector import Inspector
from .runs import RUN_STATUSES, TERMINAL, RunDetail
from .schedules import FiringInfo, ScheduleInfo
from .stats import Stats, StatsTotals, WorkflowStats
from .trace import Trace

__all__ = [
    "RUN_STATUSES",
    "TERMINAL",
    "ClusterStatus",
    "FiringInfo",
    "FlowKeyRow",
    "FlowRow",
    "Inspector",
    "LedgerEntry",
    "ParkedStart",
    "Pause",
    "Rotation",
    "RunDetail",
    "ScheduleInfo",
    "Stats",
    "StatsTotals",
    "StoreLocation",
    "SweepLease",
    "Trace",
    "Unopened",
    "WorkerStatus",
    "WorkflowStats",
    "connect",
    "locate",
]
