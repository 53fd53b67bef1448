"""A workflow that hands out an approval token and waits for it, for the SIGKILL test."""

from __future__ import annotations

from pydantic import BaseModel

import lockgate as lg

from .crashy import record

__all__ = ["Approval", "app"]

app = lg.App("token-crash-tests")


class Approval(BaseModel):
    approved: bool
    by: str


class Nothing(BaseModel):
    pass


def hand_out(token: str) -> None:
    record("handed")
    record(f"token {token}")


@app.workflow(name="tokcrash.approve")
async def approve(ctx: lg.Context, p: Nothing) -> list[object]:
    tok = await ctx.create_token("approval", model=Approval, timeout="1d")
    await ctx.step("hand out", hand_out, tok.token)
    got = await ctx.wait_for_token(tok)
    record("resumed")
    return [got.approved, got.by]
