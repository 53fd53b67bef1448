"""One matching rule for everything that waits on a domain event: ``ctx.wait_for_event`` and ``CancelOn``.

A match is a dict of equalities between a dotted field path of the event's data and a value,
or a callable. Equalities compare canonical JSON (what the event's data is stored as), so
``{"order_id": 7}`` matches the stored ``7`` whatever Python type produced either side.

Equalities are also what makes a publish find its waiters without scanning them: each
publish stores one hashed *key* per scalar leaf of its data (``leaf_keys``), and each wait
one key for its first equality (``wait_key``); the two meet on an index. A wait without
equalities uses the event's ``ANY`` key, which every publish carries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from .errors import InvalidArgument

__all__ = [
    "LEAF_LIMIT",
    "Match",
    "canonical",
    "check_match",
    "event_matches",
    "field_value",
    "leaf_keys",
    "wait_key",
]

log = logging.getLogger("lockgate.events")

Match = Mapping[str, Any] | Callable[..., Any] | None
LEAF_LIMIT = 64
"""Scalar leaves of an event's data indexed per publish (in sorted path order): a path past them is not found."""

_MISSING = object()


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces): what equalities compare."""
    return json.dumps(to_jsonable_python(value), sort_keys=True, separators=(",", ":"))


def _key(name: str, path: str, value_json: str) -> str:
    return hashlib.sha256(f"{name}\x1f{path}\x1f{value_json}".encode()).hexdigest()[:32]


def field_value(data: Any, path: str) -> Any:
    """The value at the dotted ``path`` of ``data`` (a model or plain JSON); ``_MISSING`` when there is none."""
    value = data
    for part in path.split("."):
        if isinstance(value, BaseModel):
            value = getattr(value, part, _MISSING)
        elif isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _is_list(annotation: Any) -> bool:
    """Whether a field declared as ``annotation`` holds a list (``list[...]``, a tuple, ``X | None`` of one)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(annotation))
    kind = origin or annotation
    return isinstance(kind, type) and issubclass(kind, (list, tuple, set, frozenset))


def _path_problem(model: type[BaseModel] | None, path: str) -> str | None:
    """Why ``path`` names no field of ``model`` that an equality can match (any path when it declares none):
    ``""`` when it is not a field, else the list field it reaches.

    A list's items have no path: published keys index scalar leaves outside lists only, so an
    equality into or onto a list could never be found. It is refused, not left never to match.
    """
    reached: list[str] = []
    for part in path.split("."):
        if model is None:
            return None
        info = model.model_fields.get(part)
        if info is None:
            return ""
        reached.append(part)
        nested = info.annotation
        if _is_list(nested):
            return ".".join(reached)
        model = nested if isinstance(nested, type) and issubclass(nested, BaseModel) else None
    return None


def check_match(match: Match, models: Sequence[tuple[str, type[BaseModel] | None]], where: str) -> dict[str, str]:
    """The equalities of ``match`` as ``{path: canonical JSON}`` (none for a callable or ``None``).

    ``models``: each awaited event's name and data model. ``InvalidArgument`` naming the path
    that is not a field of one of them, or a value JSON cannot hold.
    """
    if match is None or (callable(match) and not isinstance(match, Mapping)):
        return {}
    if not isinstance(match, Mapping):
        raise InvalidArgument(f"{where}: match must be a dict of field path -> value or a callable, got {match!r}")
    out: dict[str, str] = {}
    for path, value in match.items():
        if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
            raise InvalidArgument(f"{where}: match key {path!r} is not a field path")
        for name, model in models:
            problem = _path_problem(model, path)
            if problem == "":
                raise InvalidArgument(f"{where}: match.{path} is not a field of event {name!r}'s data")
            if problem is not None:
                raise InvalidArgument(
                    f"{where}: match.{path}: {problem} of event {name!r}'s data is a list, which an equality"
                    " can neither compare nor reach into (match it with a callable)"
                )
        try:
            out[path] = canonical(value)
        except Exception as exc:
            raise InvalidArgument(f"{where}: match.{path}: {exc}") from None
    return out


def event_matches(match: Match, event: Any, *extra: Any) -> bool:
    """Whether ``event`` (an ``lg.Event``) satisfies ``match``; a callable gets ``(event, *extra)``.

    A callable that raises is logged and counts as no match: one bad consumer stops nothing else.
    """
    if match is None:
        return True
    if isinstance(match, Mapping):
        for path, value in match.items():
            found = field_value(event.data, path)
            if found is _MISSING or canonical(found) != canonical(value):
                return False
        return True
    try:
        return bool(match(event, *extra))
    except Exception:
        log.exception("a match on event %s (%s) raised; treated as no match", event.name, event.id)
        return False


def _leaves(value: Any, prefix: str, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k in sorted(value):
            _leaves(value[k], f"{prefix}{k}" if not prefix else f"{prefix}.{k}", out)
    elif not isinstance(value, list) and prefix:
        out.append((prefix, json.dumps(value, sort_keys=True, separators=(",", ":"))))


def leaf_keys(name: str, data_json: str) -> list[str]:
    """The keys a publish of ``name`` with ``data_json`` stores: its ``ANY`` key and one per scalar leaf."""
    leaves: list[tuple[str, str]] = []
    try:
        _leaves(json.loads(data_json), "", leaves)
    except ValueError:
        leaves = []
    return [wait_key(name, {})] + [_key(name, path, text) for path, text in leaves[:LEAF_LIMIT]]


def wait_key(name: str, equalities: Mapping[str, str]) -> str:
    """The key a wait on ``name`` with ``equalities`` (``check_match``) is found by: its first path's."""
    if not equalities:
        return _key(name, "", "")
    path = min(equalities)
    return _key(name, path, equalities[path])
