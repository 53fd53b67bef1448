"""What a model request reserves under a weighted flow key, and what it settles at.

A request reserves an estimate before it is sent (its prompt's tokens, roughly, and the most the
model may write) and settles at the usage the provider reports in its response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_MAX_OUTPUT", "Estimate", "estimate_tokens", "reported_tokens"]

CHARS_PER_TOKEN = 4  # an English text's characters per token, roughly, for the common tokenisers
DEFAULT_MAX_OUTPUT = 1_000  # what a request may write when its settings name no max_tokens

Estimate = Callable[[Sequence[ModelMessage], Mapping[str, Any] | None], int]
"""``estimate(messages, model_settings) -> tokens`` a model request reserves (a positive int)."""


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(len(str(k)) + _chars(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_chars(v) for v in value)
    return 0 if value is None else len(str(value))


def estimate_tokens(messages: Sequence[ModelMessage], settings: Mapping[str, Any] | None) -> int:
    """The default estimate: the messages' text (``content`` and tool ``args``) at four characters a token,
    plus the settings' ``max_tokens`` (``DEFAULT_MAX_OUTPUT`` without one)."""
    chars = 0
    for message in messages:
        for part in message.parts:
            chars += _chars(getattr(part, "content", None)) + _chars(getattr(part, "args", None))
    limit = (settings or {}).get("max_tokens")
    out = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else DEFAULT_MAX_OUTPUT
    return max(1, chars // CHARS_PER_TOKEN + out)


def _find_usage(payload: Any, depth: int = 0) -> Mapping[str, Any] | None:
    if not isinstance(payload, Mapping) or depth > 3:
        return None
    usage = payload.get("usage")
    if isinstance(usage, Mapping) and ("input_tokens" in usage or "output_tokens" in usage):
        return usage
    for value in payload.values():
        found = _find_usage(value, depth + 1)
        if found is not None:
            return found
    return None


def reported_tokens(payload: Any) -> int:
    """The tokens a journaled model response reports it used (input plus output); 0 when it reports none."""
    usage = _find_usage(payload)
    if usage is None:
        return 0
    total = 0
    for field in ("input_tokens", "output_tokens"):
        value = usage.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total
