"""Sortable identifiers: a millisecond timestamp then randomness, Crockford base32.

Within one process ids are strictly increasing: an id made in the same millisecond as
the previous one (or while the wall clock stepped back) continues from it, so rows
created in one instant (signals sent back to back) keep the order they were made in.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_id"]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RAND_BITS = 80
_lock = threading.Lock()
_last = (0, 0)


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """A new id like ``run_01jd2v...``: ordered by creation time, unique without coordination."""
    global _last
    millis = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    with _lock:
        last_millis, last_rand = _last
        if millis <= last_millis:
            millis, rand = last_millis, last_rand + 1
            if rand >> _RAND_BITS:  # the random part overflowed: borrow the next millisecond
                millis, rand = millis + 1, 0
        _last = (millis, rand)
    return f"{prefix}_{_b32(millis, 10)}{_b32(rand, 16)}"
