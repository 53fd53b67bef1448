# approvals_expense.py: docs/human-in-the-loop.md: an expense approved by an emailed link, escalated on expiry
import asyncio

import httpx
from pydantic import BaseModel

import lockgate as lg
from lockgate.http import AccessPolicy, create_app
from lockgate.testing import TestEnv

app = lg.App()
outbox: list[tuple[str, str]] = []  # the emails sent: (to, link)


class Expense(BaseModel):
    id: str
    amount: float
    manager: str
    director: str


class Decision(BaseModel):
    approved: bool
    note: str = ""


def send_email(to: str, subject: str, link: str) -> None:
    outbox.append((to, link))  # a real app calls its mail service here


@app.workflow(name="expenses.approve")
async def approve_expense(ctx: lg.Context, e: Expense) -> str:
    for approver, wait in ((e.manager, "2d"), (e.director, "1d")):
        tok = await ctx.create_token("approval", model=Decision, timeout=wait)
        await ctx.step("email", send_email, approver, f"Expense {e.id}: {e.amount:.2f} EUR", tok.url)
        try:
            decision = await ctx.wait_for_token(tok)
        except lg.TokenExpired:
            continue  # no answer in time: escalate to the next approver
        verdict = "approved" if decision.approved else "refused"
        return f"{verdict} by {approver}: {decision.note}"
    return "nobody answered"


async def main() -> None:
    async with TestEnv(app, public_url="https://expenses.example.com") as env:
        web = create_app(env.engine.client, policy=AccessPolicy(token="operators-only"))
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport) as browser:
            people = {"manager": "mia@example.com", "director": "dan@example.com"}
            quick = await env.engine.start("expenses.approve", {"id": "e1", "amount": 120, **people})
            await env.settle()  # parked on the token: no worker held
            to, link = outbox[-1]
            assert to == "mia@example.com" and link.startswith("https://expenses.example.com/callbacks/")
            page = await browser.get(link)  # a landing page asks first: pending, completed or expired
            assert page.json()["state"] == "pending"
            answer = await browser.post(link, json={"approved": True, "note": "fine"})  # no API token needed
            assert answer.status_code == 200
            assert await env.engine.result(quick.run_id or "", timeout=10) == "approved by mia@example.com: fine"
            again = await browser.post(link, json={"approved": False})
            assert again.status_code == 409  # the link works once

            slow = await env.engine.start("expenses.approve", {"id": "e2", "amount": 900, **people})
            await env.settle()
            await env.advance("2d")  # Mia is away: her token expires, Dan gets the email
            (_, mia_link), (to, dan_link) = outbox[-2:]
            assert to == "dan@example.com"
            late = await browser.post(mia_link, json={"approved": True})
            assert late.status_code == 410  # expired
            await browser.post(dan_link, json={"approved": False, "note": "over budget"})
            assert await env.engine.result(slow.run_id or "", timeout=10) == "refused by dan@example.com: over budget"
    print("approved, escalated, refused: ok")


if __name__ == "__main__":
    asyncio.run(main())
