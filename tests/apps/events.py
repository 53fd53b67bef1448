"""Workflows, events and triggers for the domain-event tests."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["app", "order_paid", "row_deleted", "row_edited", "user_signed_up"]

app = lg.App("event-tests")


class OrderKey(BaseModel):
    order_id: str


class OrderPaid(BaseModel):
    total: float
    tenant_id: str


class Fulfil(BaseModel):
    order_id: str
    total: float


class Audit(BaseModel):
    name: str
    data: dict[str, Any]


class UserKey(BaseModel):
    user_id: str


class SignedUp(BaseModel):
    plan: str


class RowKey(BaseModel):
    row_id: str


class Edit(BaseModel):
    row_id: str
    n: int = 0


class Ping(BaseModel):
    ok: bool = True


order_paid = app.event("order.paid", key=OrderKey, payload=OrderPaid)
user_signed_up = app.event("user.signed_up", key=UserKey, payload=SignedUp)
row_deleted = app.event("row.deleted", key=RowKey, payload=RowKey)
row_edited = app.event("row.edited", key=RowKey, payload=Edit)


@app.workflow(name="ev.fulfil")
async def fulfil(ctx: lg.Context, p: Fulfil) -> str:
    return f"fulfilled {p.order_id}"


@app.workflow(name="ev.receipt")
async def receipt(ctx: lg.Context, p: OrderPaid) -> float:
    return p.total


@app.workflow(name="ev.audit")
async def audit(ctx: lg.Context, p: Audit) -> str:
    return p.name


@app.workflow(name="ev.onboard")
async def onboard(ctx: lg.Context, p: UserKey) -> str:
    return p.user_id


@app.workflow(name="ev.publisher")
async def publisher(ctx: lg.Context, p: OrderKey) -> str:
    event_id = await ctx.publish(order_paid, {"order_id": p.order_id}, {"total": 5, "tenant_id": "t"})
    await ctx.sleep("after", "1h")
    return event_id


def _bad_mapper(ev: lg.Event) -> Any:
    raise RuntimeError("mapper broke")


app.trigger(
    on=order_paid,
    workflow="ev.fulfil",
    payload=lambda ev: {"order_id": ev.key.order_id, "total": ev.data.total},
    filter=lambda ev: ev.data.total > 0,
)
app.trigger(on=order_paid, workflow="ev.receipt")
app.trigger(on=order_paid, workflow="ev.onboard", name="order.paid->broken", payload=_bad_mapper)
app.trigger(on="*", workflow="ev.audit", payload=lambda ev: {"name": ev.name, "data": ev.data.model_dump()})
app.trigger(
    on=user_signed_up,
    workflow="ev.onboard",
    payload=lambda ev: {"user_id": ev.key.user_id},
    idempotency_key=lambda ev: f"onboard:{ev.key.user_id}",
)

app.trigger(on=row_edited, workflow="ev.debounced")  # a burst of edits folds into one debounced start

# -- cancel-on -------------------------------------------------------------------------------

_by_row = lg.CancelOn(event=row_deleted, match=lambda ev, p: p is not None and p.row_id == ev.key.row_id)


@app.workflow(name="ev.narrate", cancel_on=[_by_row], on_failure="ev.failed")
async def narrate(ctx: lg.Context, p: Edit) -> str:
    await ctx.sleep("cool-off", "7d")
    return p.row_id


@app.workflow(name="ev.approve", cancel_on=[_by_row])
async def approve(ctx: lg.Context, p: Edit) -> str:
    got = await ctx.wait_for_signal("approval", Ping, timeout="3d")
    return f"{p.row_id}:{got}"


@app.workflow(
    name="ev.debounced",
    cancel_on=[_by_row],
    debounce=lg.Debounce(key=lambda p: p.row_id, period="15m", timeout="1h"),
)
async def debounced(ctx: lg.Context, p: Edit) -> str:
    return p.row_id


@app.workflow(
    name="ev.limited",
    cancel_on=[_by_row],
    concurrency=lg.Concurrency(limit=1, key=lambda p: p.row_id),
)
async def limited(ctx: lg.Context, p: Edit) -> str:
    await ctx.sleep("hold", "7d")
    return p.row_id


@app.workflow(
    name="ev.recent_only",
    cancel_on=[lg.CancelOn(event=row_deleted, match=lambda ev, p: True, within="1h", reason="row gone")],
)
async def recent_only(ctx: lg.Context, p: Edit) -> str:
    await ctx.sleep("hold", "7d")
    return p.row_id


@app.workflow(name="ev.failed")
async def failed(ctx: lg.Context, report: lg.FailureReport) -> str:
    return report.reason


@app.workflow(
    name="ev.tour",
    debounce=lg.Debounce(key=lambda p: p.row_id, period="15m", timeout="1h"),
    cancel_on=[lg.CancelOn(event=row_deleted, match=lambda ev, p: ev.key.row_id == p.row_id, reason="row deleted")],
    on_failure="ev.failed",
)
async def tour(ctx: lg.Context, p: Edit) -> str:
    """The docs' worked example (docs/events.md): a narration that sleeps a week after its draft."""
    await ctx.sleep("cool-off", "7d")
    return p.row_id
