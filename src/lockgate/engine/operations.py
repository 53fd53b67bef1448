"""The durable operations a body calls besides steps: timers, recorded values, messages, children.

Each takes the execution it runs in as a ``Running`` and keeps to what that names: the
journal lookup, the busy guard, the journal writes and the park. The execution's
``Context`` methods call these in one line each; ``ctx.step``, the hot path, stays in the
executor.
"""

from __future__ import annotations

import asyncio
import typing
import uuid as _uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from ..clock import to_datetime
from ..context import ChildHandle, ParentClose
from ..crypto import Sealer, is_sealed, seal_payload
from ..durations import MAX_SECONDS, Duration, to_seconds
from ..errors import InvalidArgument, JournalDecryptionError, PayloadError, RunCancelled, RunFailed
from ..gate.admission import start_flow_control
from ..ids import new_id
from ..queues import check_member
from ..serde import decode, decode_as, dump_json, encode, refuse_unstorable, validate_payload
from ..store import messages, runs, shared
from ..store.base import Row
from . import children
from .durable import Parked, Running, Wait, call, callable_facts, describe, model_ref

__all__ = [
    "handle_update",
    "now",
    "random",
    "sleep",
    "sleep_until",
    "start_child",
    "take_message",
    "uuid",
    "wait_child",
    "wait_for_signal",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


# -- time and recorded values ---------------------------------------------------------------


async def sleep(x: Running, name: str, duration: Duration) -> None:
    """``ctx.sleep``: a durable timer ``duration`` from its first reaching."""
    seconds = to_seconds(duration, what=f"ctx.sleep({name!r})")
    await _timer(x, name, lambda now: now + seconds)


async def sleep_until(x: Running, name: str, when: datetime) -> None:
    """``ctx.sleep_until``: a durable timer due at ``when``."""
    if when.tzinfo is None:
        raise ValueError(f"ctx.sleep_until({name!r}): 'when' must be timezone-aware")
    due = when.timestamp()

    def due_from(now: float) -> float:
        if abs(due - now) > MAX_SECONDS:
            raise InvalidArgument(f"ctx.sleep_until({name!r}): 'when' must be within 100 years, got {when.isoformat()}")
        return due

    await _timer(x, name, due_from)


async def _timer(x: Running, name: str, due_from: Callable[[float], float]) -> None:
    key = x.key(name)
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return
    clock = x.clock
    async with x.busy():
        if entry is None:
            now = clock.now()
            due = due_from(now)
            await x.record(
                {
                    "step_key": key,
                    "kind": "sleep",
                    "status": "pending",
                    "due_at": due,
                    "started_at": now,
                    "finished_at": None,
                }
            )
            x.event("timer-set", {"step": key, "due_at": due})
        else:
            due = float(entry["due_at"])
        if due - clock.now() <= x.host.inline_sleep:
            await clock.sleep_until(due)
    if due > clock.now():
        await x.block(Wait("timer", wake_at=due))
    started = (entry or x.entry(key) or {}).get("started_at")
    async with x.busy():
        await x.record({"step_key": key, "kind": "sleep", "status": "completed", "due_at": due, "started_at": started})
        x.event("timer-fired", {"step": key})


async def now(x: Running) -> datetime:
    """``ctx.now``: the clock's time, recorded once."""
    value = await _value(x, "$now", x.clock.now, float)
    result = to_datetime(value)
    assert result is not None
    return result


async def uuid(x: Running) -> str:
    """``ctx.uuid``: a random UUID, recorded once."""
    return await _value(x, "$uuid", lambda: str(_uuid.uuid4()), str)  # type: ignore[no-any-return]


async def random(x: Running) -> float:
    """``ctx.random``: a random float in [0, 1), recorded once."""
    return await _value(x, "$random", x.rng.random, float)  # type: ignore[no-any-return]


async def _value(x: Running, name: str, make: Callable[[], Any], tp: Any) -> Any:
    key = x.key(name)
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return decode(entry["output"], tp)
    async with x.busy():
        value = make()
        refuse_unstorable(value, f"recorded value {name!r}")
        output = _stored(x, key, "output", encode(value))
        await x.record({"step_key": key, "kind": "value", "status": "completed", "output": output})
        return value


def _stored(x: Running, key: str, field: str, text: str) -> str:
    """``text`` as it is stored: sealed when the run is encrypted."""
    sealer = x.sealer
    return text if sealer is None else sealer.seal(key, field, text)


# -- signals and updates --------------------------------------------------------------------


async def wait_for_signal(x: Running, name: str, model: type[M], *, timeout: Duration | None = None) -> M | None:
    """``ctx.wait_for_signal``: the next signal ``name``, or ``None`` at the timeout."""
    key = x.key(f"signal:{name}")
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return None if entry["output"] is None else validate_payload(model, entry["output"], what=f"signal {name!r}")
    clock = x.clock
    due: float | None = None
    async with x.busy():
        if timeout is not None:
            if entry is None:
                now = clock.now()
                due = now + to_seconds(timeout, what=f"ctx.wait_for_signal({name!r}, timeout)")
                await x.record(
                    {
                        "step_key": key,
                        "kind": "signal",
                        "status": "pending",
                        "due_at": due,
                        "started_at": now,
                        "finished_at": None,
                    }
                )
            else:
                due = float(entry["due_at"])
        taken = await take_message(
            x,
            "signal",
            name,
            lambda body: validate_payload(model, body, what=f"signal {name!r}"),
            lambda message, exc: ("signal-rejected", {"name": name, "message_id": message["id"], "error": str(exc)}),
        )
        if taken is not None:
            message, _, value = taken
            value = typing.cast(M, value)
            await x.record(
                {
                    "step_key": key,
                    "kind": "signal",
                    "status": "completed",
                    "output": _stored(x, key, "output", value.model_dump_json()),
                    "due_at": due,
                },
                message={"id": message["id"], "status": "consumed"},
            )
            x.event("signal-received", {"name": name, "message_id": message["id"], "step": key})
            return value
        if due is not None and due <= clock.now():
            await x.record({"step_key": key, "kind": "signal", "status": "completed", "output": None, "due_at": due})
            x.event("signal-timed-out", {"name": name, "step": key})
            return None
        x.event("signal-awaited", {"name": name, "step": key, "timeout_at": due})
    await x.block(Wait("signal", wake_at=due, names=[name], models=model_ref(name, model)))


async def take_message(
    x: Running,
    kind: str,
    name: str,
    check: Callable[[str], Any],
    rejected: Callable[[Row, PayloadError], tuple[str, dict[str, Any]]],
) -> tuple[Row, str, Any] | None:
    """The next pending ``kind`` message for ``name`` that ``check`` accepts: the message, its payload in
    clear and what ``check`` made of it (``None`` when none is pending). One ``check`` refuses with a
    ``PayloadError`` is settled as failed and reported (``rejected`` gives the event), and the next is read."""
    while True:
        message = await x.store.read(messages.next_message, x.run_id, kind, name)
        if message is None:
            return None
        body = message["payload"]
        if x.sealer is not None:
            body = x.sealer.open(f"msg:{message['id']}", "payload", body)
        try:
            return message, body, check(body)
        except PayloadError as exc:
            now = x.clock.now()
            failed = {"status": "failed", "error_tag": "PayloadError", "error_message": str(exc)}
            await x.store.write(messages.settle_message, message["id"], now, **failed)
            x.event(*rejected(message, exc))


async def handle_update(x: Running, name: str, model: type[M], handler: Callable[[M], Awaitable[T] | T]) -> T:
    """``ctx.handle_update``: answer the next update ``name`` with ``handler``."""
    key = x.key(f"update:{name}")
    entry = x.entry(key)
    rtype, _ = callable_facts(handler)
    if entry is not None and entry["status"] == "completed":
        return decode_as(entry["output"], rtype, workflow=x.row["workflow"], where=f"update {key}")  # type: ignore[no-any-return]
    store, host = x.store, x.host
    async with x.busy():
        while True:
            message = await store.read(messages.next_message, x.run_id, "update", name)
            if message is None:
                break
            mid = message["id"]
            x.event("update-received", {"name": name, "message_id": mid})
            sealer = x.sealer
            try:
                body = message["payload"]
                if sealer is not None:
                    body = sealer.open(f"msg:{mid}", "payload", body)
                value = validate_payload(model, body, what=f"update {name!r}")
                result = await call(handler, (value,), {})
                refuse_unstorable(result, f"update {name!r} answer")  # the update fails; the caller is told why
            except (asyncio.CancelledError, shared.Fenced, Parked, JournalDecryptionError):
                raise
            except Exception as exc:
                tag, text = describe(exc)
                # a rejected payload keeps its field errors, so the caller's PayloadError names them
                detail = dump_json(exc.errors) if isinstance(exc, PayloadError) else None
                if sealer is not None:  # the errors may quote the payload
                    detail = sealer.seal(f"msg:{mid}", "result", detail)
                    text = sealer.seal(f"msg:{mid}", "error", text) or ""
                await store.write(
                    messages.settle_message,
                    mid,
                    x.clock.now(),
                    status="failed",
                    result=detail,
                    error_tag=tag,
                    error_message=text,
                )
                x.event("update-failed", {"name": name, "message_id": mid, "error_tag": tag, "error_message": text})
                host.message_settled(mid)
                continue
            output = encode(result, rtype)
            answer = output
            if sealer is not None:
                answer = sealer.seal(f"msg:{mid}", "result", output)
                output = sealer.seal(key, "output", output)
            await x.record(
                {"step_key": key, "kind": "update", "status": "completed", "output": output},
                message={"id": mid, "status": "completed", "result": answer},
            )
            x.event("update-completed", {"name": name, "message_id": mid, "step": key})
            host.message_settled(mid)
            return result  # type: ignore[no-any-return]
    await x.block(Wait("update", names=[name], models=model_ref(name, model)))


# -- children -------------------------------------------------------------------------------


async def start_child(
    x: Running,
    workflow: str | Callable[..., Any],
    payload: Any,
    *,
    parent_close: ParentClose = "cancel",
    gate: bool | None = None,
    queue: Any = None,
    flow_control: Any = None,
) -> ChildHandle:
    """``ctx.start_child``: create a child run once, or offer it to its gate once (``gate``).

    ``flow_control``: the child run's own step flow control, checked as ``start`` checks it."""
    if parent_close not in ("cancel", "terminate", "abandon"):
        raise ValueError(f"parent_close must be 'cancel', 'terminate' or 'abandon', not {parent_close!r}")
    if gate not in (None, True, False):
        raise InvalidArgument(f"ctx.start_child: gate must be True, False or None, not {gate!r}")
    host = x.host
    child_def = host.app.get(workflow)
    if queue is not None:
        check_member(child_def.name, child_def.queue, queue)
    key = x.key(f"child:{child_def.name}")
    entry = x.entry(key)
    if entry is not None and entry["status"] == "completed":
        return children.handle_of(child_def.name, decode(entry["output"]))
    if child_def.gate_as_child if gate is None else gate:
        return await children.start_gated(x, child_def, payload, key, parent_close, flow_control)
    model = validate_payload(child_def.payload_model, payload, what=f"child {child_def.name!r} payload")
    flow = None if flow_control is None else start_flow_control(flow_control, model)
    async with x.busy():
        now = x.clock.now()
        child_id = new_id("run")
        body = model.model_dump_json()
        if x.sealer is not None:  # an encrypted run's children carry its data: theirs are sealed too
            body = seal_payload(host.keyring, child_def.name, body)
        run = host.new_run_row(child_def, body, run_id=child_id, identity=f"child:{x.run_id}:{key}")
        run.update(parent_id=x.run_id, parent_close=parent_close, recording=x.row["recording"], flow_control=flow)
        # traced: the child's spans continue under this run's (else it keeps the parent's starter)
        traced = None if host.observer is None else host.observer.trace_parent()
        run.update(source=f"child:{x.run_id}", trace_id=traced or x.row["trace_id"], subject=x.row["subject"])
        entry_row = {"step_key": key, "kind": "child", "status": "completed", "output": encode(child_id)}

        async def create(tx: Any) -> str:
            row, _ = await runs.create_run(tx, run, now)
            entry_row["output"] = encode(row["id"])  # an earlier attempt's child, if it made one
            return str(row["id"])

        child_id = await x.record_with(entry_row, create)
        host.wake(now)
        return ChildHandle(run_id=child_id, workflow=child_def.name, parent_close=parent_close)


async def wait_child(x: Running, handle: ChildHandle) -> Any:
    """``ctx.wait_child``: the child's result once it ends; its failure raised."""
    try:
        rtype = x.host.app.get(handle.workflow).result_type
    except Exception:
        rtype = None
    if handle.ticket is not None:
        entry = await children.wait_gated(x, handle, _settle_child)
    else:
        entry = await _wait_own(x, handle)
    outcome = decode(entry["output"])
    run_id = handle.run_id or outcome.get("run_id") or ""
    if outcome["status"] == "succeeded":
        return decode_as(outcome["output"], rtype, workflow=handle.workflow, where=f"result of child {run_id}")
    if outcome["status"] == "cancelled":
        raise RunCancelled(run_id, outcome["error_message"])
    raise RunFailed(run_id, outcome["error_tag"], outcome["error_message"])


async def _wait_own(x: Running, handle: ChildHandle) -> Row:
    """The entry recording the end of a child created at once (parks until it ends)."""
    key = x.key(f"wait:{handle.run_id}")
    entry = x.entry(key)
    if entry is not None and entry["status"] in ("completed", "failed"):
        return entry
    async with x.busy():
        row = await x.store.read(shared.get_run, str(handle.run_id))
        if row["parent_id"] != x.run_id:  # only a child's end wakes this run
            raise ValueError(
                f"run {handle.run_id} is not a child of run {x.run_id}; wait for it with a handle from ctx.start_child"
            )
        if row["status"] in shared.TERMINAL:
            return await _settle_child(x, key, row, handle)
    await x.block(Wait("child", children=[str(handle.run_id)]))


async def _settle_child(x: Running, key: str, row: Row, handle: ChildHandle) -> Row:
    """Journal an ended child's outcome under ``key``; the entry, in clear."""
    output, error = row["output"], row["error_message"]
    if is_sealed(output) or is_sealed(error):  # opened here; sealed again as this run's values
        child = Sealer(x.host.keyring, row["id"])
        output, error = child.open("", "output", output), child.open("", "error", error)
    outcome = {
        "status": row["status"],
        "output": output,
        "error_tag": row["error_tag"],
        "error_message": error,
        "run_id": row["id"],
    }
    # A child that did not succeed is a failed entry: a redrive or resume of this run
    # then looks at the child again (it may have been redriven meanwhile).
    entry = {
        "step_key": key,
        "kind": "wait_child",
        "status": "completed" if row["status"] == "succeeded" else "failed",
        "output": encode(outcome),
        "error_tag": row["error_tag"],
        "error_message": error,
    }
    sealer = x.sealer
    if sealer is None:
        await x.record(entry)
    else:  # stored sealed; read below in clear
        await x.record(
            {
                **entry,
                "output": sealer.seal(key, "output", entry["output"]),
                "error_message": sealer.seal(key, "error", error),
            }
        )
    return entry
