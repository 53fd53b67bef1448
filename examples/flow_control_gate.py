# flow_control_gate.py: every control of docs/flow-control.md, declared, validated and some of them run
import asyncio
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Account(BaseModel):
    account: str


class Edit(BaseModel):
    row_id: str
    edited_at: str


class Tenant(BaseModel):
    tenant_id: str
    urgent: bool = False


class Ref(BaseModel):
    tenant_id: str
    issue: str

class Refs(BaseModel):
    items: list[Ref]


class Reminder(BaseModel):
    order_id: str


hold = asyncio.Event()


@app.workflow(name="sync.provider", concurrency=lg.Concurrency(limit=1))
async def sync_provider(ctx: lg.Context, p: Account) -> str:
    await hold.wait()
    return p.account


@app.workflow(
    name="tour.narration",
    idempotency_key=lambda p: f"tour:{p.row_id}:{p.edited_at}",
    debounce=lg.Debounce(key=lambda p: f"tour:{p.row_id}", period="15m", timeout="1h"),
)
async def narrate(ctx: lg.Context, p: Edit) -> None: ...


@app.workflow(
    name="single.skip",
    singleton=lg.Singleton(key=lambda p: p.tenant_id, mode="skip")    # the newcomer stands down
)
async def single_skip(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="single.cancel",
    singleton=lg.Singleton(key=lambda p: p.tenant_id, mode="cancel")  # the newcomer replaces the incumbent
)
async def single_cancel(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="per.tenant",
    concurrency=lg.Concurrency(limit=5, key=lambda p: p.tenant_id)
)
async def per_tenant(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="pooled",
    concurrency=lg.Concurrency(limit=10, pool="openai")            # one budget across workflows
)
async def pooled(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="bursty",
    concurrency=lg.Concurrency(limit=2, key=lambda p: p.tenant_id, total=20, burst=6)
)
async def bursty(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="throttled",
    throttle=lg.Throttle(limit=100, period="1m", key=lambda p: p.tenant_id)     # queues the excess
)
async def throttled(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="paced",
    throttle=lg.Throttle(limit=60, period="1m", burst=10, key=lambda p: p.tenant_id)  # 1 a second, 11 at once
)
async def paced(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="rated",
    rate_limit=lg.RateLimit(limit=100, period="1m", key=lambda p: p.tenant_id)  # drops the excess
)
async def rated(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="two.windows",
    throttle=[lg.Throttle(limit=2, period="1s"), lg.Throttle(limit=50, period="1m")]  # both windows
)
async def two_windows(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="crm.sync",
    throttle=lg.Throttle(limit=600, period="1m", pool="crm")                     # shared across workflows
)
async def crm_sync(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(name="issues.refresh",
              batch=lg.Batch(item=Ref, key=lambda i: i.tenant_id, max_size=100, timeout="30s"))
async def refresh(ctx: lg.Context, p: Refs) -> None: ...


@app.workflow(
    name="urgent.first",
    concurrency=lg.Concurrency(limit=1),
    priority=lambda p: 100 if p.urgent else 0
)
async def urgent_first(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="fair",
    concurrency=lg.Concurrency(limit=1),
    fair_by=lambda p: p.tenant_id
)
async def fair(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id


@app.workflow(
    name="deadlines",
    concurrency=lg.Concurrency(limit=3),
    timeouts=lg.Timeouts(start="1h", finish="10m"),
    on_failure="tour.narration_failed",
)
async def deadlines(ctx: lg.Context, p: Tenant) -> str:
    return p.tenant_id

@app.workflow(name="tour.narration_failed")
async def narration_failed(ctx: lg.Context, report: lg.FailureReport) -> None: ...


@app.workflow(name="orders.remind")
async def remind(ctx: lg.Context, p: Reminder) -> str:
    return p.order_id


async def main() -> None:
    async with lg.Engine(app, "sqlite:///gate.db") as engine:
        holder = await engine.start("sync.provider", {"account": "a-0"})
        handle = await engine.start("sync.provider", {"account": "a-1"})   # behind Concurrency(limit=1)
        print(handle.status)                    # queued
        hold.set()
        print(await engine.result(holder.run_id, timeout=30))
        print(await handle.result(timeout=600))  # once its turn came and its run ended

        paced = [await engine.start("paced", {"tenant_id": "t1"}) for _ in range(12)]
        print([h.status for h in paced].count("started"))  # 11: one, and the burst of ten
        await engine.start("issues.refresh", {"tenant_id": "t1", "issue": "ABC-1"})   # one item
        await engine.start("orders.remind", {"order_id": "o-1"}, at=datetime.now(UTC) + timedelta(days=1))
        await engine.pause("tour.narration", reason="deploying a fix")   # arrivals collect (mode paused)
        await engine.unpause("tour.narration")                           # re-offered in priority order
        await engine.pause_key("openai", until=datetime.now(UTC) + timedelta(minutes=5))
        for row in await engine.flow():
            print(row.workflow, row.key, "queued", row.queued)


if __name__ == "__main__":
    asyncio.run(main())
