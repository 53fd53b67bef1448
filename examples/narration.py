# narration.py
import asyncio
import lockgate as lg
from pydantic import BaseModel

class Edit(BaseModel):
    row_id: str
    tenant_id: str
    edited_at: int

app = lg.App()

def draft_text(row_id: str) -> str:             # the side effect: a plain def runs in a thread
    return f"narration of {row_id}"

@app.workflow(
    name="tour.narration",
    idempotency_key=lambda p: f"tour:{p.row_id}:{p.edited_at}",
    debounce=lg.Debounce(key=lambda p: f"tour:{p.row_id}", period="15m", timeout="1h"),
    concurrency=lg.Concurrency(limit=5, key=lambda p: p.tenant_id),
)
async def narrate(ctx: lg.Context, p: Edit) -> str:
    text = await ctx.step("draft", draft_text, p.row_id, retry=lg.Retry(max_attempts=5))
    await ctx.sleep("cool-off", "7d")          # parks the run; no worker is held
    return text

async def main() -> None:
    async with lg.Engine(app, store="sqlite:///lockgate.db") as engine:
        handle = await engine.start("tour.narration", {"row_id": "r1", "tenant_id": "t", "edited_at": 1})
        print(handle.status, handle.deferral)   # queued Deferral(mode='debounce', ...)
        print(await engine.trace(handle.ticket))
        # await handle.result() would wait for the debounce to settle, then for the run

asyncio.run(main())
