"""Every error lockgate raises.

::

    LockgateError
     ├── DefinitionError            a workflow declaration is wrong (raised at boot)
     ├── PayloadError               a payload does not match its model
     │    └── UnstorableValue       a produced value holds NaN, an infinity or a lone surrogate
     ├── UnknownWorkflow            no workflow is registered under that name
     ├── InvalidArgument            an argument to an API call is wrong (also a ValueError)
     │    ├── InvalidSchedule       a runtime schedule's option is wrong (names the field)
     │    ├── ReadStoreRefused      a read store is not a streaming standby of the write store (names the option)
     │    ├── InvalidHistoryOption  an unknown history partition interval, or a retention shorter (names the field)
     │    ├── UnknownSchedule       no schedule has that id
     │    ├── OutsideWorkflowBody   a body-only helper (``lockgate.ai``) called without a workflow's context
     │    └── CompensationClosed    a compensation registered outside its ``ctx.compensations()`` block
     ├── ScheduleExists             a runtime schedule with that id exists already
     ├── ScheduleNotOwned           a declared schedule cannot be changed by the runtime verbs
     ├── UnknownRun                 no run has that id
     ├── RunNotEligible             a recovery verb does not apply to the run's state
     ├── RunFailed                  the awaited run failed
     ├── RunCancelled               the awaited run was cancelled
     ├── ResultTimeout              the result did not arrive in time
 ├── ResultTypeError            a returned value does not match its annotation
     ├── UpdateFailed               an update was rejected or its handler raised
     ├── WorkflowVersionIncompatible
     ├── WorkflowCrashLooped
     ├── StepFailed                 a step exhausted its retry policy
     ├── CompensationFailed         a compensation exhausted its retry policy (the run is suspended)
     ├── StartNotAdmitted           a parked start ended without a run
     │    └── ChildNotStarted       a gated child did not become a run of its own
     ├── StartRolledBack            a start made in the caller's transaction was rolled back with it
     ├── ForeignTransaction         conn= is not a transaction on the store's own database (an InvalidArgument)
     ├── RateLimited                a start was dropped by a rate limit
     ├── SingletonHeld              a singleton start found an incumbent
     ├── BlockingStartRefused       a blocking start on a deferring workflow
     ├── EncryptionKeyError         an encryption key is malformed (raised at boot)
     ├── JournalDecryptionError     a stored value of an encrypted run does not open
     ├── StreamLimitExceeded        a run's stream reached its cap (chunks or bytes)
     ├── StreamTokenRefused         a stream read token is malformed, forged, expired or for another stream
     ├── UnsupportedIntegration     an optional integration's library is missing or of a version not supported
     └── StoreError                 the store refused or could not be reached
          └── StoreFull             its disk is full (nothing of the refused write is kept)

Control-flow signals used inside workflow bodies derive from ``BaseException`` so a
user's ``except Exception:`` cannot swallow them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

__all__ = [
    "BlockingStartRefused",
    "ChildNotStarted",
    "CompensationClosed",
    "CompensationFailed",
    "CostExceedsRate",
    "DefinitionError",
    "EncryptionKeyError",
    "EngineClosed",
    "ForeignTransaction",
    "InvalidArgument",
    "InvalidHistoryOption",
    "InvalidSchedule",
    "JournalDecryptionError",
    "LockgateError",
    "OutsideWorkflowBody",
    "PayloadError",
    "RateLimited",
    "ReadStoreRefused",
    "ResultTimeout",
    "ResultTypeError",
    "RetryAfter",
    "RunCancelled",
    "RunFailed",
    "RunNotEligible",
    "ScheduleExists",
    "ScheduleNotOwned",
    "SingletonHeld",
    "StartNotAdmitted",
    "StartRolledBack",
    "StepFailed",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StreamLimitExceeded",
    "StreamTokenRefused",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownWorkflow",
    "UnstorableValue",
    "UnsupportedIntegration",
    "UpdateFailed",
    "WorkflowCrashLooped",
    "WorkflowVersionIncompatible",
]


class LockgateError(Exception):
    """Base class of every lockgate error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class DefinitionError(LockgateError):
    """A workflow definition is invalid."""

    def __init__(self, workflow: str, fields: str | Sequence[str], problem: str) -> None:
        self.workflow = workflow
        self.fields = [fields] if isinstance(fields, str) else list(fields)
        self.problem = problem
        super().__init__(f"workflow {workflow!r}: {' + '.join(self.fields)}: {problem}")


