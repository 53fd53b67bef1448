"""Queued write calls, and operations with a many-at-once form for group commits that carry many alike.

A group commit often holds hundreds of calls of one operation (a burst of starts). A
store runs a run of consecutive calls of such an operation as one call of its *many*
form, which writes all their rows with a few multi-row statements instead of a few
statements per call. The many form must leave the store exactly as the calls made one
after the other would, and return their results in order; if it raises, the store
falls back to the calls one by one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .base import Tx

__all__ = [
    "Call",
    "Many",
    "all_volatile",
    "lock_first",
    "lone",
    "run_calls",
    "runs_lone",
    "volatile",
    "with_locks",
    "with_many",
]

Args = tuple[tuple[Any, ...], dict[str, Any]]
"""One call's arguments after the transaction: ``(args, kwargs)``."""

Many = Callable[[Tx, Sequence[Args]], Awaitable[list[Any]]]
F = TypeVar("F", bound=Callable[..., Any])

_MANY: dict[Callable[..., Any], Many] = {}
_GATHER: set[Callable[..., Any]] = set()
_LONE: set[Callable[..., Any]] = set()
_VOLATILE: set[Callable[..., Any]] = set()
_LOCKS: dict[Callable[..., Any], Callable[[tuple[Any, ...], dict[str, Any]], list[str]]] = {}


class Call:
    """One queued write: an operation and its arguments after the transaction."""

    __slots__ = ("args", "kwargs", "op")

    def __init__(self, op: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.op, self.args, self.kwargs = op, args, kwargs

    def __call__(self, tx: Tx) -> Awaitable[Any]:
        return self.op(tx, *self.args, **self.kwargs)


def with_many(op: Callable[..., Any], many: Many, *, gather: bool = False) -> None:
    """Declare ``many`` as ``op``'s many-at-once form.

    ``gather``: the calls of ``op`` in a group commit run together where the last of them
    stands, not only when they are consecutive. Any order of a group commit's calls is
    one their callers could have seen (none waits for another's result within it), and
    moving a call later keeps each caller's own calls in order; the calls of ``op`` must
    not read what a call queued beside them writes, other than through the order chosen.
    """
    _MANY[op] = many
    if gather:
        _GATHER.add(op)


def lone(op: F) -> F:
    """Mark ``op`` as mostly writing one repeatable statement (a step's journal entry, a bare start on PostgreSQL).

    Committed on its own, such a write needs no transaction around it: a store may run it
    in autocommit, its single round trip, and fall back to a transaction when the op asks
    for more. Only marked ops are tried so: the others never run twice for one attempt.
    """
    _LONE.add(op)
    return op


def volatile(op: F) -> F:
    """Mark ``op`` as a write whose loss with its machine loses nothing a crash of its process would not.

    A claim is one: should the machine lose it (power, a kernel crash), the run is claimable again,
    as after its holder's death, and any write synced after it, by any process, kept it (SQLite's log
    is one file, synced in order). A store whose every process shares one machine (SQLite) may commit
    a batch of only such writes without waiting for the disk. A write whose outcome a caller is told
    (a start, an end, a step's entry) is never volatile.
    """
    _VOLATILE.add(op)
    return op


def all_volatile(calls: Sequence[Call]) -> bool:
    """Whether every call of a batch was marked with ``volatile``."""
    return all(call.op in _VOLATILE for call in calls)


def with_locks(op: Callable[..., Any], locks: Callable[[tuple[Any, ...], dict[str, Any]], list[str]]) -> None:
    """Declare the key locks (``lock_key`` names) a call of ``op`` takes, from its arguments after the transaction.

    A group commit holding calls that lock different keys takes all their locks first, in one
    order, so that two processes' commits never each hold a key the other waits for (a deadlock
    PostgreSQL would only break after a second).
    """
    _LOCKS[op] = locks


async def lock_first(tx: Tx, calls: Sequence[Call]) -> None:
    """Take the key locks ``calls`` declared (``with_locks``), sorted, when they are more than one."""
    if tx.single_writer:
        return
    names: set[str] = set()
    for call in calls:
        found = _LOCKS.get(call.op)
        if found is not None:
            names.update(found(call.args, call.kwargs))
    if len(names) > 1:
        for name in sorted(names):
            await tx.execute("lock_key", {"lock": name})


def runs_lone(op: Callable[..., Any]) -> bool:
    """Whether ``op`` was marked with ``lone``."""
    return op in _LONE


async def run_calls(tx: Tx, calls: Sequence[Call]) -> list[Any]:
    """Each call's value, in order; a run of alike calls whose op has a many-at-once form as one call of it
    (for a ``gather`` op: all its calls, where the last of them stands)."""
    await lock_first(tx, calls)
    last: dict[Callable[..., Any], int] = {}
    for i, call in enumerate(calls):
        if call.op in _GATHER:
            last[call.op] = i
    values: list[Any] = [None] * len(calls)
    i, n = 0, len(calls)
    while i < n:
        op = calls[i].op
        if op in last:
            if i == last[op]:
                at = [k for k in range(i + 1) if calls[k].op is op]
                for k, value in zip(at, await _run_many(tx, op, [calls[k] for k in at]), strict=True):
                    values[k] = value
            i += 1
            continue
        many = _MANY.get(op)
        j = i + 1
        while many is not None and j < n and calls[j].op is op:
            j += 1
        values[i:j] = await _run_many(tx, op, calls[i:j])
        i = j
    return values


async def _run_many(tx: Tx, op: Callable[..., Any], calls: Sequence[Call]) -> list[Any]:
    if len(calls) == 1:
        return [await calls[0](tx)]
    got = await _MANY[op](tx, [(c.args, c.kwargs) for c in calls])
    if len(got) != len(calls):
        raise RuntimeError(f"the many-at-once form of {op!r} gave {len(got)} results for {len(calls)} calls")
    return got
