"""Every error lockgate raises.

::

    LockgateError
     ├── DefinitionError            a workflow declaration is wrong (raised at boot)
     ├── PayloadError               a payload does not match its model
     ├── UnknownWorkflow            no workflow is registered under that name
     ├── InvalidArgument            an argument to an API call is wrong (also a ValueError)
     ├── UnknownRun                 no run has that id
     ├── RunNotEligible             a recovery verb does not apply to the run's state
     ├── RunFailed                  the awaited run failed
     ├── RunCancelled               the awaited run was cancelled
     ├── ResultTimeout              the result did not arrive in time
     ├── UpdateFailed               an update was rejected or its handler raised
     ├── WorkflowVersionIncompatible
     ├── WorkflowCrashLooped
     ├── StepFailed                 a step exhausted its retry policy
     ├── StartNotAdmitted           a parked start ended without a run
     ├── RateLimited                a start was dropped by a rate limit
     ├── SingletonHeld              a singleton start found an incumbent
     ├── BlockingStartRefused       a blocking start on a deferring workflow
     ├── EncryptionKeyError         an encryption key is malformed (raised at boot)
     ├── JournalDecryptionError     a stored value of an encrypted run does not open
     └── StoreError                 the store refused or could not be reached

Control-flow signals used inside workflow bodies derive from ``BaseException`` so a
user's ``except Exception:`` cannot swallow them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

__all__ = [
    "BlockingStartRefused",
    "DefinitionError",
    "EncryptionKeyError",
    "EngineClosed",
    "InvalidArgument",
    "JournalDecryptionError",
    "LockgateError",
    "PayloadError",
    "RateLimited",
    "ResultTimeout",
    "RetryAfter",
    "RunCancelled",
    "RunFailed",
    "RunNotEligible",
    "SingletonHeld",
    "StartNotAdmitted",
    "StepFailed",
    "StoreCorrupt",
    "StoreError",
    "UnknownRun",
    "UnknownWorkflow",
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


class StoreCorrupt(StoreError):
    """The database is damaged (not merely busy or away): retrying cannot help."""


class EngineClosed(LockgateError):
    """The engine (or client) is closed, or was closed while this call waited; the run goes on, durable.

    Its result can be awaited again from any open engine or client on the same store.
    """


class RetryAfter(Exception):
    """Raise from a step to ask for a retry no sooner than ``seconds`` from now."""

    def __init__(self, seconds: float, message: str = "") -> None:
        self.retry_after = float(seconds)
        super().__init__(message or f"retry after {seconds}s")
