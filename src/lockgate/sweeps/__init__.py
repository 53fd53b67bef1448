"""Sweeps: periodic work each engine runs, one replica per tick (a lease row decides which).

Each sweep receives the ``WorkerRuntime`` seam, never the engine; ``SWEEPS`` lists how each
is made from it and the engine's settings (``None``: that sweep is off).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..gate.runtime import WorkerRuntime
from .base import Sweep, SweepSettings
from .cancel_on import cancel_on_sweep
from .counts import counts_sweep
from .events import fanout_sweep
from .retention import retention_sweep
from .routing import routing_sweep
from .schedules import schedule_sweep
from .staleness import staleness_sweep

__all__ = ["SWEEPS", "Sweep", "SweepSettings", "start_sweeps", "sweeps_for"]

SWEEPS: tuple[Callable[[WorkerRuntime, SweepSettings], Sweep | None], ...] = (
    staleness_sweep,
    retention_sweep,
    schedule_sweep,
    fanout_sweep,
    cancel_on_sweep,
    routing_sweep,
    counts_sweep,
)
"""The registered sweeps, in the order they start."""


def sweeps_for(worker: WorkerRuntime, settings: SweepSettings) -> list[Sweep]:
    """The sweeps these settings turn on."""
    return [s for s in (make(worker, settings) for make in SWEEPS) if s is not None]


def start_sweeps(worker: WorkerRuntime, settings: SweepSettings) -> list[asyncio.Task[Any]]:
    """Start each sweep's loop; the caller cancels the tasks when it closes."""
    return [asyncio.create_task(s.loop(worker), name=f"lockgate-sweep-{s.name}") for s in sweeps_for(worker, settings)]
