"""Key rotation: stored values of encrypted workflows sealed again under the newest key.

Each table holding sealed values is read a batch at a time, in primary-key order after a
cursor; a value sealed under an older key is opened and sealed again, and written back
only where the row still holds what was read (``reseal_*``: a worker that wrote the row
meanwhile wins, and the next pass sees its value). Each batch is its own commit, so a
rotation stopped half way is resumed by running it again: what is already under the
newest key is left as it is. A value no key opens is reported by where it is, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..crypto import Keyring, Undecryptable, envelope_key, transform
from .base import Row, Store, Tx

__all__ = ["SEALED_COLUMNS", "Rotation", "Unopened", "rotate_keys"]

SEALED_COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("payload", "output", "error_message"),
    "journal": ("output", "error_message"),
    "attempts": ("input", "error_message"),
    "messages": ("payload", "result", "error_message"),
    "events": ("data",),
    "pending": ("payload",),
}
"""Per table (the suffix of its ``sealed_*`` / ``reseal_*`` queries): the columns that may hold sealed values."""

_INTEGER_KEYS = frozenset({"attempts", "events"})


@dataclass(frozen=True)
class Unopened:
    """A stored value no listed key opens: where it is and the key it names."""

    table: str
    row: str
    column: str
    key_id: str | None


@dataclass
class Rotation:
    """What a rotation found and did (or, dry, would do)."""

    newest: str
    dry_run: bool
    rows_scanned: int = 0
    values_current: int = 0  # already under the newest key
    values_resealed: int = 0  # sealed again (or, dry, to be)
    rows_changed_meanwhile: int = 0  # written by a worker between read and write: seen again next run
    unopened: list[Unopened] = field(default_factory=list)
    by_table: dict[str, int] = field(default_factory=dict)  # values resealed per table

    def to_dict(self) -> dict[str, Any]:
        return {
            "newest_key": self.newest,
            "dry_run": self.dry_run,
            "rows_scanned": self.rows_scanned,
            "values_current": self.values_current,
            "values_resealed": self.values_resealed,
            "rows_changed_meanwhile": self.rows_changed_meanwhile,
            "resealed_by_table": dict(self.by_table),
            "unopened": [u.__dict__ for u in self.unopened],
        }


async def _batch(tx: Tx, table: str, after: tuple[Any, str], workflow: str | None, limit: int) -> list[Row]:
    params = {"after1": after[0], "after2": after[1], "workflow": workflow, "limit": limit}
    return await tx.execute(f"sealed_{table}", params)


async def _write(tx: Tx, table: str, updates: list[dict[str, Any]]) -> int:
    """Write each row's new values where it still holds the old ones; how many rows were not (changed meanwhile)."""
    missed = 0
    for params in updates:
        if not await tx.execute(f"reseal_{table}", params):
            missed += 1
    return missed


async def rotate_keys(
    store: Store, keyring: Keyring, *, workflow: str | None = None, batch: int = 500, dry_run: bool = False
) -> Rotation:
    """Seal every stored value under ``keyring``'s newest key, ``batch`` rows per commit."""
    if not keyring or keyring.newest is None:
        raise ValueError("no encryption key: nothing to rotate to")
    if batch < 1:
        raise ValueError("batch must be >= 1")
    report = Rotation(newest=keyring.newest, dry_run=dry_run)
    for table, columns in SEALED_COLUMNS.items():
        after: tuple[Any, str] = (0 if table in _INTEGER_KEYS else "", "")
        while True:
            rows = await store.read(_batch, table, after, workflow, batch)
            if not rows:
                break
            after = (rows[-1]["k1"], rows[-1]["k2"])
            report.rows_scanned += len(rows)
            updates = [u for row in rows if (u := _resealed(keyring, table, columns, row, report)) is not None]
            if updates and not dry_run:
                report.rows_changed_meanwhile += await store.write(_write, table, updates)
            if len(rows) < batch:
                break
    return report


def _resealed(
    keyring: Keyring, table: str, columns: tuple[str, ...], row: Row, report: Rotation
) -> dict[str, Any] | None:
    """The ``reseal_*`` parameters for one row, or ``None`` when none of its values needs sealing again."""
    params: dict[str, Any] = {"k1": row["k1"], "k2": row["k2"]}
    changed = False
    where = str(row["k1"]) if not row["k2"] else f"{row['k1']}/{row['k2']}"
    for column in columns:
        old = row[column]
        new = transform(old, _resealer(keyring, report, table, where, column))
        params[column], params[f"old_{column}"] = new, old
        changed = changed or new != old
    return params if changed else None


def _resealer(keyring: Keyring, report: Rotation, table: str, row: str, column: str) -> Callable[[str, bool], Any]:
    """What ``transform`` calls for each envelope of one stored value: the envelope to keep in its place."""

    def reseal(envelope: str, nested: bool) -> str:
        kid = envelope_key(envelope)
        if kid == keyring.newest:
            report.values_current += 1
            return envelope
        try:
            fresh = keyring.reseal(envelope)
        except Undecryptable:
            report.unopened.append(Unopened(table, row, column, kid))
            return envelope
        report.values_resealed += 1
        report.by_table[table] = report.by_table.get(table, 0) + 1
        return fresh

    return reseal
