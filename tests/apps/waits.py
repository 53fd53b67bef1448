"""Waiting on a condition with a deadline (tests never sleep and hope)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


async def eventually(
    probe: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll ``probe`` (sync or async) until it returns something truthy; that value, or ``TimeoutError``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)


async def parked_on(reader: Any, run_id: str, waiting_on: str, timeout: float = 10.0) -> None:
    """Until run ``run_id`` (read through an engine or a client) is running and parked on ``waiting_on``."""

    async def probe() -> bool:
        run = await reader.get_run(run_id)
        return bool(run.waiting_on == waiting_on and run.status == "running")

    await eventually(probe, timeout=timeout, interval=0.01, what=f"run {run_id} parked on {waiting_on}")
