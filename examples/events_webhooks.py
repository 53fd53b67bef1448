# events_webhooks.py: docs/events.md's webhooks, Stripe-shaped and GitHub-shaped, signed as each provider documents
import asyncio
import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import create_app

os.environ.setdefault("STRIPE_WEBHOOK_SECRET", "whsec_example")  # in production: set by your deployment
os.environ.setdefault("GITHUB_WEBHOOK_SECRET", "gh-example")

app = lg.App()


class Payment(BaseModel):
    payment_id: str
    amount: int


class Push(BaseModel):
    repo: str
    ref: str


payment_succeeded = app.event("payment.succeeded", payload=Payment)
repo_pushed = app.event("repo.pushed", payload=Push)


def from_stripe(headers: Mapping[str, str], body: Any) -> dict[str, Any]:
    intent = body["data"]["object"]
    return {"payment_id": intent["id"], "amount": intent["amount"]}


app.webhook(
    "stripe",
    event=payment_succeeded,
    verify=lg.HmacSignature.stripe(secret="env:STRIPE_WEBHOOK_SECRET"),
    transform=from_stripe,
)
app.webhook(
    "github",
    event=repo_pushed,
    verify=lg.HmacSignature.github(secret="env:GITHUB_WEBHOOK_SECRET"),
    transform=lambda headers, body: {"repo": body["repository"]["full_name"], "ref": body["ref"]},
    dedupe="X-GitHub-Delivery",  # GitHub's delivery id: a redelivery publishes once
)


def stripe_signed(body: bytes) -> dict[str, str]:
    """Stripe's scheme: HMAC-SHA256 of "{t}.{body}" with the endpoint secret, sent as t=...,v1=..."""
    t = int(time.time())
    sig = hmac.new(os.environ["STRIPE_WEBHOOK_SECRET"].encode(), f"{t}.".encode() + body, hashlib.sha256)
    return {"Stripe-Signature": f"t={t},v1={sig.hexdigest()}", "Content-Type": "application/json"}


def github_signed(body: bytes, delivery: str) -> dict[str, str]:
    """GitHub's scheme: X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>."""
    sig = hmac.new(os.environ["GITHUB_WEBHOOK_SECRET"].encode(), body, hashlib.sha256)
    return {
        "X-Hub-Signature-256": f"sha256={sig.hexdigest()}",
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
    }


async def main() -> None:
    async with lg.Client(app, "sqlite:///webhooks.db") as client:
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://lockgate") as http:
            intent = {"object": {"id": "pi_1", "amount": 1200}}
            body = json.dumps({"id": "evt_1", "type": "payment_intent.succeeded", "data": intent}).encode()
            paid = await http.post("/hooks/stripe", content=body, headers=stripe_signed(body))
            assert paid.status_code == 200, paid.text
            resent = await http.post("/hooks/stripe", content=body, headers=stripe_signed(body))  # Stripe retries
            assert resent.json() == {"event_id": paid.json()["event_id"], "duplicate": True}  # by the body's id

            push = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/shop"}}).encode()
            first = await http.post("/hooks/github", content=push, headers=github_signed(push, "d-1"))
            retry = await http.post("/hooks/github", content=push, headers=github_signed(push, "d-1"))
            assert retry.json() == {"event_id": first.json()["event_id"], "duplicate": True}

            forged = await http.post("/hooks/stripe", content=body, headers={"Stripe-Signature": "t=1,v1=00"})
            assert forged.status_code == 401  # nothing written
        [event] = await client.list_events(name="payment.succeeded")
        assert (event.source, event.data) == ("webhook:stripe", {"payment_id": "pi_1", "amount": 1200})
    print("webhooks: ok")


if __name__ == "__main__":
    asyncio.run(main())
