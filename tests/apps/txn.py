"""Workflows for the transactional start tests, and an application process that starts one and dies.

``python -m tests.apps.txn STORE_URL ORDER_ID`` inserts an order and starts its fulfilment
in one transaction of its own connection, commits, prints the handle as JSON, and kills
itself with SIGKILL before closing anything.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from typing import Any

import psycopg
from pydantic import BaseModel

import lockgate as lg

__all__ = ["app", "order_placed"]

app = lg.App("txn-tests")


class Order(BaseModel):
    order_id: str


class Tenant(BaseModel):
    order_id: str
    tenant: str


class Placed(BaseModel):
    total: float


order_placed = app.event("order.placed", key=Order, payload=Placed)


@app.workflow(name="txn.fulfil")
async def fulfil(ctx: lg.Context, p: Order) -> str:
    return f"fulfilled {p.order_id}"


@app.workflow(name="txn.limited", concurrency=lg.Concurrency(limit=1, key=lambda p: p.tenant))
async def limited(ctx: lg.Context, p: Tenant) -> str:
    await ctx.sleep("hold", "1h")
    return p.order_id


@app.workflow(name="txn.on_placed")
async def on_placed(ctx: lg.Context, p: Order) -> str:
    return f"placed {p.order_id}"


app.trigger(on=order_placed, workflow="txn.on_placed", payload=lambda ev: {"order_id": ev.key.order_id})

ORDERS_SQL = "CREATE TABLE IF NOT EXISTS app_orders (id TEXT PRIMARY KEY, total REAL NOT NULL)"


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///`` store URL as the tests write it (absolute: four slashes)."""
    return url.removeprefix("sqlite:///")


async def _place_and_die(url: str, order_id: str) -> None:
    client = lg.Client(app, url)
    await client.open()
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url))
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO app_orders (id, total) VALUES (?, ?)", (order_id, 9.5))
        handle = await client.start("txn.fulfil", {"order_id": order_id}, conn=conn)
        conn.commit()
    else:
        async with await psycopg.AsyncConnection.connect(url) as pg:
            await pg.execute("INSERT INTO app_orders (id, total) VALUES (%s, %s)", (order_id, 9.5))
            handle = await client.start("txn.fulfil", {"order_id": order_id}, conn=pg)
            await pg.commit()
    out: dict[str, Any] = handle.to_dict()
    out["run_id"] = handle.run_id
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(_place_and_die(sys.argv[1], sys.argv[2]))
