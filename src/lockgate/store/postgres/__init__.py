"""The PostgreSQL store (``postgresql://...``).

``store.py`` holds the ``PostgresStore`` class: its configuration, lifecycle and reads.
Its writes go through ``writer.py`` (the queue and group commit) and ``batches.py`` (how
one batch runs: lone, pipelined, guarded) on the connections of ``connections.py``, which
also notices outages (``failures.py`` tells failures apart). ``migrate.py`` applies the
migrations; ``notify.py`` carries wake-ups between processes by LISTEN/NOTIFY. ``tx.py``
holds the transactions the ops run on.
"""

from __future__ import annotations

from .store import PostgresStore
from .tx import PostgresTx
from .tx import silent as _silent  # noqa: F401  (tests reach it by this name)

__all__ = ["PostgresStore", "PostgresTx"]
