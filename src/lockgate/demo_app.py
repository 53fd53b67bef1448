"""The example app behind ``lockgate demo``: a small shop whose workflows use each durable feature.

- ``demo.checkout``: steps, a payment provider that is down twice before it answers (a
  step retry), a durable sleep long enough to park the run, a child workflow, and at its
  end the domain event ``demo.order.paid`` (published once: journaled). It streams its
  progress as it goes (``ctx.stream``: the dashboard's run page shows it live).
- ``demo.receipt``: the child; one step.
- ``demo.approval``: waits for the ``approve`` signal (the demo sends it).
- ``demo.quote``: serves one ``discount`` update and answers the caller with the new price.
- ``demo.ship``: parks until ``demo.order.paid`` is published for its order, then ships it.
- ``demo.expense``: mails an approval link (``ctx.create_token``) and parks until it is completed
  (the demo completes it as the manager's click would).

And three whose flow control the admission gate decides before a run exists:

- ``demo.narrate``: debounced per row; a burst of edits becomes one run with the latest text, drafted
  under a key that counts a model's tokens (``MODEL``), not calls. With the extra ``lockgate[ai]``
  the draft is a durable Pydantic AI agent (``NARRATOR``, an offline model that calls one tool): each
  model request and the tool call are steps, each request reserves tokens and settles at its usage.
- ``demo.label``: at most two labels print at once per printer; the rest queue until a slot frees.
- ``demo.sms``: at most three texts a minute per customer; the excess is dropped.

And one that starts by the clock:

- ``demo.heartbeat``: a schedule fires it every two seconds, with the slot's time as payload.

And two that domain events start and stop:

- ``demo.fulfil``: a trigger starts it for every ``demo.order.paid``; one step.
- ``demo.reminder``: sleeps an hour before reminding a customer of their order, unless
  ``demo.order.cancelled`` is published for that order first (``cancel_on``): the sweep
  cancels the sleeping run with the reason ``order cancelled``.

Serve it yourself with ``lockgate serve lockgate.demo_app:app``.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime

from pydantic import BaseModel

try:  # the extra ``lockgate[ai]``: without it the narration's draft is one plain step
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from .ai import LockgateAgent
except ImportError:  # pragma: no cover - the tests install the extra
    WITH_AGENT = False
else:
    WITH_AGENT = True

from .app import App
from .callbacks import TokenExpired
from .context import Context
from .controls import Concurrency, Debounce, RateLimit
from .definitions import Retry
from .events import CancelOn
from .flowcontrol import FlowControl
from .schedule import Schedule

__all__ = [
    "CANCEL_REASON",
    "HEARTBEAT_EVERY",
    "Approval",
    "Beat",
    "Cancelled",
    "Discount",
    "Edit",
    "FlakyProvider",
    "Label",
    "Order",
    "OrderKey",
    "Paid",
    "ProviderDown",
    "Quote",
    "Receipt",
    "Text",
    "app",
    "order_cancelled",
    "order_paid",
    "provider",
]

app = App("demo")


class Order(BaseModel):
    order_id: str
    amount: int


class Receipt(BaseModel):
    order_id: str
    charge_id: str


class Approval(BaseModel):
    approved: bool
    by: str


class Quote(BaseModel):
    customer: str
    items: int


class Discount(BaseModel):
    percent: int


class Edit(BaseModel):
    row: str
    text: str


class Label(BaseModel):
    printer: str
    order_id: str


class Text(BaseModel):
    customer: str
    message: str


class Beat(BaseModel):
    at: str


class OrderKey(BaseModel):
    order_id: str


class Paid(BaseModel):
    amount: int
    charge_id: str


class Cancelled(BaseModel):
    by: str


order_paid = app.event("demo.order.paid", key=OrderKey, payload=Paid)
order_cancelled = app.event("demo.order.cancelled", key=OrderKey, payload=Cancelled)


class ProviderDown(Exception):
    """The payment provider did not answer."""


class FlakyProvider:
    """A payment provider that fails the first ``failures`` calls for each order, then charges."""

    def __init__(self, failures: int = 2) -> None:
        self.failures = failures
        self._calls: Counter[str] = Counter()
        self._lock = threading.Lock()  # sync steps run in worker threads

    def charge(self, order_id: str, amount: int) -> str:
        with self._lock:
            self._calls[order_id] += 1
            call = self._calls[order_id]
        if call <= self.failures:
            raise ProviderDown(f"payment provider unavailable (call {call} for {order_id})")
        return f"ch_{order_id}_{amount}"


provider = FlakyProvider()

CHARGE_RETRY = Retry(max_attempts=5, strategy="fixed", base_delay="300ms", jitter=False, retryable=(ProviderDown,))


def reserve_stock(order_id: str) -> str:
    return f"reserved {order_id}"


def email_receipt(order_id: str, charge_id: str) -> str:
    return f"receipt for {order_id} ({charge_id}) sent"


PAYMENTS = FlowControl("payments", parallelism=1)
"""The payment provider takes one charge at a time, whichever run asks: step flow control."""


@app.workflow(name="demo.checkout")
async def checkout(ctx: Context, order: Order) -> str:
    """Reserve, charge (retrying a flaky provider), wait for settlement, then send a receipt."""
    await ctx.step("reserve-stock", reserve_stock, order.order_id)
    await ctx.stream(f"stock reserved for {order.order_id}\n")  # the run's stream: a replay does not repeat it
    charge_id: str = await ctx.step(
        "charge", provider.charge, order.order_id, order.amount, retry=CHARGE_RETRY, flow_control=PAYMENTS
    )
    await ctx.stream(f"charged {charge_id}\n")
    await ctx.sleep("settlement", "3s")  # longer than the engine's inline sleep: the run parks, the worker is free
    await ctx.stream("settled\n")
    child = await ctx.start_child(send_receipt, Receipt(order_id=order.order_id, charge_id=charge_id))
    sent: str = await ctx.wait_child(child)
    await ctx.stream("receipt sent\n")
    # Journaled: a body re-entered after a crash returns the recorded event id, it does not publish twice.
    await ctx.publish(order_paid, {"order_id": order.order_id}, {"amount": order.amount, "charge_id": charge_id})
    return f"{charge_id}; {sent}"


@app.workflow(name="demo.receipt")
async def send_receipt(ctx: Context, receipt: Receipt) -> str:
    """Send the receipt (a child of ``demo.checkout``)."""
    sent: str = await ctx.step("email", email_receipt, receipt.order_id, receipt.charge_id)
    return sent


@app.workflow(name="demo.approval")
async def approval(ctx: Context, order: Order) -> str:
    """Ask for approval and wait durably for the ``approve`` signal."""
    await ctx.step("request-approval", reserve_stock, order.order_id)
    decision = await ctx.wait_for_signal("approve", Approval, timeout="5m")
    if decision is None:
        return "no decision in time"
    return f"{'approved' if decision.approved else 'rejected'} by {decision.by}"


def list_price(items: int) -> int:
    return items * 100


@app.workflow(name="demo.quote")
async def quote(ctx: Context, request: Quote) -> int:
    """Price a quote, then serve one ``discount`` update whose answer is the discounted price."""
    price: int = await ctx.step("list-price", list_price, request.items)

    def apply(discount: Discount) -> int:
        if not 0 <= discount.percent <= 50:
            raise ValueError(f"discount must be 0-50%, got {discount.percent}%")
        return price * (100 - discount.percent) // 100

    final: int = await ctx.handle_update("discount", Discount, apply)
    return final


MODEL = FlowControl(
    "model", rate=2_000, period="1m", cost=lambda text: len(text) // 4 + 200, settle=lambda draft: len(draft) // 4
)
"""A model's tokens per minute: a draft reserves its prompt and the most it may write, then settles what it wrote."""


