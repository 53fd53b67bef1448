"""Workflows that wait for approval tokens (``ctx.create_token``), for the token tests."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["Approval", "Ask", "app", "handed"]

app = lg.App("token-tests")


class Approval(BaseModel):
    approved: bool
    by: str = "someone"


class Ask(BaseModel):
    timeout: float | None = None
    single_use: bool = True
    waits: int = 1
    hold: bool = False  # wait for the signal "go" between creating the token and waiting for it


handed: dict[str, lg.CallbackToken] = {}  # run id -> the token its body handed out (the "email")


@app.workflow(name="tok.approve")
async def approve(ctx: lg.Context, p: Ask) -> list[Any]:
    tok = await ctx.create_token("approval", model=Approval, timeout=p.timeout, single_use=p.single_use)
    handed[ctx.run_id] = tok
    if p.hold:
        await ctx.wait_for_signal("go", Approval)
    out: list[Any] = []
    for _ in range(p.waits):
        try:
            got = await ctx.wait_for_token(tok)
            out.append([got.approved, got.by])
        except lg.TokenExpired:
            out.append("expired")
        except lg.TokenRejected as exc:
            out.append(["rejected", exc.reason])
    return out


@app.workflow(name="tok.sealed", encrypt_steps=True)
async def sealed(ctx: lg.Context, p: Ask) -> Any:
    tok = await ctx.create_token("secret-approval", timeout=p.timeout)
    handed[ctx.run_id] = tok
    return await ctx.wait_for_token(tok)


@app.workflow(name="tok.bad")
async def bad(ctx: lg.Context, p: Ask) -> str:
    """A model that is no pydantic model: refused where it is given, nothing journaled."""
    try:
        await ctx.create_token("x", model=dict)  # type: ignore[arg-type]
    except lg.InvalidArgument as exc:
        return str(exc)
    return "accepted"
