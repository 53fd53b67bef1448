# test_reminder.py
import asyncio

import lockgate as lg
from lockgate.testing import TestEnv
from pydantic import BaseModel

app = lg.App()

class Order(BaseModel):
    order_id: str

def send_reminder(order_id: str) -> str:
    return "sent"

@app.workflow(name="orders.remind", idempotency_key=lambda p: f"remind:{p.order_id}")
async def remind(ctx: lg.Context, p: Order) -> str:
    await ctx.sleep("wait", "7d")
    return await ctx.step("send", send_reminder, p.order_id)

async def test_reminder_fires_after_a_week() -> None:
    async with TestEnv(app) as env:
        handle = await env.engine.start("orders.remind", {"order_id": "o-1"})
        await env.settle()                        # the body ran up to its 7-day sleep
        run = await env.engine.get_run(handle.run_id)
        assert (run.status, run.waiting_on) == ("running", "timer")

        await env.advance("6d")                   # not yet
        assert (await env.engine.get_run(handle.run_id)).status == "running"

        await env.advance("1d")                   # fires every timer due by then
        assert await env.engine.result(handle.run_id, timeout=5) == "sent"

if __name__ == "__main__":                        # pytest runs it as a test; python, as a script
    asyncio.run(test_reminder_fires_after_a_week())