def draft_narration(text: str) -> str:
    return f"now reads {text!r}"


if WITH_AGENT:

    def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """The narrator's model, offline: it asks for the row's latest text (a tool call), then writes."""
        returned = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returned:
            asked = RequestUsage(input_tokens=80, output_tokens=12)
            return ModelResponse(parts=[ToolCallPart("latest_text", {})], usage=asked)
        draft = draft_narration(str(returned[-1]))
        wrote = RequestUsage(input_tokens=120, output_tokens=len(draft) // 4)
        return ModelResponse(parts=[TextPart(draft)], usage=wrote)

    _agent = Agent(FunctionModel(_model), name="narrator", deps_type=Edit, instructions="Narrate a row's change.")

    @_agent.tool
    def latest_text(run: RunContext[Edit]) -> str:
        """The row's text as last edited (a tool call is a step of its own)."""
        return run.deps.text

    NARRATOR = LockgateAgent(_agent, flow_control=MODEL, estimate=lambda messages, settings: 300)
    """The narration's durable agent: its model requests reserve 300 tokens of ``MODEL`` each, then settle."""


@app.workflow(name="demo.narrate", debounce=Debounce(key=lambda e: e.row, period="1s"))
async def narrate(ctx: Context, edit: Edit) -> str:
    """Narrate a row's change once it has been quiet for a second (debounced per row)."""
    if WITH_AGENT:
        result = await NARRATOR.run(ctx, f"Narrate row {edit.row}", deps=edit)
        return f"{edit.row} {result.output}"
    narration: str = await ctx.step("draft", draft_narration, edit.text, flow_control=MODEL)
    return f"{edit.row} {narration}"


@app.workflow(name="demo.label", concurrency=Concurrency(limit=2, key=lambda label: label.printer))
async def print_label(ctx: Context, label: Label) -> str:
    """Print a shipping label; a printer takes two at a time (a concurrency limit per printer)."""
    await ctx.sleep("printing", "600ms")  # short enough to wait in place: the run holds its slot meanwhile
    return f"label for {label.order_id} printed on {label.printer}"


@app.workflow(name="demo.sms", rate_limit=RateLimit(limit=3, period="1m", key=lambda t: t.customer))
async def send_sms(ctx: Context, text: Text) -> str:
    """Text a customer; at most three a minute each (a rate limit: the excess is dropped)."""
    return f"texted {text.customer}: {text.message}"


HEARTBEAT_EVERY = "2s"


def beat_at(at: datetime) -> dict[str, str]:
    """The payload of the heartbeat's slot ``at`` (computed against the slot, not the firing's time)."""
    return {"at": at.isoformat()}


def check_health(at: str) -> str:
    return f"all well at {at[11:19]}"


@app.workflow(name="demo.heartbeat", schedule=Schedule(every=HEARTBEAT_EVERY, payload=beat_at))
async def heartbeat(ctx: Context, beat: Beat) -> str:
    """Check the shop's health; a schedule starts it every two seconds (one firing per slot)."""
    checked: str = await ctx.step("check", check_health, beat.at)
    return checked


def pack_order(order_id: str) -> str:
    return f"packed {order_id}"


@app.workflow(name="demo.fulfil")
async def fulfil(ctx: Context, order: OrderKey) -> str:
    """Pack a paid order; the trigger below starts it for every ``demo.order.paid``."""
    packed: str = await ctx.step("pack", pack_order, order.order_id)
    return packed


app.trigger(on=order_paid, workflow=fulfil, payload=lambda ev: {"order_id": ev.key.order_id})

CANCEL_REASON = "order cancelled"


def send_reminder(order_id: str) -> str:
    return f"reminded the customer of {order_id}"


@app.workflow(
    name="demo.reminder",
    cancel_on=[
        CancelOn(event=order_cancelled, match=lambda ev, r: ev.key.order_id == r.order_id, reason=CANCEL_REASON)
    ],
)
async def reminder(ctx: Context, order: OrderKey) -> str:
    """Remind the customer of an order in an hour, unless ``demo.order.cancelled`` is published for it first."""
    await ctx.sleep("wait", "1h")  # parks the run: the cancellation reaches it without waking it
    reminded: str = await ctx.step("remind", send_reminder, order.order_id)
    return reminded


def ship_order(order_id: str) -> str:
    return f"shipped {order_id}"


@app.workflow(name="demo.ship")
async def ship(ctx: Context, order: OrderKey) -> str:
    """Wait up to a day for this order's ``demo.order.paid`` (its publisher knows no run id), then ship it."""
    paid = await ctx.wait_for_event(order_paid, match=lambda ev: ev.key.order_id == order.order_id, timeout="1d")
    if paid is None:
        return f"{order.order_id} was not paid within a day"
    shipped: str = await ctx.step("ship", ship_order, order.order_id)
    return shipped


emailed: dict[str, str] = {}
"""Run id -> the approval token ``demo.expense`` mailed (the demo plays the manager who clicks it)."""


def email_link(run_id: str, token: str) -> str:
    emailed[run_id] = token
    return "mailed the approval link"


@app.workflow(name="demo.expense")
async def expense(ctx: Context, order: Order) -> str:
    """Mail an approval link and wait (parked) until whoever holds it answers, for up to a day."""
    tok = await ctx.create_token("approval", model=Approval, timeout="1d")
    await ctx.step("email", email_link, ctx.run_id, tok.token)
    try:
        decision = await ctx.wait_for_token(tok)
    except TokenExpired:
        return "nobody answered within a day"
    return f"{'approved' if decision.approved else 'rejected'} by {decision.by} (emailed link)"
