"""Durable queues: a named admission lane that several workflows share, declared once.

A queue is not a second scheduler. ``app.queue("thumbnails", concurrency=4, rate_limit=(100,
"1m"), priority=...)`` declares gate controls under one name, and every workflow declared
with ``queue=`` takes them as its own: a concurrency pool and a throttle window both named
``queue:<name>`` (so the members share one budget) and the queue's priority. Work enters a
queue as an ordinary gated start: ``ctx.enqueue`` is ``ctx.start_child(..., gate=True)`` and
``engine.enqueue`` is ``engine.start``, each checking first that the workflow is a member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .controls import Concurrency, Throttle
from .durations import Duration, to_seconds
from .errors import DefinitionError, InvalidArgument

__all__ = ["Queue", "check_member", "member_controls", "queue_name"]


@dataclass(frozen=True)
class Queue:
    """A named lane: at most ``concurrency`` runs in flight across its workflows, at most
    ``rate_limit = (limit, period)`` admissions per sliding period (the excess waits, parked),
    parked starts ordered by ``priority`` (an int, or a callable taking the payload model)."""

    name: str
    concurrency: int | None = None
    rate_limit: tuple[int, Duration] | None = None
    priority: int | Callable[[Any], int] | None = None

    def __post_init__(self) -> None:
        where = f"queue:{self.name}"
        if not isinstance(self.name, str) or not self.name:
            raise DefinitionError(where, "name", "must be a non-empty string")
        c = self.concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise DefinitionError(where, "concurrency", f"must be an integer >= 1, got {c!r}")
        r = self.rate_limit
        if r is not None:
            limit = r[0] if isinstance(r, tuple) and len(r) == 2 else None
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise DefinitionError(where, "rate_limit", f"must be (limit >= 1, period), got {r!r}")
            try:
                to_seconds(r[1], what="rate_limit period")
            except ValueError as exc:
                raise DefinitionError(where, "rate_limit", str(exc)) from None
        p = self.priority
        if p is not None and not callable(p) and (isinstance(p, bool) or not isinstance(p, int)):
            raise DefinitionError(where, "priority", f"must be an int or a callable taking the payload, got {p!r}")
        if c is None and r is None:
            raise DefinitionError(where, ["concurrency", "rate_limit"], "a queue bounds something: declare one")

    @property
    def pool(self) -> str:
        """The name of the concurrency pool and throttle window its members share."""
        return f"queue:{self.name}"


def queue_name(queue: Queue | str) -> str:
    """The name of ``queue`` (a ``Queue`` or its name)."""
    if isinstance(queue, Queue):
        return queue.name
    if isinstance(queue, str) and queue:
        return queue
    raise InvalidArgument(f"queue must be an lg.Queue or its name, got {queue!r}")


def check_member(workflow: str, member_of: str | None, queue: Queue | str) -> None:
    """Refuse to enqueue ``workflow`` (in queue ``member_of``) into another ``queue`` (``InvalidArgument``)."""
    name = queue_name(queue)
    if member_of != name:
        declare = "declare it with @app.workflow(queue=...)"
        raise InvalidArgument(f"workflow {workflow!r} is not in queue {name!r} ({declare})")


def member_controls(workflow: str, queue: Any, declared: dict[str, Any]) -> dict[str, Any]:
    """The flow-control options of a workflow declared with ``queue=``: its own and the queue's.

    A control the queue sets may not be declared by the workflow too (``DefinitionError``
    naming both): one budget has one owner.
    """
    if not isinstance(queue, Queue):
        raise DefinitionError(workflow, "queue", f"must be a queue from app.queue(...), got {type(queue).__name__}")
    given: dict[str, Any] = {}
    if queue.concurrency is not None:
        given["concurrency"] = Concurrency(limit=queue.concurrency, pool=queue.pool)
    if queue.rate_limit is not None:
        limit, period = queue.rate_limit
        given["throttle"] = Throttle(limit=limit, period=period, pool=queue.pool)
    if queue.priority is not None:
        p = queue.priority
        given["priority"] = p if callable(p) else (lambda _payload, value=p: value)
    for option in given:
        if declared.get(option) is not None:
            raise DefinitionError(workflow, ["queue", option], f"queue {queue.name!r} sets {option}: declare it once")
    return {**declared, **given}
