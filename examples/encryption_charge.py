# encryption_charge.py: a workflow whose journal is sealed (docs/encryption.md)
import asyncio
import base64
import os
import sqlite3

from pydantic import BaseModel

import lockgate as lg

app = lg.App()
store = "sqlite:///billing.db"
key = "k2026a:" + base64.b64encode(os.urandom(32)).decode()  # as `lockgate keys generate --id k2026a` prints


class Charge(BaseModel):
    customer: str
    card: str
    amount: int


class Receipt(BaseModel):
    customer: str
    amount: int


def charge_card(p: Charge) -> Receipt:
    return Receipt(customer=p.customer, amount=p.amount)


@app.workflow(name="billing.charge", encrypt_steps=True)
async def charge(ctx: lg.Context, p: Charge) -> Receipt:
    return await ctx.step("charge card", charge_card, p)  # type: ignore[no-any-return]


async def main() -> None:
    engine = lg.Engine(app, store, encryption_keys=[key])  # "k2026a:<base64>", or $LOCKGATE_ENCRYPTION_KEYS
    async with engine:
        receipt = await engine.run("billing.charge", {"customer": "c-1", "card": "4242 4242", "amount": 300})
        print("receipt:", receipt)
    with sqlite3.connect("billing.db") as db:
        stored = db.execute("SELECT output FROM lockgate_journal").fetchone()[0]
    print("as stored:", stored[:60], "...")
    assert "4242" not in stored and '"$sealed"' in stored


if __name__ == "__main__":
    asyncio.run(main())
