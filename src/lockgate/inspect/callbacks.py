"""Reading approval tokens: a run's tokens (never their secret), and one token's state by its secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..callbacks import UnknownToken, token_hash
from ..clock import to_datetime
from ..store import Store
from ..store import callbacks as store_tokens
from ..store.base import Row
from ..store.shared import LIVE

__all__ = ["TokenInfo", "run_tokens", "token_state"]


@dataclass(frozen=True)
class TokenInfo:
    """One token as operators see it: ``state`` is ``pending``, ``completed``, ``expired`` or ``closed``
    (its run ended). No secret: the store holds only its hash."""

    id: str
    name: str
    step_key: str
    state: str
    single_use: bool
    uses: int
    created_at: float
    expires_at: float | None
    completed_at: float | None

    @classmethod
    def from_row(cls, row: Row, now: float, run_live: bool = True) -> TokenInfo:
        expires = None if row["expires_at"] is None else float(row["expires_at"])
        state = str(row["status"])
        if state == "pending" and expires is not None and expires <= now:
            state = "expired"
        elif state == "pending" and not run_live:
            state = "closed"
        completed = None if row["completed_at"] is None else float(row["completed_at"])
        return cls(
            str(row["id"]),
            str(row["name"]),
            str(row["step_key"]),
            state,
            bool(row["single_use"]),
            int(row["uses"]),
            float(row["created_at"]),
            expires,
            completed,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "step_key": self.step_key,
            "state": self.state,
            "single_use": self.single_use,
            "uses": self.uses,
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.expires_at),
            "completed_at": _iso(self.completed_at),
        }


def _iso(at: float | None) -> str | None:
    when = to_datetime(at)
    return None if when is None else when.isoformat()


async def run_tokens(store: Store, run_id: str, now: float, run_live: bool) -> list[TokenInfo]:
    """The tokens ``run_id`` made, oldest first."""
    return [TokenInfo.from_row(r, now, run_live) for r in await store.read(store_tokens.run_tokens, run_id)]


async def token_state(store: Store, token: str, now: float) -> TokenInfo:
    """The token whose secret is ``token``; ``UnknownToken`` when there is none."""
    row = await store.read(store_tokens.find_token, token_hash(token))
    if row is None:
        raise UnknownToken()
    return TokenInfo.from_row(row, now, row["run_status"] in LIVE)
