# transactions_shop.py: starts that commit with the caller's transaction (docs/transactions.md), on
# two scratch PostgreSQL databases of the test server (LOCKGATE_TEST_PG), dropped at the end
import asyncio
import os
import secrets
from contextlib import asynccontextmanager

import httpx
import psycopg
from fastapi import FastAPI
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

import lockgate as lg

ADMIN = os.environ.get("LOCKGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SCRATCH: list[str] = []


def scratch_database(prefix: str) -> str:
    name = f"lockgate_example_{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    SCRATCH.append(name)
    url = f"{ADMIN.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, total DOUBLE PRECISION NOT NULL)")
        db.execute(
            "CREATE TABLE outbox (id BIGSERIAL PRIMARY KEY, workflow TEXT NOT NULL, payload JSONB NOT NULL, "
            "relayed_at TIMESTAMPTZ)"
        )
    return url


os.environ.setdefault("SHOP_DB", scratch_database("shop"))
os.environ.setdefault("ORDERS_DB", scratch_database("orders"))

from shop_orders import app as workflows  # an lg.App with "orders.fulfil"  # noqa: E402

DB = os.environ["SHOP_DB"]  # e.g. postgresql://app@db.internal/shop
pool = AsyncConnectionPool(DB, open=False)
client = lg.Client(workflows, f"{DB}?schema=lockgate")  # workers run `lockgate serve` on the same URL


@asynccontextmanager
async def lifespan(api: FastAPI):
    await pool.open()
    async with client:
        yield
    await pool.close()


api = FastAPI(lifespan=lifespan)


class NewOrder(BaseModel):
    order_id: str
    total: float


@api.post("/orders")
async def place_order(order: NewOrder) -> dict[str, str | None]:
    async with pool.connection() as conn:  # commits when the block ends without an exception
        await conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (order.order_id, order.total))
        handle = await client.start("orders.fulfil", {"order_id": order.order_id}, conn=conn)
    return {"ticket": handle.ticket, "run_id": handle.run_id}


db = create_async_engine(DB.replace("postgresql://", "postgresql+psycopg://", 1))
sessions = async_sessionmaker(db)


async def place_order_with_sqlalchemy(order: NewOrder) -> dict[str, str | None]:
    async with sessions() as session, session.begin():  # commits at the end of the block
        await session.execute(
            text("INSERT INTO orders (id, total) VALUES (:id, :total)"), {"id": order.order_id, "total": order.total}
        )
        handle = await client.start("orders.fulfil", {"order_id": order.order_id}, conn=session)
    return {"ticket": handle.ticket, "run_id": handle.run_id}


ORDERS_DB = os.environ["ORDERS_DB"]  # not lockgate's database: postgresql://app@orders-db.internal/shop


class Tick(BaseModel):
    at: str


async def read_unrelayed(limit: int) -> list[dict]:
    async with await psycopg.AsyncConnection.connect(ORDERS_DB, row_factory=dict_row) as db:
        cur = await db.execute("SELECT id, workflow, payload FROM outbox WHERE relayed_at IS NULL "
                               "ORDER BY id LIMIT %s", (limit,))
        return await cur.fetchall()


async def mark_relayed(outbox_id: int) -> None:
    async with await psycopg.AsyncConnection.connect(ORDERS_DB) as db:
        await db.execute("UPDATE outbox SET relayed_at = now() WHERE id = %s", (outbox_id,))


@workflows.workflow(
    name="outbox.relay",
    schedule=lg.Schedule(every="5s", payload=lambda at: {"at": at.isoformat()}, on_overlap="skip"),
)
async def relay(ctx: lg.Context, p: Tick) -> int:
    rows = await ctx.step("read", read_unrelayed, 100)
    for row in rows:
        # journaled: a relay resumed after a crash here replays the start instead of starting again
        await ctx.start_child(row["workflow"], row["payload"], parent_close="abandon")
        await ctx.step(f"mark:{row['id']}", mark_relayed, row["id"])
    return len(rows)


async def main() -> None:
    async with lg.Engine(workflows, f"{DB}?schema=lockgate") as engine:
        order_id, total = "o-1", 12.5
        async with await psycopg.AsyncConnection.connect(DB) as conn:
            async with conn.transaction():
                await conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (order_id, total))
                handle = await engine.start("orders.fulfil", {"order_id": order_id}, conn=conn)
            # committed: the order and the start, together. Rolled back: neither.
        print(await engine.result(handle.run_id, timeout=30))

        async with lifespan(api):  # the web app's own start and stop
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
                placed = (await http.post("/orders", json={"order_id": "o-2", "total": 30.0})).json()
            print(await engine.result(placed["run_id"], timeout=30))
            placed = await place_order_with_sqlalchemy(NewOrder(order_id="o-3", total=8.0))
            print(await engine.result(placed["run_id"], timeout=30))

            order_id, total = "o-4", 99.0
            async with await psycopg.AsyncConnection.connect(ORDERS_DB) as app_db:
                async with app_db.transaction():
                    await app_db.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (order_id, total))
                await client.start("orders.fulfil", {"order_id": order_id}, idempotency_key=f"fulfil:{order_id}")
                await app_db.execute(
                    "INSERT INTO outbox (workflow, payload) VALUES ('orders.fulfil', '{\"order_id\": \"o-17\"}')"
                )
                await app_db.commit()
        fired = await engine.run_schedule("outbox.relay")
        print("relayed:", await engine.result(fired.run_id, timeout=30))
    await db.dispose()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            for name in SCRATCH:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
