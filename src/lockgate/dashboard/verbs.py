"""The operator verbs a run's page offers: which states allow each, what each asks for, and the call.

The states here only decide which buttons are enabled; the ``Client`` verb decides for real
and its typed refusal is what the page shows when the run moved on meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..facades import Client
from ..records import RunInfo

__all__ = ["VERBS", "Verb", "allowed", "perform"]


@dataclass(frozen=True)
class Verb:
    """One verb: its label, the statuses that allow it, the form fields it asks for, what it does."""

    name: str
    label: str
    statuses: tuple[str, ...]
    fields: tuple[str, ...]
    explains: str
    danger: bool = False


VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb("cancel", "Cancel", ("running", "suspended"), ("reason",), "Stop the run; it ends cancelled.", True),
        Verb(
            "cancel-compensate",
            "Cancel and undo",
            ("running", "suspended"),
            ("reason",),
            "Stop the run at its next operation; its open compensation blocks undo its work, then it ends cancelled.",
            True,
        ),
        Verb("suspend", "Suspend", ("running",), ("reason",), "Park the run until it is resumed."),
        Verb("resume", "Resume", ("suspended",), (), "Continue the suspended run."),
        Verb("redrive", "Redrive", ("failed",), (), "Continue the failed run from its journal."),
        Verb(
            "resume-from-step",
            "Resume from step",
            ("failed",),
            ("step",),
            "Re-run the failed run from the chosen step; earlier steps replay.",
        ),
        Verb("retry", "Retry", ("failed", "cancelled"), ("payload",), "Start a fresh run, with this payload."),
        Verb("discard", "Discard", ("failed",), (), "Acknowledge the failure: the run leaves the dead letters.", True),
        Verb("signal", "Send signal", ("running", "suspended"), ("name", "payload"), "Deliver a signal to the run."),
        Verb("update", "Send update", ("running",), ("name", "payload"), "Send an update and wait for its answer."),
    )
}


def allowed(run: RunInfo) -> set[str]:
    """The verbs ``run``'s state allows (a discarded failure cannot be discarded again)."""
    found = {name for name, verb in VERBS.items() if run.status in verb.statuses}
    if run.discarded:
        found.discard("discard")
    return found


def _payload(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"payload must be JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _required(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise InvalidArgument(f"{name} is required")
    return value


async def perform(client: Client, verb: str, run_id: str, form: Mapping[str, str]) -> Any:
    """Call ``verb`` on ``run_id`` with the form's fields; the verb's typed error when it refuses."""
    reason = form.get("reason", "").strip() or None
    if verb == "cancel":
        await client.cancel(run_id, reason)
    elif verb == "cancel-compensate":
        await client.cancel(run_id, reason, compensate=True)
    elif verb == "suspend":
        await client.suspend(run_id, reason)
    elif verb == "resume":
        await client.resume(run_id)
    elif verb == "redrive":
        await client.redrive(run_id)
    elif verb == "resume-from-step":
        await client.resume_from_step(run_id, _required(form, "step"))
    elif verb == "retry":
        return await client.retry(run_id, _payload(form.get("payload", "")))
    elif verb == "discard":
        await client.discard(run_id)
    elif verb == "signal":
        await client.signal(run_id, _required(form, "name"), _payload(form.get("payload", "")))
    elif verb == "update":
        return await client.update(run_id, _required(form, "name"), _payload(form.get("payload", "")), timeout=30.0)
    else:
        raise InvalidArgument(f"unknown verb {verb!r}: one of {', '.join(VERBS)}")
    return None
