"""Run streams as a reader sees them: chunks, a run's cap, and browser-scoped read tokens.

A body appends chunks with ``ctx.stream(chunk, topic=...)``; a reader receives them in order,
numbered per run and topic (``seq`` from 1). A chunk written inside a step carries the step's
key and the attempt that wrote it; when that attempt fails (or its worker dies) a ``reset``
chunk names them, and a reader drops what it received of that attempt.

A stream token (``client.stream_token``) lets one browser read one run's stream, some of its
topics or all, until it expires: ``lgst1.<claims>.<signature>``, the claims as base64url JSON,
signed with HMAC-SHA256 under a secret the database keeps for every process that serves it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidArgument, StreamTokenRefused

__all__ = [
    "DEFAULT_TOPIC",
    "TOKEN_PREFIX",
    "StreamChunk",
    "StreamEnd",
    "StreamLimits",
    "check_topic",
    "drop_resets",
    "is_stream_token",
    "sign_token",
    "verify_token",
]

DEFAULT_TOPIC = "default"
TOKEN_PREFIX = "lgst1."
_TOPIC = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class StreamLimits:
    """The most one run may stream, all topics together: past either, ``ctx.stream`` raises ``StreamLimitExceeded``."""

    chunks: int = 100_000
    bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.chunks < 1 or self.bytes < 1:
            raise InvalidArgument(f"StreamLimits: chunks and bytes must be positive, got {self.chunks}, {self.bytes}")


@dataclass(frozen=True)
class StreamChunk:
    """One chunk of a run's stream, or a ``reset`` (drop the chunks of ``step``'s ``attempt`` received so far).

    ``step`` and ``attempt`` are ``None`` for a chunk the body wrote outside any step.
    """

    seq: int
    topic: str
    data: Any
    kind: Literal["chunk", "reset"] = "chunk"
    step: str | None = None
    attempt: int | None = None
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "topic": self.topic, "kind": self.kind}
        if self.kind == "chunk":
            out["data"] = self.data
        if self.step is not None:
            out["step"] = self.step
            out["attempt"] = self.attempt
        return out


@dataclass(frozen=True)
class StreamEnd:
    """How the run ended, once its stream was read to the end: ``status``, and its result or error."""

    run_id: str
    status: str
    result: Any = None
    error_tag: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "result": self.result,
            "error_tag": self.error_tag,
            "error": self.error,
        }


def check_topic(topic: Any) -> str:
    """``topic`` when it is a valid topic name (1-64 of letters, digits, ``_ . : -``); ``InvalidArgument`` if not."""
    if not isinstance(topic, str) or not _TOPIC.match(topic):
        raise InvalidArgument(f"stream topic must be 1-64 letters, digits or '_.:-', got {topic!r}")
    return topic


def drop_resets(chunks: Iterable[StreamChunk]) -> list[StreamChunk]:
    """The chunks a reader keeps: each ``reset`` removes the chunks received before it of its step's attempt."""
    kept: list[StreamChunk] = []
    for chunk in chunks:
        if chunk.kind == "reset":
            kept = [c for c in kept if (c.step, c.attempt) != (chunk.step, chunk.attempt)]
        else:
            kept.append(chunk)
    return kept


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def is_stream_token(text: str) -> bool:
    return text.startswith(TOKEN_PREFIX)


def sign_token(secret: str, run_id: str, topics: Sequence[str] | None, expires_at: float) -> str:
    """A token reading ``run_id``'s ``topics`` (``None``: all) until ``expires_at`` (epoch seconds)."""
    claims = {"r": run_id, "t": None if topics is None else sorted(set(topics)), "e": int(expires_at)}
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    mac = hmac.new(secret.encode(), (TOKEN_PREFIX + body).encode(), hashlib.sha256).digest()
    return f"{TOKEN_PREFIX}{body}.{_b64(mac)}"


def verify_token(secret: str, token: str, run_id: str, topic: str, now: float) -> None:
    """Nothing when ``token`` grants reading ``run_id``'s ``topic`` at ``now``; ``StreamTokenRefused`` why not."""
    if not is_stream_token(token) or token.count(".") != 2:
        raise StreamTokenRefused("malformed")
    _, body, mac = token.split(".")
    expected = hmac.new(secret.encode(), (TOKEN_PREFIX + body).encode(), hashlib.sha256).digest()
    try:
        given = _unb64(mac)
        claims = json.loads(_unb64(body))
    except (ValueError, UnicodeDecodeError):
        raise StreamTokenRefused("malformed") from None
    if not hmac.compare_digest(given, expected):
        raise StreamTokenRefused("forged")
    if not isinstance(claims, dict) or not isinstance(claims.get("e"), int):
        raise StreamTokenRefused("malformed")
    if claims["e"] <= now:
        raise StreamTokenRefused("expired")
    if claims.get("r") != run_id:
        raise StreamTokenRefused("other run")
    topics = claims.get("t")
    if topics is not None and topic not in topics:
        raise StreamTokenRefused("other topic")
