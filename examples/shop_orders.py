# shop_orders.py: the workflows the transactions page starts ("orders.fulfil")
from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Fulfil(BaseModel):
    order_id: str


def pack(order_id: str) -> str:
    return f"packed {order_id}"


@app.workflow(name="orders.fulfil", idempotency_key=lambda p: f"fulfil:{p.order_id}")
async def fulfil(ctx: lg.Context, p: Fulfil) -> str:
    return await ctx.step("pack", pack, p.order_id)  # type: ignore[no-any-return]


if __name__ == "__main__":
    print(sorted(app.definitions()))
