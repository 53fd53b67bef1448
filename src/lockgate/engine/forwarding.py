"""The ``Context`` operations an execution forwards to the modules that implement them.

``Execution`` (executor.py) is entry, replay, park and finish, the held journal writes and
``ctx.step``; the other durable operations live in ``operations.py``, ``event_waits.py``,
``run_events.py`` and ``stepflow.py``, written against the ``Running`` protocol. This base
class is the forwarding between the two, kept apart so that the executor stays one idea.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from ..context import ChildHandle, Context
from ..durations import Duration
from . import event_waits, operations, run_events, stepflow
from .durable import Running

__all__ = ["Forwarding"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class Forwarding(Context):
    """``Context``'s durable operations, each run by its module on ``running`` (the execution itself)."""

    @property
    def running(self) -> Running:
        raise NotImplementedError

    async def sleep(self, name: str, duration: Duration) -> None:
        await operations.sleep(self.running, name, duration)

    async def sleep_until(self, name: str, when: datetime) -> None:
        await operations.sleep_until(self.running, name, when)

    async def now(self) -> datetime:
        return await operations.now(self.running)

    async def uuid(self) -> str:
        return await operations.uuid(self.running)

    async def random(self) -> float:
        return await operations.random(self.running)

    async def wait_for_signal(self, name: str, model: type[M], *, timeout: Duration | None = None) -> M | None:
        return await operations.wait_for_signal(self.running, name, model, timeout=timeout)

    async def handle_update(self, name: str, model: type[M], handler: Callable[[M], Awaitable[T] | T]) -> T:
        return await operations.handle_update(self.running, name, model, handler)

    async def wait_for_event(self, event: Any, **options: Any) -> Any:
        return await event_waits.wait_for_event(self.running, event, **options)

    async def publish(self, event: Any, key: Any = None, payload: Any = None) -> str:
        return await run_events.publish(self.running, event, key, payload)

    async def start_child(self, workflow: str | Callable[..., Any], payload: Any, **options: Any) -> ChildHandle:
        return await operations.start_child(self.running, workflow, payload, **options)

    async def wait_child(self, handle: ChildHandle) -> Any:
        return await operations.wait_child(self.running, handle)

    async def rate_limit(self, name: str, *, limit: int, period: Duration, key: Any = None, cost: Any = None) -> None:
        await stepflow.rate_limit(self.running, name, limit, period, key, cost)
