"""The query layer every surface reads through: the CLI today, the HTTP API and the dashboard next.

``Inspector(store, app, clock)`` answers each question with typed, JSON-ready records;
``connect(url)`` opens a store for it. The modules below also hold the store operations
behind each answer (``flow``, ``trace``, ...), for callers that compose their own reads.
"""

from __future__ import annotations

from ..store.keys import Rotation, Unopened
from .cluster import ClusterStatus, SweepLease, WorkerStatus
from .connect import StoreLocation, connect, locate
from .doctor import DoctorReport, DoctorSettings, Finding
from .flow import FlowRow
from .gate import LedgerEntry, ParkedStart, Pause
from .inspector import Inspector
from .replay import ReplayReport
from .runs import RUN_STATUSES, TERMINAL, RunDetail
from .schedules import FiringInfo, ScheduleInfo
from .stats import Stats, StatsTotals, WorkflowStats
from .trace import Trace
from .views import SavedView

__all__ = [
    "RUN_STATUSES",
    "TERMINAL",
    "ClusterStatus",
    "DoctorReport",
    "DoctorSettings",
    "Finding",
    "FiringInfo",
    "FlowRow",
    "Inspector",
    "LedgerEntry",
    "ParkedStart",
    "Pause",
    "ReplayReport",
    "Rotation",
    "RunDetail",
    "SavedView",
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