class PayloadError(LockgateError):
    """A payload does not match its model."""

    def __init__(self, what: str, errors: Iterable[dict[str, Any]] | str) -> None:
        self.what = what
        if isinstance(errors, str):
            self.errors: list[dict[str, Any]] = [{"loc": (), "msg": errors, "type": "invalid"}]
        else:
            self.errors = [dict(e) for e in errors]
        self.missing = [_loc(e) for e in self.errors if e.get("type") == "missing"]
        self.invalid = [_loc(e) for e in self.errors if e.get("type") != "missing"]
        parts = []
        if self.missing:
            parts.append("missing " + ", ".join(self.missing))
        if self.invalid:
            details = [f"{_loc(e)} ({e.get('msg', 'invalid')})" for e in self.errors if e.get("type") != "missing"]
            parts.append("invalid " + ", ".join(details))
        super().__init__(f"{what}: " + "; ".join(parts))


class UnstorableValue(PayloadError):
    """A value a run produced (a step's result, a body's result, an update's answer, a recorded value)
    holds NaN, an infinity or a lone surrogate, which JSON cannot hold: refused where it is produced,
    never stored as ``null``. ``what`` names the value, ``invalid`` the field inside it."""


def _loc(error: dict[str, Any]) -> str:
    loc = error.get("loc") or ()
    return ".".join(str(p) for p in loc) or "(root)"


class UnknownWorkflow(LockgateError):
    """No workflow is registered under that name."""

    def __init__(self, name: str, registered: Iterable[str]) -> None:
        self.name = name
        self.registered = sorted(registered)
        listed = ", ".join(self.registered) or "(none)"
        super().__init__(f"unknown workflow {name!r}; registered: {listed}")


class InvalidArgument(LockgateError, ValueError):
    """An argument to an API call is wrong; the message names it and what is accepted."""


class OutsideWorkflowBody(InvalidArgument):
    """A helper that only a workflow body may use was called without the body's ``lg.Context``."""

    def __init__(self, what: str, got: object) -> None:
        self.what = what
        super().__init__(
            f"{what}: needs the workflow body's lg.Context as its first argument (got {type(got).__name__}); "
            "call it from inside an @app.workflow body"
        )


class UnsupportedIntegration(LockgateError, ImportError):
    """An optional integration's library is missing, or installed at a version lockgate does not support."""

    def __init__(self, package: str, found: str | None, supported: str, extra: str) -> None:
        self.package, self.found, self.supported, self.extra = package, found, supported, extra
        have = "is not installed" if found is None else f"{found} is installed"
        super().__init__(f"{package} {have}; lockgate supports {package} {supported}: pip install 'lockgate[{extra}]'")


class CostExceedsRate(InvalidArgument):
    """A call reserves more units than its weighted flow key's rate: it could never start, so it is refused at once."""

    def __init__(self, key: str, cost: int, rate: int, period: float) -> None:
        self.key, self.cost, self.rate, self.period = key, cost, rate, period
        super().__init__(
            f"cost: the call reserves {cost} units of flow key {key!r}, whose rate is {rate} units per "
            f"{period:g}s: it could never start"
        )


class InvalidSchedule(InvalidArgument):
    """A runtime schedule's option is wrong: ``field`` names it, ``problem`` says why (nothing was written)."""

    def __init__(self, schedule: str, field: str, problem: str) -> None:
        self.schedule = schedule
        self.field = field
        self.problem = problem
        super().__init__(f"schedule {schedule!r}: {field}: {problem}")


class ReadStoreRefused(InvalidArgument):
    """A read store that cannot serve reads: it is the primary itself, unreachable, not a standby of the write
    store, or on SQLite. ``field`` names the option (``read_store``, ``--read-store``), ``problem`` says why."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class InvalidHistoryOption(InvalidArgument):
    """An option of the time-partitioned history is wrong (docs/history.md): ``field`` names it
    (``history_partition``, ``retention``), ``problem`` says why."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class UnknownSchedule(InvalidArgument):
    """No schedule has that id."""

    def __init__(self, schedule: str, hint: str = "") -> None:
        self.schedule = schedule
        super().__init__(f"unknown schedule {schedule!r}{hint}")


class ScheduleExists(LockgateError):
    """A schedule with that id exists already (``create(..., if_exists="error")``)."""

    def __init__(self, schedule: str, origin: str) -> None:
        self.schedule = schedule
        self.origin = origin
        super().__init__(f"schedule {schedule!r} exists already ({origin})")


class ScheduleNotOwned(LockgateError):
    """A declared schedule belongs to the code that declares it: the runtime verbs do not change it."""

    def __init__(self, schedule: str, verb: str) -> None:
        self.schedule = schedule
        self.verb = verb
        super().__init__(
            f"cannot {verb} schedule {schedule!r}: it is declared in code (change the declaration instead)"
        )


