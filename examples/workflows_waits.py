# workflows_waits.py: durable time, signals and updates (docs/workflows.md), on the test clock
import asyncio
from datetime import UTC, datetime

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

app = lg.App()


class Renewal(BaseModel):
    account: str


class Approval(BaseModel):
    approved: bool


class Limit(BaseModel):
    value: int


class State:
    limit = 0


@app.workflow(name="renew")
async def renew(ctx: lg.Context, p: Renewal) -> str:
    await ctx.sleep("cool-off", "7d")
    await ctx.sleep_until("renewal", datetime(2027, 1, 1, tzinfo=UTC))   # aware datetimes only
    now = await ctx.now()          # journaled: the same instant on replay
    return now.date().isoformat()


@app.workflow(name="approve")
async def approve(ctx: lg.Context, p: Renewal) -> bool:
    approval = await ctx.wait_for_signal("approval", Approval, timeout="3d")   # None on timeout
    return approval is not None and approval.approved


@app.workflow(name="limits")
async def limits(ctx: lg.Context, p: Renewal) -> int:
    state = State()

    async def set_limit(new: Limit) -> int:
        state.limit = new.value
        return state.limit

    applied = await ctx.handle_update("set-limit", Limit, set_limit)   # serves one update
    return applied  # type: ignore[no-any-return]


async def main() -> None:
    async with TestEnv(app, start=datetime(2026, 12, 1, tzinfo=UTC)) as env:
        engine = env.engine
        renewing = await engine.start("renew", {"account": "a-1"})
        await env.advance("7d")
        await env.advance("30d")
        print("renewed on", await engine.result(renewing.run_id, timeout=5))

        waiting = await engine.start("approve", {"account": "a-1"})
        await env.settle()
        run_id = waiting.run_id
        await engine.signal(run_id, "approval", {"approved": True})
        await env.settle()
        print("approved:", await engine.result(run_id, timeout=5))

        limited = await engine.start("limits", {"account": "a-1"})
        await env.settle()
        run_id = limited.run_id
        result = await engine.update(run_id, "set-limit", {"value": 10}, timeout=30)
        print("limit set to", result, "-", await engine.result(run_id, timeout=5))


if __name__ == "__main__":
    asyncio.run(main())
