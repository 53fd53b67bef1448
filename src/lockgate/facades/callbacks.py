"""The token verbs of a ``Client``: complete or reject an approval token (docs/human-in-the-loop.md)."""

from __future__ import annotations

from typing import Any

from ..engine import callbacks
from ..engine.core import Core

__all__ = ["TokenVerbs"]


class TokenVerbs:
    """``complete_token``, ``reject_token`` and the operator's ``complete_token_by_id`` over a ``Core``."""

    core: Core

    async def complete_token(self, token: str, payload: Any = None) -> str:
        """Complete ``token`` (its secret) with ``payload``, validated by the token's model first; its id.

        ``UnknownToken``, ``TokenExpired``, ``TokenUsed`` (a single-use token completed already) or
        ``TokenGone`` (its run ended) when it cannot be, ``PayloadError`` for a payload its model refuses:
        nothing is written then."""
        row = await callbacks.complete_token(self.core, token=token, payload=payload)
        return str(row["id"])

    async def reject_token(self, token: str, reason: str | None = None) -> str:
        """Complete ``token`` with a rejection: ``ctx.wait_for_token`` raises ``lg.TokenRejected(reason)``."""
        row = await callbacks.complete_token(self.core, token=token, rejected=reason, reject=True)
        return str(row["id"])

    async def complete_token_by_id(
        self, token_id: str, payload: Any = None, *, reject: bool = False, reason: str | None = None
    ) -> str:
        """An operator's completion (or rejection) of the token ``token_id`` (as the dashboard lists it),
        without its secret: an operate-scoped verb, as a signal is."""
        row = await callbacks.complete_token(
            self.core, token_id=token_id, payload=payload, rejected=reason, reject=reject
        )
        return str(row["id"])
