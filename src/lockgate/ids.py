"""Sortable identifiers: a millisecond timestamp then randomness, Crockford base32."""

from __future__ import annotations

import os
import time

__all__ = ["new_id"]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """A new id like ``run_01jd2v...``: ordered by creation time, unique without coordination."""
    millis = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_b32(millis, 10)}{_b32(rand, 16)}"
