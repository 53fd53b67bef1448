"""Test helpers: an engine on a temporary SQLite file with a clock you move by hand.

::

    async with TestEnv(app) as env:
        handle = await env.engine.start("reminder", {"user": "u1"})
        await env.advance("7d")          # fires every timer due in the next 7 days
        assert await env.engine.result(handle.run_id) == "sent"
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from .app import App
from .clock import Clock
from .durations import Duration, to_seconds
from .engine.firing_settle import settle as settle_firings
from .engine.replay_check import JournalExport, ReplayVerdict, check_export
from .errors import InvalidArgument
from .facades import Engine
from .store import runs
from .sweeps.schedules import fire_due, register, runtime_for

__all__ = ["FakeClock", "TestEnv", "replay_check"]


class FakeClock(Clock):
    """A clock that only moves when told to."""

    def __init__(self, start: float | datetime | None = None) -> None:
        # a whole second by default, so that whole and half-second advances land exactly on timers
        if isinstance(start, datetime):
            if start.tzinfo is None:
                raise InvalidArgument("start must be a timezone-aware datetime (or seconds since the epoch)")
            start = start.timestamp()
        self._now = float(int(time.time())) if start is None else float(start)
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (when, future)
        self._sleepers.append(entry)
        try:
            await future
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    @property
    def sleepers(self) -> int:
        """How many coroutines wait for this clock to move."""
        return len(self._sleepers)

    def advance(self, duration: Duration) -> None:
        """Move time forward and wake every sleeper now due."""
        self.set(self._now + to_seconds(duration, what="advance"))

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError("a FakeClock does not go backwards")
        self._now = when
        for due, future in list(self._sleepers):
            if due <= when and not future.done():
                future.set_result(None)


class TestEnv:
    """An ``Engine`` over a temporary SQLite file (or ``store=``) driven by a ``FakeClock``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self, app: App, *, store: str | None = None, start: float | datetime | None = None, **engine_options: Any
    ) -> None:
        self.clock = FakeClock(start)
        self._dir: str | None = None
        if store is None:
            self._dir = tempfile.mkdtemp(prefix="lockgate-test-")
            store = f"sqlite:///{self._dir}/lockgate.db"
        self.store_url = store
        options: dict[str, Any] = {"poll_interval": 0.05, "inline_sleep": 0, **engine_options}
        self.engine = Engine(app, store, clock=self.clock, **options)

    async def __aenter__(self) -> Self:
        await self.engine.open()
        if self.engine.app.schedules():  # recorded at the clock's start: their slots count from there
            await register(runtime_for(self.engine.worker), orphan_others=True)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.engine.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    async def advance(self, duration: Duration, *, timeout: float = 10.0) -> None:
        """Move the clock, then wait until every run due by then has parked or finished."""
        self.clock.advance(duration)
        # What the gate holds until now is decided here: the drainer's loop waits on real time, and
        # ``settle`` would not wait for a start the gate has yet to admit.
        await self.engine.drainer.tick()
        self.engine.wake()
        await self.settle(timeout=timeout)

    async def fire_schedules(self, *, timeout: float = 10.0) -> None:
        """Fire every schedule slot due at the clock's time, as the schedule sweep's next tick
        would, wait for the runs to park or finish, and record the ends of those that finished."""
        runtime = runtime_for(self.engine.worker)
        await register(runtime, orphan_others=True)
        await fire_due(runtime)
        await self.settle(timeout=timeout)
        await settle_firings(runtime)

    async def settle(self, *, timeout: float = 10.0) -> None:
        """Wait until nothing is due and every executing body waits for the clock."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self.engine.wake()
            await asyncio.sleep(0.005)
            busy = len(self.engine.executing)
            due = await self.engine.store.read(runs.next_wake, self.engine.worker_id)
            nothing_due = due is None or due > self.clock.now()
            if nothing_due and busy == self.clock.sleepers and not self.engine.claiming:
                await asyncio.sleep(0.005)
                if len(self.engine.executing) == busy and self.clock.sleepers == busy:
                    return
            if loop.time() > deadline:
                raise TimeoutError(f"not settled after {timeout}s: {busy} executing, next due {due}")


async def replay_check(app: App, journal_export: JournalExport | str | Path) -> ReplayVerdict:
    """Replay one exported journal (``lockgate workflows export``: a file path, its text, or a
    ``JournalExport``) against ``app`` without running any step; ``verdict.breaks`` when the code
    would not carry the run on as recorded::

        verdict = await replay_check(app, "tests/journals/order-42.json")
        assert not verdict.breaks, verdict
    """
    export = journal_export
    if isinstance(export, Path) or (isinstance(export, str) and not export.lstrip().startswith("{")):
        path = Path(export)
        export = JournalExport.from_json(path.read_text(), source=str(path))
    elif isinstance(export, str):
        export = JournalExport.from_json(export)
    return await check_export(app, export)