class UnknownRun(LockgateError):
    """No run has that id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class RunNotEligible(LockgateError):
    """A recovery verb does not apply to the run in its current state."""

    def __init__(self, verb: str, run_id: str, status: str, why: str) -> None:
        self.verb = verb
        self.run_id = run_id
        self.status = status
        self.why = why
        super().__init__(f"cannot {verb} run {run_id} (status {status}): {why}")


class RunFailed(LockgateError):
    """The run failed."""

    def __init__(self, run_id: str, error_tag: str | None, error_message: str | None) -> None:
        self.run_id = run_id
        self.error_tag = error_tag
        self.error_message = error_message
        super().__init__(f"run {run_id} failed: {error_tag}: {error_message}")


class RunCancelled(LockgateError):
    """The run was cancelled."""

    def __init__(self, run_id: str, reason: str | None) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id} was cancelled: {reason or 'no reason given'}")


class ResultTimeout(LockgateError, TimeoutError):
    """The result did not arrive before the timeout."""


class ResultTypeError(LockgateError):
    """A value does not match the type it is annotated with: a body's result (or a step's, a child's).

    A body whose return value does not validate against its return annotation fails with
    this error, and ``result()`` raises ``RunFailed`` caused by it. ``where`` says which
    value: ``"result"`` for the run's own, else the step or child it came from.
    """

    def __init__(self, workflow: str, expected: str, actual: str, where: str = "result") -> None:
        self.workflow = workflow
        self.expected = expected
        self.actual = actual
        self.where = where
        super().__init__(f"workflow {workflow!r}: {where} is {actual}, expected {expected}")

    @classmethod
    def from_message(cls, message: str | None) -> ResultTypeError | None:
        """The error a failed run was recorded with, rebuilt from its message (``None`` if it is not one)."""
        found = _RESULT_TYPE.fullmatch(message or "")
        if found is None:
            return None
        return cls(found["workflow"], found["expected"], found["actual"], found["where"])


_RESULT_TYPE = re.compile(r"workflow '(?P<workflow>.*)': (?P<where>.+?) is (?P<actual>.+), expected (?P<expected>.+)")


class UpdateFailed(LockgateError):
    """An update was rejected by validation or its handler raised."""

    def __init__(self, run_id: str, name: str, error_tag: str, error_message: str) -> None:
        self.run_id = run_id
        self.name = name
        self.error_tag = error_tag
        self.error_message = error_message
        super().__init__(f"update {name!r} on run {run_id} failed: {error_tag}: {error_message}")


class WorkflowVersionIncompatible(LockgateError):
    """The run was started by a workflow version this code is not compatible with."""


class WorkflowCrashLooped(LockgateError):
    """The run's body kept dying with its process and was parked."""


class StepFailed(LockgateError):
    """A step failed after its retry policy gave up."""

    def __init__(self, step: str, error_tag: str, error_message: str, attempts: int) -> None:
        self.step = step
        self.error_tag = error_tag
        self.error_message = error_message
        self.attempts = attempts
        super().__init__(f"step {step!r} failed after {attempts} attempt(s): {error_tag}: {error_message}")


class CompensationFailed(LockgateError):
    """A compensation failed after its retry policy gave up, while undoing after another error.

    Both are kept: ``compensation`` and ``error_tag`` / ``error_message`` say which compensation
    failed and how, ``cause_tag`` / ``cause_message`` what it was undoing after. The run is
    suspended (never failed nor cancelled with an undo left half done); ``resume`` runs the
    failed compensation again, then the ones registered before it.
    """

    def __init__(
        self, compensation: str, error_tag: str, error_message: str, cause_tag: str, cause_message: str
    ) -> None:
        self.compensation = compensation
        self.error_tag = error_tag
        self.error_message = error_message
        self.cause_tag = cause_tag
        self.cause_message = cause_message
        super().__init__(
            f"compensation {compensation!r} failed: {error_tag}: {error_message}; "
            f"it was undoing after {cause_tag}: {cause_message}"
        )


class CompensationClosed(InvalidArgument):
    """A compensation was registered on a ``ctx.compensations()`` block that is not open."""

    def __init__(self, compensation: str, state: str) -> None:
        self.compensation = compensation
        super().__init__(
            f"undo.add({compensation!r}, ...): the compensations block {state}; "
            "register a compensation inside its 'async with ctx.compensations() as undo:' block"
        )


class RateLimited(LockgateError):
    """The start was dropped by a rate limit."""

    def __init__(self, workflow: str, retry_after: timedelta) -> None:
        self.workflow = workflow
        self.retry_after = retry_after
        super().__init__(f"workflow {workflow!r} is rate limited; retry after {retry_after.total_seconds():.3f}s")


