# shop.py: the quickstart's first workflow (docs/quickstart.md)
import lockgate as lg
from pydantic import BaseModel

app = lg.App()


class Order(BaseModel):
    order_id: str
    amount: int


class Approval(BaseModel):
    approved: bool


class ProviderDown(Exception):
    pass


def charge(order_id: str, amount: int) -> str:  # a plain def runs in a worker thread
    return f"ch_{order_id}"


async def notify(order_id: str) -> None:  # an async def is awaited
    ...


@app.workflow(name="shop.checkout", idempotency_key=lambda p: f"checkout:{p.order_id}")
async def checkout(ctx: lg.Context, p: Order) -> str:
    receipt = await ctx.step("charge", charge, p.order_id, p.amount,
                             retry=lg.Retry(max_attempts=5, retryable=(ProviderDown,)))
    approval = await ctx.wait_for_signal("approval", Approval, timeout="3d")
    if approval is None or not approval.approved:
        return "refund-pending"
    await ctx.sleep("grace", "2s")  # durable: "3d" parks the run the same way, no worker held
    await ctx.step("notify", notify, p.order_id)
    return receipt
