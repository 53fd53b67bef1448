"""The deploy-time replay check: would the code being deployed follow the journals of runs in flight?

A run's body is entered from the top with its recorded payload against a ``Context`` that
only reads the run's journal: every durable operation the body asks for is compared with
what the journal recorded, and answered with the recorded value. No step function is called,
nothing is written; an operation the journal has no completed answer for is where the run
would go on live, so the body stops there.

The check compares *order*, not only names (the runtime tripwire in ``durable.divergence``
compares names and counts): operations the body asks for on its own task must come in the
journal's order. Operations asked for by other tasks (``asyncio.gather`` branches) may have
completed in any order, so a run of them is compared as a set.

A journal travels as a ``JournalExport`` (``lockgate workflows export RUN_ID``): the run's
row as stored and its journal entries, values sealed as they were stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NoReturn, TypeVar

from pydantic import BaseModel

from ..app import App
from ..callbacks import CallbackToken
from ..compensation import CancelRequested, Compensations
from ..context import ChildHandle, Context
from ..controls import FailureReport
from ..crypto import Keyring, Sealer, is_sealed, open_for_replay
from ..definitions import Retry, WorkflowDef
from ..durations import Duration
from ..errors import ChildNotStarted, InvalidArgument, LockgateError, RunCancelled, RunFailed, StepFailed
from ..serde import conform, decode, decode_as, validate_payload
from ..store.base import Row
from ..store.journal import CANCEL_KEY
from .callbacks import recorded_outcome
from .cancelling import CancelState
from .children import handle_of
from .durable import callable_facts, describe
from .event_waits import EventWait, recorded_event
from .events import declared_event

__all__ = ["EXPORT_FORMAT", "JournalExport", "Outcome", "ReplayVerdict", "check_export"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

EXPORT_FORMAT = "lockgate.journal/1"
Outcome = Literal["compatible", "version-incompatible", "nondeterministic", "unregistered", "fails", "undecidable"]

_RUN_FIELDS = ("id", "workflow", "status", "version", "patches", "payload", "recording", "created_at")
_ENTRY_FIELDS = (
    "step_key",
    "seq",
    "kind",
    "status",
    "output",
    "error_tag",
    "error_message",
    "attempts",
    "due_at",
    "started_at",
    "finished_at",
)
SETTLE_TURNS = 20
"""Turns of the event loop with nothing new asked for after which a blocked body is taken as stopped."""
BODY_TIMEOUT = 5.0
"""Seconds a body may take to reach its next durable operation before its run is reported undecidable."""


@dataclass(frozen=True)
class JournalExport:
    """One run's row and journal, as ``lockgate workflows export`` writes them (values as stored)."""

    run: dict[str, Any]
    journal: list[dict[str, Any]]

    @classmethod
    def of(cls, run: Row, journal: list[Row]) -> JournalExport:
        """The export of a stored run row and its journal rows."""
        entries = sorted(({k: e.get(k) for k in _ENTRY_FIELDS} for e in journal), key=lambda e: int(e["seq"] or 0))
        return cls(run={k: run.get(k) for k in _RUN_FIELDS}, journal=entries)

    def to_json(self) -> str:
        return json.dumps({"format": EXPORT_FORMAT, "run": self.run, "journal": self.journal}, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "journal export") -> JournalExport:
        """Read an export back; ``InvalidArgument`` naming what is wrong with it."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidArgument(f"{source}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise InvalidArgument(f"{source}: not a lockgate journal export (format {EXPORT_FORMAT!r} expected)")
        run, journal = doc.get("run"), doc.get("journal")
        if not isinstance(run, dict) or not all(isinstance(run.get(k), str) for k in ("id", "workflow", "payload")):
            raise InvalidArgument(f"{source}: 'run' must hold the run's id, workflow and payload")
        if not isinstance(journal, list) or not all(
            isinstance(e, dict) and isinstance(e.get("step_key"), str) and isinstance(e.get("seq"), int)
            for e in journal
        ):
            raise InvalidArgument(f"{source}: 'journal' must be a list of entries with a step_key and a seq")
        return cls(run=dict(run), journal=sorted(journal, key=lambda e: int(e["seq"] or 0)))


@dataclass(frozen=True)
class ReplayVerdict:
    """What the code being checked would do with one run's journal.

    ``outcome``: ``compatible`` (it follows the journal), ``version-incompatible`` (its
    ``version`` does not accept the run's: see ``compatible_with``), ``nondeterministic``
    (the operations it asks for diverge from the journal at ``position``: ``recorded`` vs
    ``requested``, either ``None`` when that side had nothing there), ``unregistered`` (no
    such workflow), ``fails`` (the body raises on replay, ``detail`` says what),
    ``undecidable`` (the journal could not be read, e.g. sealed without the key).
    """

    run_id: str
    workflow: str
    status: str | None
    outcome: Outcome
    version: str | None = None
    compatible_with: tuple[str, ...] = ()
    position: int | None = None
    recorded: str | None = None
    requested: str | None = None
    replayed: int = 0
    detail: str | None = None

    @property
    def breaks(self) -> bool:
        """Whether the run would not go on as recorded under this code."""
        return self.outcome != "compatible"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "outcome": self.outcome,
            "breaks": self.breaks,
            "version": self.version,
            "compatible_with": list(self.compatible_with),
            "position": self.position,
            "recorded": self.recorded,
            "requested": self.requested,
            "replayed": self.replayed,
            "detail": self.detail,
        }


class _Frontier(BaseException):
    """The body asked for something the journal has no answer for: the run would go on live here."""


class _Replay(Context):
    """A ``Context`` that answers from a journal and records what the body asks for, in order."""

    def __init__(
        self, app: App, run: dict[str, Any], journal: dict[str, dict[str, Any]], cancel: str | None = None
    ) -> None:
        self.app = app
        self._cancel = CancelState(cancel)  # a compensating cancel was requested: the body stops as it did
        self.run_id = str(run["id"])
        self.workflow = str(run["workflow"])
        self.attempt = 1
        self._journal = journal
        self._patches = set(json.loads(run.get("patches") or "[]"))
        self._occurrences: dict[str, int] = {}
        self.asked: list[tuple[str, bool]] = []  # each key asked for, and whether by the body's own task
        self.blocked = 0
        self.body: asyncio.Task[Any] | None = None

    def _key(self, name: str) -> tuple[str, dict[str, Any] | None]:
        n = self._occurrences.get(name, 0)
        self._occurrences[name] = n + 1
        key = f"{name}#{n}"
        entry = self._journal.get(key)
        if entry is not None or self._cancel.reason is None or self._cancel.depth:  # a cancel stops before new keys
            self.asked.append((key, asyncio.current_task() is self.body))
        if entry is None or entry.get("status") not in ("completed", "failed"):
            self._cancel.check()
            return key, None
        return key, entry

    def compensations(self) -> Compensations:
        return Compensations(self.step, self._cancel.undoing, self._cancel_at_exit)

    def _cancel_at_exit(self) -> str | None:
        """As the executor: a block exiting while recorded entries are still to come was done with."""
        asked = {key for key, _ in self.asked}
        return None if any(key not in asked for key in self._journal) else self._cancel.reason

    async def _live(self) -> NoReturn:
        """Stop this branch: from here the run would act for real."""
        self.blocked += 1
        await asyncio.Future()  # never resolved: the body is cancelled when every branch stops
        raise _Frontier

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        input: Any = None,
        **kwargs: Any,
    ) -> Any:
        key, entry = self._key(name)
        if entry is None:
            await self._live()
        if entry["status"] == "failed":
            raise StepFailed(name, entry["error_tag"], entry["error_message"], int(entry.get("attempts") or 1))
        rtype, _ = callable_facts(fn)
        return decode_as(entry["output"], rtype, workflow=self.workflow, where=f"step {key}")

    async def sleep(self, name: str, duration: Duration) -> None:
        if self._key(name)[1] is None:
            await self._live()

    async def sleep_until(self, name: str, when: datetime) -> None:
        if self._key(name)[1] is None:
            await self._live()

    async def _value(self, name: str, tp: Any) -> Any:
        _, entry = self._key(name)
        if entry is None:
            await self._live()
        return decode(entry["output"], tp)

    async def now(self) -> datetime:
        return datetime.fromtimestamp(float(await self._value("$now", float))).astimezone()

    async def uuid(self) -> str:
        return str(await self._value("$uuid", str))

    async def random(self) -> float:
        return float(await self._value("$random", float))

    def patch(self, marker: str) -> bool:
        return marker in self._patches

    async def wait_for_signal(self, name: str, model: type[M], *, timeout: Duration | None = None) -> M | None:
        _, entry = self._key(f"signal:{name}")
        if entry is None:
            await self._live()
        out = entry["output"]
        return None if out is None else validate_payload(model, out, what=f"recorded signal {name!r}")

    async def wait_for_event(self, event: Any, **options: Any) -> Any:
        spec = EventWait.of(self.app, event, options.get("match"), options.get("timeout"), options.get("lookback"))
        _, entry = self._key(f"event:{spec.label}")
        if entry is None:
            await self._live()
        return recorded_event(self.app, entry["output"], None)

    async def create_token(self, name: str, **options: Any) -> CallbackToken:
        _, entry = self._key(f"token:{name}")
        if entry is None:
            await self._live()
        return CallbackToken.from_dict(json.loads(entry["output"]), options.get("model"))

    async def wait_for_token(self, token: CallbackToken) -> Any:
        _, entry = self._key(f"token-wait:{token.name}")
        if entry is None:
            await self._live()
        return recorded_outcome(token, entry["output"])

    async def handle_update(self, name: str, model: type[M], handler: Callable[[M], Awaitable[T] | T]) -> T:
        key, entry = self._key(f"update:{name}")
        if entry is None:
            await self._live()
        rtype, _ = callable_facts(handler)
        return decode_as(entry["output"], rtype, workflow=self.workflow, where=f"update {key}")  # type: ignore[no-any-return]

    async def start_child(
        self, workflow: str | Callable[..., Any], payload: Any, *args: Any, **kwargs: Any
    ) -> ChildHandle:
        name = self.app.get(workflow).name
        _, entry = self._key(f"child:{name}")
        if entry is None:
            await self._live()
        return handle_of(name, decode(entry["output"]))

    async def wait_child(self, handle: ChildHandle) -> Any:
        _, entry = self._key(f"wait:{handle.ticket or handle.run_id}")
        if entry is None:
            await self._live()
        outcome = decode(entry["output"])
        run_id = handle.run_id or outcome.get("run_id") or ""
        if outcome["status"] == "not-started":
            raise ChildNotStarted(
                handle.workflow, handle.ticket or "", outcome["outcome"], outcome.get("reason"), outcome.get("run_id")
            )
        if outcome["status"] == "succeeded":
            rtype = self.app.get(handle.workflow).result_type if handle.workflow in self.app.names else None
            return decode_as(outcome["output"], rtype, workflow=handle.workflow, where=f"child {run_id}")
        if outcome["status"] == "cancelled":
            raise RunCancelled(run_id, outcome["error_message"])
        raise RunFailed(run_id, outcome["error_tag"], outcome["error_message"])

    async def stream(self, chunk: Any, *, topic: str = "default") -> None:
        """A replay streams nothing: what the run streamed is kept, not journaled."""

    async def publish(self, event: Any, key: Any = None, payload: Any = None) -> str:
        declared = declared_event(self.app, event)
        _, entry = self._key(f"publish:{declared.name}")
        if entry is None:
            await self._live()
        return str(decode(entry["output"], str))


async def check_export(app: App, export: JournalExport, *, keyring: Keyring | None = None) -> ReplayVerdict:
    """Replay ``export`` against ``app``'s definition of its workflow; executes no step, writes nothing."""
    run = export.run
    base: dict[str, Any] = {"run_id": str(run["id"]), "workflow": str(run["workflow"]), "status": run.get("status")}
    app.definitions()
    if run["workflow"] not in app.names:
        return ReplayVerdict(**base, outcome="unregistered", detail=f"registered: {sorted(app.names)}")
    defn = app.get(str(run["workflow"]))
    base["version"] = run.get("version")
    if not defn.accepts_version(run.get("version")):
        return ReplayVerdict(
            **base,
            outcome="version-incompatible",
            compatible_with=(*((defn.version,) if defn.version else ()), *defn.compatible_with),
            detail=f"the run has version {run.get('version')!r}; this code is {defn.version!r}",
        )
    try:
        payload, journal = _opened(defn, export, keyring or Keyring.load())
    except LockgateError as exc:  # a payload that no longer validates, a value sealed under a missing key
        return ReplayVerdict(**base, outcome="undecidable", detail=str(exc))
    cancel = next((e for e in export.journal if e["step_key"] == CANCEL_KEY), None)
    ctx = _Replay(app, run, journal, None if cancel is None else str(cancel.get("error_message") or "cancelled"))
    try:
        failure = await _drive(defn, ctx, payload)
    except _Undecided as exc:
        return ReplayVerdict(**base, outcome="undecidable", detail=str(exc))
    recorded = [e["step_key"] for e in export.journal if e["step_key"] != CANCEL_KEY]  # a request, not the body's
    diverged = _diverges(recorded, ctx.asked, journal)
    if diverged is not None:
        position, was, asked = diverged
        return ReplayVerdict(
            **base, outcome="nondeterministic", position=position, recorded=was, requested=asked, replayed=position
        )
    if failure is not None:
        return ReplayVerdict(**base, outcome="fails", replayed=len(recorded), detail=failure)
    return ReplayVerdict(**base, outcome="compatible", replayed=len(recorded))


def _opened(defn: WorkflowDef, export: JournalExport, keyring: Keyring) -> tuple[BaseModel, dict[str, dict[str, Any]]]:
    """The run's payload and journal in clear, opened as the executor opens them on re-entry."""
    run = export.run
    journal = {str(e["step_key"]): dict(e) for e in export.journal if e["step_key"] != CANCEL_KEY}
    text = str(run["payload"])
    sealer = Sealer(keyring, str(run["id"])) if defn.encrypt_steps or is_sealed(text) else None
    if sealer is not None or "$sealed" in text:
        report = issubclass(defn.payload_model, FailureReport)
        text, _, journal = open_for_replay(keyring, run, text, journal, sealer, report=report)
    return validate_payload(defn.payload_model, text, what=f"run {run['id']} payload"), journal


class _Undecided(Exception):
    """The body neither ended nor stopped at the journal's end in time."""


async def _drive(defn: WorkflowDef, ctx: _Replay, payload: BaseModel) -> str | None:
    """Run the body until it ends or every branch stops at the journal's end; what it failed with, if it did."""
    task: asyncio.Task[Any] = asyncio.ensure_future(defn.fn(ctx, payload))
    ctx.body = task
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BODY_TIMEOUT
    quiet = turns = 0
    while not task.done() and quiet < SETTLE_TURNS:
        asked = len(ctx.asked)
        turns += 1
        await asyncio.sleep(0 if turns < 100 else 0.01)  # a body awaiting something else is not spun on
        quiet = quiet + 1 if len(ctx.asked) == asked and ctx.blocked else 0
        if loop.time() > deadline:
            break
    if not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        if quiet < SETTLE_TURNS:
            raise _Undecided(f"the body reached no durable operation within {BODY_TIMEOUT:g}s")
        return None
    exc = None if task.cancelled() else task.exception()
    if exc is None:
        if task.cancelled():
            return None
        try:
            conform(task.result(), defn.result_type, workflow=defn.name)
        except LockgateError as bad:
            return f"{type(bad).__name__}: {bad}"
        return None
    if isinstance(exc, _Frontier | CancelRequested):  # stopped where the run would go on, or cancelled as it was
        return None
    tag, message = describe(exc)
    return f"{tag}: {message}"


def _diverges(
    recorded: list[str], asked: list[tuple[str, bool]], journal: dict[str, Any]
) -> tuple[int, str | None, str | None] | None:
    """Where what the body asked for leaves the journal's order: (position, recorded, requested).

    ``asked`` holds each key with whether the body's own task asked for it; a run of keys
    asked for by other tasks (concurrent branches) is one group, compared as a set.
    """
    groups: list[list[str]] = []
    branching = False
    for key, own in asked:
        if own or not branching:
            groups.append([key])
        else:
            groups[-1].append(key)
        branching = not own
    pos = 0
    for group in groups:
        window = recorded[pos : pos + len(group)]
        if set(window) == set(group):
            pos += len(group)
            continue
        beyond = [k for k in group if k not in window]
        if pos + len(group) > len(recorded) and set(window) <= set(group) and all(k not in journal for k in beyond):
            return None  # the body goes past the journal's end: new work, as expected
        for i, key in enumerate(group):
            was = window[i] if i < len(window) else None
            if was != key:
                return pos + i, was, key
    if pos < len(recorded):
        return pos, recorded[pos], None
    return None
