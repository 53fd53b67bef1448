# events_wait.py: docs/events.md's "Waiting for an event": ship or remind, on the controllable clock
import asyncio

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

app = lg.App()


class Shipped(BaseModel):
    order_id: str
    carrier: str


class Checkout(BaseModel):
    order_id: str


order_shipped = app.event("order.shipped", payload=Shipped)
reminders: list[str] = []


def send_reminder(order_id: str) -> str:
    reminders.append(order_id)
    return f"reminded {order_id}"


@app.workflow(name="shop.after_checkout")
async def after_checkout(ctx: lg.Context, p: Checkout) -> str:
    shipped = await ctx.wait_for_event(order_shipped, match={"order_id": p.order_id}, timeout="3d")
    if shipped is None:  # three days without order.shipped for this order
        return await ctx.step("remind", send_reminder, p.order_id)
    return f"shipped by {shipped.data.carrier}"


async def main() -> None:
    async with TestEnv(app) as env:
        early = await env.engine.start("shop.after_checkout", {"order_id": "o1"})
        late = await env.engine.start("shop.after_checkout", {"order_id": "o2"})
        await env.settle()
        run = await env.engine.get_run(early.run_id or "")
        assert run.waiting_on == "event:order.shipped", run.waiting_on  # parked: no worker, no slot
        await env.advance("1d")
        await env.engine.publish(order_shipped, None, {"order_id": "o1", "carrier": "dhl"})
        assert await env.engine.result(early.run_id or "", timeout=10) == "shipped by dhl"
        await env.advance("2d")  # o2 never ships: its wait times out and the reminder goes
        assert await env.engine.result(late.run_id or "", timeout=10) == "reminded o2"
        assert reminders == ["o2"]
    print("shipped or reminded: ok")


if __name__ == "__main__":
    asyncio.run(main())
