"""The schema's state: which numbered migrations the database holds, against those this code ships."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .base import Tx
from .sql_files import migrations

__all__ = ["SchemaState", "schema_state"]


@dataclass(frozen=True)
class SchemaState:
    """The migration versions applied in the database and those this code knows."""

    applied: tuple[int, ...]
    known: tuple[int, ...]

    @property
    def current(self) -> bool:
        """The database holds exactly this code's migrations: none missing, none from a newer release."""
        return self.applied == self.known


@functools.cache
def _known(dialect: str) -> tuple[int, ...]:
    return tuple(version for version, _, _ in migrations(dialect))


async def schema_state(tx: Tx) -> SchemaState:
    """What ``GET /healthz`` checks: applied against known migrations."""
    rows = await tx.execute("applied_migrations")
    return SchemaState(tuple(int(r["version"]) for r in rows), _known(tx.dialect))
