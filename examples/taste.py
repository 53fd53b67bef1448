# taste.py: the README's "A taste" (narration.py) on a controllable clock: twenty edits of one row, debounced into one run
import asyncio

import lockgate as lg
from lockgate.testing import TestEnv
from pydantic import BaseModel


class Edit(BaseModel):
    row_id: str
    tenant_id: str
    edited_at: int


app = lg.App()


def draft_text(row_id: str) -> str:  # the side effect: a plain def runs in a worker thread
    return f"narration of {row_id}"


@app.workflow(
    name="tour.narration",
    idempotency_key=lambda p: f"tour:{p.row_id}:{p.edited_at}",
    debounce=lg.Debounce(key=lambda p: f"tour:{p.row_id}", period="15m", timeout="1h"),
    concurrency=lg.Concurrency(limit=5, key=lambda p: p.tenant_id),
)
async def narrate(ctx: lg.Context, p: Edit) -> str:
    text = await ctx.step("draft", draft_text, p.row_id, retry=lg.Retry(max_attempts=5))
    await ctx.sleep("cool-off", "7d")  # parks the run; no worker is held
    return text


async def main() -> None:
    # TestEnv: a real engine on a temporary SQLite file, on a clock that moves when told to
    async with TestEnv(app) as env:
        handles = [
            await env.engine.start("tour.narration", {"row_id": "r1", "tenant_id": "t", "edited_at": i})
            for i in range(20)
        ]
        print(handles[0].status, handles[0].deferral)  # queued Deferral(mode='debounce', ...)
        await env.advance("15m")  # the debounce window closes: the last edit runs
        await env.advance("7d")  # the cool-off ends
        rows = await env.engine.flow(workflow="tour.narration")
        print(sum(r.collapsed for r in rows), "edits collapsed,", sum(r.admitted for r in rows), "run")
        print(await handles[-1].result(timeout=10))


asyncio.run(main())
