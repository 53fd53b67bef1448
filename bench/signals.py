"""Signals for the bench scripts that start worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

__all__ = ["sigterm_cancels"]


@contextlib.contextmanager
def sigterm_cancels() -> Iterator[None]:
    """Within: SIGTERM cancels the current task as Ctrl-C does, so its cleanup runs (the workers are stopped)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
