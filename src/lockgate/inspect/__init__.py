"""The query layer every surface reads through: the CLI today, the HTTP API and the dashboard next.

``Inspector(store, app, clock)`` answers each question with typed, JSON-ready records;
``connect(url)`` opens a store for it. The modules below also hold the store operations
behind each answer (``flow``, ``trace``, ...), for callers that compose their own reads.
"""

from __future__ import annotations

from ..store.keys import Rotation, Unopened
from .cluster import ClusterStatus, SweepLease, WorkerStatus
from .connect import READ_STORE_FIELD, StoreLocation, connect, locate, open_read_store, refuse_dialects
from .doctor import DoctorReport, DoctorSettings, Finding
from .flow import FlowRow
from .flowkeys import FlowKeyRow
from .gate import LedgerEntry, ParkedStart, Pause
from .inspector import Inspector
from .listing import RUN_STATUSES, TEXT_WINDOW, RunFilter, RunPage, split_statuses
from .replay import ReplayReport
from .runs import TERMINAL, RunDetail
from .schedules import FiringInfo, ScheduleInfo
from .standby import ReplicaLag
from .stats import MAX_HOURS, HourlyRuns, Hours, Stats, StatsTotals, WorkflowStats
from .trace import Trace
from .views import SavedView

__all__ = [
    "MAX_HOURS",
    "READ_STORE_FIELD",
    "RUN_STATUSES",
    "TERMINAL",
    "TEXT_WINDOW",
    "ClusterStatus",
    "DoctorReport",
    "DoctorSettings",
    "Finding",
    "FiringInfo",
    "FlowKeyRow",
    "FlowRow",
    "HourlyRuns",
    "Hours",
    "Inspector",
    "LedgerEntry",
    "ParkedStart",
    "Pause",
    "ReplayReport",
    "ReplicaLag",
    "Rotation",
    "RunDetail",
    "RunFilter",
    "RunPage",
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
    "open_read_store",
    "refuse_dialects",
    "split_statuses",
]
