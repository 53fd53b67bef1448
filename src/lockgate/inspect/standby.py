"""A read store: a streaming standby of the write store, checked at start and measured for lag.

``check_read_store`` refuses (``ReadStoreRefused``, naming the option) a read store that is not a
standby of the write store: the primary itself (not in recovery, the same system identifier),
another primary, a standby of another server, another database, or anything on SQLite.
``measure_lag`` reads on the standby how far it has replayed and on the primary how much WAL
lies past that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..clock import to_datetime
from ..errors import ReadStoreRefused, StoreError
from ..store import Store
from ..store import standby as ops

__all__ = ["ReplicaLag", "check_read_store", "measure_lag"]


@dataclass(frozen=True)
class ReplicaLag:
    """How far the read store (a standby) trails the write store (its primary).

    ``seconds``: 0 when the standby has replayed all the primary's WAL; otherwise how long ago the
    last transaction it replayed committed (an upper bound of the delay: a primary idle a while
    before a burst shows the idle time until the burst is replayed); ``None`` when unknown (the
    primary did not answer, or nothing was replayed yet). ``bytes_behind``: WAL the primary holds
    past ``replay_lsn`` (``None`` when the primary did not answer).
    """

    seconds: float | None
    bytes_behind: int | None
    replay_lsn: str | None
    primary_lsn: str | None
    replayed_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["replayed_at"] = None if self.replayed_at is None else self.replayed_at.isoformat()
        return found


async def measure_lag(primary: Store, standby: Store) -> ReplicaLag:
    """The standby's lag behind ``primary``; ``StoreError`` when the standby does not answer (a primary that
    does not answer leaves ``seconds`` and ``bytes_behind`` unknown: the reads go on from the standby)."""
    replay = await standby.read(ops.replay)
    lsn = replay["replay_lsn"]
    behind: int | None = None
    primary_lsn: str | None = None
    if lsn is not None:
        try:
            found = await primary.read(ops.behind, lsn)
        except StoreError:
            pass
        else:
            behind, primary_lsn = max(0, found["behind"]), found["primary_lsn"]
    replayed_at = replay["replayed_at"]
    seconds: float | None
    if behind == 0:
        seconds = 0.0
    elif behind is None or replayed_at is None:
        seconds = None
    else:
        seconds = max(0.0, replay["now"] - replayed_at)
    return ReplicaLag(seconds, behind, lsn, primary_lsn, to_datetime(replayed_at))


async def check_read_store(primary: Store, standby: Store, field: str) -> None:
    """Refuse (``ReadStoreRefused`` naming ``field``) a ``standby`` that is not a streaming standby of
    ``primary``; both are open."""
    mine = await primary.read(ops.server)
    theirs = await standby.read(ops.server)
    if not theirs["in_recovery"]:
        if theirs["system_id"] == mine["system_id"]:
            raise ReadStoreRefused(
                field,
                f"the server is the write store's primary itself (system identifier {theirs['system_id']}, "
                "not in recovery): give a streaming standby of it",
            )
        raise ReadStoreRefused(field, "the server is a primary (not in recovery), not a standby of the write store")
    if theirs["system_id"] != mine["system_id"]:
        raise ReadStoreRefused(
            field,
            f"the server is a standby of another cluster (system identifier {theirs['system_id']}; "
            f"the write store's is {mine['system_id']})",
        )
    for what, key in (("database", "database_name"), ("schema", "schema_name")):
        if theirs[key] != mine[key]:
            raise ReadStoreRefused(
                field, f"it names {what} {theirs[key]!r}, the write store {what} {mine[key]!r}: give the same one"
            )
