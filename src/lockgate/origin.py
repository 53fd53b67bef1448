"""Where a start came from: its source, the starter's trace id and identity.

A start records ``source`` (``api``, ``client``, ``cli``, ``http``, ``child:<run id>``,
``retry:<run id>``, ``event:<name>``, ``schedule:<name>``) on its run and ledger rows. The
surfaces set it around a start with ``starting_from(...)``; without one a start is ``api``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SYSTEM_SUBJECT",
    "Origin",
    "Subject",
    "current_columns",
    "current_origin",
    "origin_columns",
    "starting_from",
]


@dataclass(frozen=True)
class Subject:
    """Who started a run: identity only (authority is resolved again on every execution)."""

    id: str
    tenant_id: str | None = None
    kind: str = "user"
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {"id": self.id, "tenant_id": self.tenant_id, "kind": self.kind, "metadata": dict(self.metadata)},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> Subject | None:
        if not text:
            return None
        raw = json.loads(text)
        return cls(raw["id"], raw.get("tenant_id"), raw.get("kind", "user"), raw.get("metadata") or {})


SYSTEM_SUBJECT = Subject(id="system", kind="system")
"""Who a run with no recorded starter runs as (``ctx.subject``); never put through ``resolve_scopes``."""


@dataclass(frozen=True)
class Origin:
    """The source of a start, with the starter's ``trace_id`` and identity (a ``Subject`` as JSON)."""

    source: str = "api"
    trace_id: str | None = None
    subject: str | None = None


_ORIGIN: contextvars.ContextVar[Origin | None] = contextvars.ContextVar("lockgate_origin", default=None)


def current_origin(default: str = "api") -> Origin:
    """The origin set around the current start, else one of source ``default``."""
    origin = _ORIGIN.get()
    return origin if origin is not None else _plain(default)


@functools.cache
def _plain(source: str) -> Origin:
    """One ``Origin`` per bare source: every start asks, most with nothing set around them."""
    return Origin(source)


@contextlib.contextmanager
def starting_from(source: str, trace_id: str | None = None, subject: str | None = None) -> Iterator[Origin]:
    """Starts made inside the block record ``source`` (and the starter's trace id and identity)."""
    origin = Origin(source, trace_id, subject)
    token = _ORIGIN.set(origin)
    try:
        yield origin
    finally:
        _ORIGIN.reset(token)


def current_columns(default: str = "api") -> dict[str, Any]:
    """``origin_columns(current_origin(default))``, without building anything for a bare source.

    Every start asks; most have nothing set around them, so their columns are one shared dict
    per source (callers spread it into their row, never change it).
    """
    origin = _ORIGIN.get()
    return _plain_columns(default) if origin is None else origin_columns(origin)


@functools.cache
def _plain_columns(source: str) -> dict[str, Any]:
    return {"source": source, "trace_id": None, "subject": None}


def origin_columns(origin: Origin | Mapping[str, Any]) -> dict[str, Any]:
    """The run (and parked start) columns an origin is stored in; from an ``Origin`` or a row holding them."""
    if isinstance(origin, Origin):
        return {"source": origin.source, "trace_id": origin.trace_id, "subject": origin.subject}
    return {"source": origin.get("source"), "trace_id": origin.get("trace_id"), "subject": origin.get("subject")}
