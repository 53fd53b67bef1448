"""Workflows that wait for domain events (``ctx.wait_for_event``), for the event-wait tests."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["Order", "app", "order_cancelled", "order_shipped", "reminded"]

app = lg.App("event-wait-tests")


class Shipped(BaseModel):
    order_id: str
    carrier: str = "ups"


class OrderRef(BaseModel):
    order_id: str


class Order(BaseModel):
    order_id: str
    timeout: float | None = None
    lookback: float | None = None
    waits: int = 1


order_shipped = app.event("order.shipped", payload=Shipped)
order_cancelled = app.event("order.cancelled", payload=OrderRef)
order_lost = app.event("order.lost", payload=OrderRef)
reminded: list[str] = []


@app.workflow(name="ew.ship")
async def ship(ctx: lg.Context, p: Order) -> list[Any]:
    """Wait ``p.waits`` times for the order's shipment: each wait gets its own event (or ``None``)."""
    out: list[Any] = []
    for _ in range(p.waits):
        ev = await ctx.wait_for_event(
            order_shipped, match={"order_id": p.order_id}, timeout=p.timeout, lookback=p.lookback
        )
        out.append(None if ev is None else [ev.id, ev.data.carrier])
    return out


@app.workflow(name="ew.either")
async def either(ctx: lg.Context, p: Order) -> list[str]:
    """Whichever of two events comes first, matched by a callable."""
    ev = await ctx.wait_for_event([order_shipped, order_cancelled], match=lambda e: e.data.order_id == p.order_id)
    assert ev is not None
    return [ev.name, ev.id]


@app.workflow(name="ew.gathered")
async def gathered(ctx: lg.Context, p: Order) -> list[str]:
    """Two waits at once, inside ``asyncio.gather``."""
    a, b = await asyncio.gather(
        ctx.wait_for_event(order_shipped, match={"order_id": p.order_id}),
        ctx.wait_for_event(order_lost, match={"order_id": p.order_id}),
    )
    assert a is not None and b is not None
    return [a.name, b.name]


@app.workflow(name="ew.sealed", encrypt_steps=True)
async def sealed(ctx: lg.Context, p: Order) -> str:
    ev = await ctx.wait_for_event(order_shipped, match={"order_id": p.order_id})
    assert ev is not None
    return str(ev.data.carrier)


@app.workflow(
    name="ew.cancellable",
    cancel_on=[lg.CancelOn(event=order_cancelled, match={"order_id": "o-c"})],
)
async def cancellable(ctx: lg.Context, p: Order) -> str:
    ev = await ctx.wait_for_event(order_shipped, match={"order_id": p.order_id})
    assert ev is not None
    return str(ev.data.carrier)
