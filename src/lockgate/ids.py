"""Sortable identifiers: a millisecond timestamp then randomness, base32 (extended hex).

Within one process ids are strictly increasing: an id made in the same millisecond as
the previous one (or while the wall clock stepped back) continues from it, so rows
created in one instant (signals sent back to back) keep the order they were made in.
The extended-hex alphabet (``0-9a-v``) sorts like the numbers it encodes.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["id_floor", "id_millis", "new_id", "short_id"]

_RAND_BITS = 72
_ALPHABET = "0123456789abcdefghijklmnopqrstuv"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # two characters per 10 bits: half the lookups
_SHIFTS = tuple(range(110, -1, -10))  # 120 bits (48 of time, 72 of randomness) -> 24 characters
_lock = threading.Lock()
_last = (0, 0)


def new_id(prefix: str) -> str:
    """A new id like ``run_06f1...``: ordered by creation time, unique without coordination."""
    global _last
    millis = int(time.time() * 1000)
    with _lock:
        last_millis, last_rand = _last
        if millis <= last_millis:  # no fresh randomness needed (a system call): the id continues from the last
            millis, rand = last_millis, last_rand + 1
            if rand >> _RAND_BITS:  # the random part overflowed: borrow the next millisecond
                millis, rand = millis + 1, 0
        else:
            rand = int.from_bytes(os.urandom(9), "big")
        _last = (millis, rand)
    n = (millis << _RAND_BITS) | rand
    pairs = _PAIRS
    return prefix + "_" + "".join([pairs[(n >> shift) & 1023] for shift in _SHIFTS])


def short_id(full: str) -> str:
    """The last 8 characters of an id: its freshest bits, unique among the ids a person compares
    (ids made in one millisecond differ there too)."""
    return full[-8:]


def id_floor(prefix: str, millis: int) -> str:
    """The smallest id with ``prefix`` made at ``millis`` (epoch milliseconds): every id made then or later
    sorts at or after it, every id made before sorts before it."""
    n = millis << _RAND_BITS
    return prefix + "_" + "".join([_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


def id_millis(full: str) -> int:
    """When an id was made (epoch milliseconds): its first 48 bits (the alphabet is base 32's own)."""
    return int(full.rsplit("_", 1)[-1], 32) >> _RAND_BITS
