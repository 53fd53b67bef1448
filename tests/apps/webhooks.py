"""Webhooks shaped like Stripe's and GitHub's, for the webhook tests (served by ``lockgate serve``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

import lockgate as lg

__all__ = ["GITHUB_SECRET_ENV", "STRIPE_SECRET_ENV", "app", "paid", "pushed"]

STRIPE_SECRET_ENV = "TEST_STRIPE_WEBHOOK_SECRET"
GITHUB_SECRET_ENV = "TEST_GITHUB_WEBHOOK_SECRET"

app = lg.App("webhook-tests")


class Payment(BaseModel):
    payment_id: str
    amount: int


class Push(BaseModel):
    repo: str
    ref: str


paid = app.event("payment.succeeded", payload=Payment)
pushed = app.event("repo.pushed", payload=Push)


def from_stripe(headers: Mapping[str, str], body: Any) -> dict[str, Any]:
    obj = body["data"]["object"]
    return {"payment_id": obj["id"], "amount": obj["amount"]}


def from_github(headers: Mapping[str, str], body: Any) -> dict[str, Any]:
    return {"repo": body["repository"]["full_name"], "ref": body.get("ref")}


app.webhook(
    "stripe", event=paid, verify=lg.HmacSignature.stripe(secret=f"env:{STRIPE_SECRET_ENV}"), transform=from_stripe
)
app.webhook(
    "github",
    event=pushed,
    verify=lg.HmacSignature.github(secret=f"env:{GITHUB_SECRET_ENV}"),
    transform=from_github,
    dedupe="X-GitHub-Delivery",
    max_body=64 * 1024,
)


@app.workflow(name="hook.noop")
async def noop(ctx: lg.Context, p: Push) -> str:
    return p.repo