class StartNotAdmitted(LockgateError):
    """A parked start ended without a run: expired past its start timeout, cancelled, or dropped when re-offered."""

    def __init__(self, ticket: str, outcome: str, reason: str | None) -> None:
        self.ticket = ticket
        self.outcome = outcome
        self.reason = reason
        why = f": {reason}" if reason else ""
        super().__init__(f"start {ticket} ended without a run ({outcome}{why})")


class StartRolledBack(LockgateError):
    """A start made inside the caller's transaction (``conn=``) was rolled back with it: no run, no ledger row."""

    def __init__(self, workflow: str, ticket: str) -> None:
        self.workflow = workflow
        self.ticket = ticket
        super().__init__(
            f"start {ticket} of workflow {workflow!r} was made in a transaction that rolled back: nothing of it exists"
        )


class ForeignTransaction(InvalidArgument):
    """``conn=`` cannot carry a start: not in a transaction, another database than the store's, or another driver.

    The message names both sides (the caller's connection and the store). Nothing was written.
    """


class ChildNotStarted(StartNotAdmitted):
    """A child offered to its workflow's gate did not become a run of its own.

    ``outcome``: ``dropped`` (a rate limit; ``retry_after``), ``skipped`` (a singleton
    incumbent: ``run_id``), ``collapsed`` / ``batched`` (folded into another start: that
    run does the work), ``expired`` (start timeout), ``cancelled``.
    """

    def __init__(
        self, workflow: str, ticket: str, outcome: str, reason: str | None = None, run_id: str | None = None
    ) -> None:
        self.workflow = workflow
        self.run_id = run_id
        super().__init__(ticket, outcome, reason)
        self.args = (f"child {workflow!r} (ticket {ticket}) was {outcome}" + (f": {reason}" if reason else ""),)


class SingletonHeld(LockgateError):
    """A singleton start found an incumbent run."""

    def __init__(self, workflow: str, run_id: str) -> None:
        self.workflow = workflow
        self.run_id = run_id
        super().__init__(f"workflow {workflow!r} singleton is held by run {run_id}")


class BlockingStartRefused(LockgateError):
    """A blocking start was asked of a workflow whose starts may be deferred."""

    def __init__(self, workflow: str, control: str, blocking: str) -> None:
        self.workflow = workflow
        self.control = control
        self.blocking = blocking
        super().__init__(
            f"workflow {workflow!r}: {blocking} cannot be combined with {control}: "
            f"the start may be deferred or folded; use start() and await the run later"
        )


class EncryptionKeyError(LockgateError, ValueError):
    """An encryption key is malformed; the message names where it came from (the variable or argument)."""


class JournalDecryptionError(LockgateError):
    """A stored value of an encrypted run does not open with any key this process holds.

    The engine suspends such a run rather than run its steps again blindly; give the
    process the key that sealed it (or restore the value) and ``resume`` it.
    """

    def __init__(self, run_id: str, journal_key: str, why: str) -> None:
        self.run_id = run_id
        self.journal_key = journal_key
        self.why = why
        super().__init__(f"run {run_id}: stored value {journal_key!r} does not decrypt: {why}")


class StoreError(LockgateError):
    """The store refused the operation or could not be reached."""


class StoreFull(StoreError):
    """The store's disk is full: the write was refused whole; reads go on, and writes resume once space is freed."""


class StoreCorrupt(StoreError):
    """The database is damaged (not merely busy or away): retrying cannot help."""


class EngineClosed(LockgateError):
    """The engine (or client) is closed, or was closed while this call waited; the run goes on, durable.

    Its result can be awaited again from any open engine or client on the same store.
    """


class StreamLimitExceeded(LockgateError):
    """A run's stream reached its cap (``Engine(stream_limits=)``): the chunk was refused, nothing written."""

    def __init__(self, run_id: str, what: str, limit: int) -> None:
        self.run_id = run_id
        self.what = what  # "chunks" or "bytes"
        self.limit = limit
        super().__init__(f"run {run_id}: its stream reached its cap of {limit} {what}; the chunk was refused")


class StreamTokenRefused(LockgateError):
    """A stream read token does not grant this read: ``reason`` is ``malformed``, ``forged``, ``expired``,
    ``other run`` or ``other topic``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"stream token refused: {reason}")


class RetryAfter(Exception):
    """Raise from a step to ask for a retry no sooner than ``seconds`` from now."""

    def __init__(self, seconds: float, message: str = "") -> None:
        self.retry_after = float(seconds)
        super().__init__(message or f"retry after {seconds}s")
