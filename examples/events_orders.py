# events_orders.py: the domain events of docs/events.md, published, triggered and cancelling
import asyncio

from pydantic import BaseModel

import lockgate as lg

class OrderKey(BaseModel):
    order_id: str

class OrderPaid(BaseModel):
    total: float
    tenant_id: str

app = lg.App()
order_paid = app.event("order.paid", key=OrderKey, payload=OrderPaid)


class Checkout(BaseModel):
    order_id: str
    total: float
    tenant_id: str


class Fulfil(BaseModel):
    order_id: str
    total: float


class Audit(BaseModel):
    name: str


class RowKey(BaseModel):
    row_id: str


class RowDeleted(BaseModel):
    deleted_by: str


class Edit(BaseModel):
    row_id: str


def charge(order_id: str) -> str:
    return f"charged {order_id}"


def draft_text(row_id: str) -> str:
    return f"the story of {row_id}"


@app.workflow(name="checkout.run")
async def checkout(ctx: lg.Context, p: Checkout) -> None:
    await ctx.step("charge", charge, p.order_id)
    await ctx.publish(order_paid, {"order_id": p.order_id}, {"total": p.total, "tenant_id": p.tenant_id})


@app.workflow(name="fulfilment.run")
async def fulfil(ctx: lg.Context, p: Fulfil) -> str:
    return p.order_id


@app.workflow(name="audit.record")
async def audit(ctx: lg.Context, p: Audit) -> str:
    return p.name


app.trigger(
    on=order_paid,
    workflow="fulfilment.run",
    filter=lambda ev: ev.data.total > 0,                                # optional
    payload=lambda ev: {"order_id": ev.key.order_id, "total": ev.data.total},  # default: ev.data
    idempotency_key=lambda ev: f"fulfil:{ev.key.order_id}",             # default: "<event id>:<trigger>"
)
app.trigger(on="*", workflow="audit.record", payload=lambda ev: {"name": ev.name})  # every event

row_deleted = app.event("tour.row_deleted", key=RowKey, payload=RowDeleted)

@app.workflow(
    name="tour.narration",
    debounce=lg.Debounce(key=lambda p: p.row_id, period="15m", timeout="1h"),
    cancel_on=[lg.CancelOn(
        event=row_deleted,
        match=lambda ev, p: ev.key.row_id == p.row_id,   # required
        within="7d",                                    # optional
        reason="row deleted",                           # default: "cancel-on:tour.row_deleted"
    )],
    on_failure="tour.narration_failed",
)
async def narrate(ctx: lg.Context, p: Edit) -> str:
    text = await ctx.step("draft", draft_text, p.row_id)
    await ctx.sleep("cool-off", "7d")
    return text


@app.workflow(name="tour.narration_failed")
async def narration_failed(ctx: lg.Context, report: lg.FailureReport) -> None:
    return None


async def until(check: object, what: str) -> None:
    for _ in range(300):
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(what)


async def main() -> None:
    async with lg.Client(app, store="sqlite:///shop.db") as client:   # or postgresql://...
        event_id = await client.publish(order_paid, {"order_id": "o-17"}, {"total": 42.0, "tenant_id": "t1"})
        print("published", event_id)
    async with lg.Engine(app, "sqlite:///shop.db", poll_interval=0.05) as engine:
        client = engine.client
        await engine.run("checkout.run", {"order_id": "o-18", "total": 10.0, "tenant_id": "t1"}, timeout=30)

        async def fulfilled() -> bool:
            return len(await engine.list_runs(workflow="fulfilment.run", status="succeeded")) == 2

        await until(fulfilled, "both orders fulfilled")
        print("fulfilled:", sorted(r.payload["order_id"] for r in await engine.list_runs(workflow="fulfilment.run")))

        # an edit waiting in the debounce (15 minutes); then the row is deleted
        edited = await engine.start("tour.narration", {"row_id": "r1"})
        await client.publish(row_deleted, {"row_id": "r1"}, {"deleted_by": "u7"})

        async def stopped() -> bool:
            return not await engine.inspector.parked(workflow="tour.narration")

        await until(stopped, "the waiting edit withdrawn")
        trace = await engine.trace(edited.ticket)
        print("the edit:", trace.state, "-", trace.reason)


if __name__ == "__main__":
    asyncio.run(main())
