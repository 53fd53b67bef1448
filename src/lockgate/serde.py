"""Encoding of payloads, step values and results, all through pydantic."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import math
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import PayloadError, ResultTypeError, UnstorableValue

__all__ = [
    "adapter",
    "conform",
    "decode",
    "decode_as",
    "dump_json",
    "encode",
    "import_model",
    "payload_json",
    "refuse_unstorable",
    "type_name",
    "validate_payload",
]


@functools.lru_cache(maxsize=1024)
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def adapter(tp: Any) -> TypeAdapter[Any]:
    """A cached ``TypeAdapter`` for ``tp`` (``Any`` when ``tp`` is ``None``)."""
    if tp is None:
        tp = Any
    try:
        return _adapter(tp)
    except TypeError:  # unhashable annotation
        return TypeAdapter(tp)


def encode(value: Any, tp: Any = None) -> str:
    """JSON text for ``value`` as type ``tp`` (or as whatever it is)."""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    target = tp if tp is not None else type(value) if value is not None else None
    try:
        return adapter(target).dump_json(value).decode()
    except Exception:
        return adapter(Any).dump_json(value).decode()


def decode(text: str | None, tp: Any = None) -> Any:
    """The value ``encode`` wrote, validated back into ``tp``."""
    if text is None:
        return None
    return adapter(tp).validate_json(text)


def type_name(tp: Any) -> str:
    """How a type is named in an error: ``bool``, ``list[int]``, ``Order | None``."""
    if tp is None or tp is type(None):
        return "None"
    if isinstance(tp, type) and not getattr(tp, "__args__", None):
        return tp.__name__
    return str(tp).replace("typing.", "")


def conform(value: Any, tp: Any, *, workflow: str, where: str = "result") -> Any:
    """``value`` validated as ``tp`` (a model from a dict, say); ``ResultTypeError`` when it is not one.

    No annotation (``None`` or ``Any``) accepts anything; so does a type pydantic cannot
    describe, whose values are stored as whatever they are.
    """
    if tp is None or tp is Any or type(value) is tp:  # already exactly the annotated class: nothing to check
        return value
    try:
        checker = adapter(tp)
    except Exception:
        return value
    try:
        return checker.validate_python(value)
    except ValidationError:
        raise ResultTypeError(workflow, type_name(tp), type_name(type(value)), where) from None


def decode_as(text: str | None, tp: Any, *, workflow: str, where: str = "result") -> Any:
    """``decode`` for a value read back under today's annotation: ``ResultTypeError`` when it no longer fits."""
    try:
        return decode(text, tp)
    except ValidationError:
        shown = text if text is None or len(text) <= 60 else text[:57] + "..."
        raise ResultTypeError(workflow, type_name(tp), f"the stored value {shown}", where) from None


_COMPACT = json.JSONEncoder(separators=(",", ":"), default=str)  # one encoder: json.dumps builds one per call


def dump_json(value: Any) -> str:
    """Compact JSON for plain data (events, ledger details)."""
    return _COMPACT.encode(value)


M = TypeVar("M", bound=BaseModel)


def validate_payload(model: type[M], payload: Any, *, what: str) -> M:
    """``payload`` as ``model``; a ``PayloadError`` naming each missing or invalid field otherwise.

    NaN and infinities are refused (JSON has no spelling for them: stored, they would come back as
    ``null``), and so are lone surrogates (they are not text a database holds).
    """
    try:
        if isinstance(payload, BaseModel):
            if not _storable(payload):
                _refuse_unstorable(payload, what)
            if isinstance(payload, model):
                return payload
            payload = payload.model_dump()
        if isinstance(payload, str | bytes):
            text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
            if "NaN" in text or "Infinity" in text:  # rare: only then parsed twice
                with contextlib.suppress(ValueError):
                    _refuse_unstorable(json.loads(text), what)
            return model.model_validate_json(payload)
        if not _storable(payload):
            _refuse_unstorable(payload, what)
        return model.model_validate(payload)
    except ValidationError as exc:
        errors = [dict(e) for e in exc.errors(include_url=False)]
        if isinstance(payload, str | bytes) and any(e.get("type") == "json_invalid" for e in errors):
            text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
            shown = text if len(text) <= 40 else f"{text[:37]}..."
            raise PayloadError(
                what, f"expected a {model.__name__} (an object, or its JSON text), got {shown!r}, which is not JSON"
            ) from None
        raise PayloadError(what, errors) from None


def _storable(value: Any) -> bool:
    """Whether ``value`` holds no NaN, infinity or lone surrogate: the walk every start pays, so it builds
    no path and tests exact types first; ``_refuse_unstorable`` walks again to name what it found."""
    kind = type(value)
    if kind is str:
        return value.isascii() or _encodes(value)
    if kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is str:
                if not key.isascii() and not _encodes(key):
                    return False
            elif not _storable(key):
                return False
            item_kind = type(item)
            if item_kind is str:
                if not item.isascii() and not _encodes(item):
                    return False
            elif item_kind is not int and item is not None and not _storable(item):
                return False
        return True
    if isinstance(value, str):
        return value.isascii() or _encodes(value)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, BaseModel):
        return _storable(vars(value))
    if isinstance(value, dict):
        return _storable(dict(value))
    if isinstance(value, list | tuple):
        return all(_storable(item) for item in value)
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def refuse_unstorable(value: Any, what: str) -> None:
    """``UnstorableValue`` naming the field when ``value``, produced by a run, holds a NaN, an infinity or a
    lone surrogate (stored, a NaN would come back as ``null``)."""
    if not _storable(value):
        _refuse_unstorable(value, what, error=UnstorableValue)


def _refuse_unstorable(
    value: Any, what: str, loc: tuple[Any, ...] = (), error: type[PayloadError] = PayloadError
) -> None:
    """``error`` (a ``PayloadError``) naming the first NaN, infinity or lone surrogate inside ``value``
    (dicts, lists and models' fields are searched)."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                msg = f"holds {value[exc.start]!r}, a lone surrogate, not text"
                raise error(what, [{"loc": loc, "msg": msg, "type": "surrogate"}]) from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            msg = f"{value!r} is not a number JSON can hold"
            raise error(what, [{"loc": loc, "msg": msg, "type": "finite_number"}])
    elif isinstance(value, BaseModel):  # its fields as they are: no dump
        for key, item in vars(value).items():
            _refuse_unstorable(item, what, (*loc, key), error)
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_unstorable(key, what, (*loc, key), error)
            _refuse_unstorable(item, what, (*loc, key), error)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_unstorable(item, what, (*loc, i), error)


def payload_json(model: type[BaseModel] | None, payload: Any, *, what: str) -> str:
    """A signal's or update's payload as JSON text: validated by ``model`` when the receiver declared one."""
    if model is not None:
        return validate_payload(model, payload, what=what).model_dump_json()
    if isinstance(payload, BaseModel):
        return payload.model_dump_json()
    try:
        return json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(what, f"not JSON-serialisable: {exc}") from None


def import_model(ref: str) -> type[BaseModel] | None:
    """The pydantic model at ``module:qualname`` (as a run records its declared models), if it imports."""
    module, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj if isinstance(obj, type) and issubclass(obj, BaseModel) else None
