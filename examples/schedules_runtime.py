# schedules_runtime.py: a schedule per tenant, created, changed, paused and deleted at runtime
import asyncio
import sqlite3

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Digest(BaseModel):
    tenant: str


@app.workflow(name="digest.send")
async def send_digest(ctx: lg.Context, p: Digest) -> str:
    return f"digest sent to {p.tenant}"


async def sign_up(engine: lg.Engine, db: sqlite3.Connection, tenant: str) -> None:
    """The web handler: the tenant's row and its schedule commit together, or neither does."""
    db.execute("INSERT INTO tenants (id, plan) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", (tenant, "pro"))
    await engine.schedules.create(
        f"digest:{tenant}",
        workflow="digest.send",
        cron="0 8 * * 1",  # Mondays at 08:00...
        timezone="Europe/Berlin",  # ...in the tenant's zone
        payload={"tenant": tenant},  # checked against Digest now: nothing is written if it fails
        if_exists="skip",  # set-up code may run twice
        conn=db,
    )
    db.commit()


async def leave(engine: lg.Engine, db: sqlite3.Connection, tenant: str) -> None:
    """The customer leaves: their row and their schedule go together."""
    db.execute("DELETE FROM tenants WHERE id = ?", (tenant,))
    await engine.schedules.delete(f"digest:{tenant}", conn=db)
    db.commit()


async def main() -> None:
    async with lg.Engine(app, store="sqlite:///tenants.db") as engine:
        db = sqlite3.connect("tenants.db")
        db.execute("CREATE TABLE IF NOT EXISTS tenants (id TEXT PRIMARY KEY, plan TEXT)")
        db.commit()
        await sign_up(engine, db, "tenant-4711")
        await sign_up(engine, db, "tenant-4711")  # again: skipped, nothing changes

        s = await engine.schedules.get("digest:tenant-4711")
        print(s.origin, s.cron, s.timezone, s.next_at)  # runtime 0 8 * * 1 Europe/Berlin 2026-...

        # The customer moves the digest to Friday afternoon in New York:
        s = await engine.schedules.update("digest:tenant-4711", cron="0 16 * * 5", timezone="America/New_York")
        assert s.revision == 2
        await engine.schedules.pause("digest:tenant-4711", reason="invoice overdue")
        await engine.schedules.unpause("digest:tenant-4711")  # from its next slot; paused ones are not caught up
        page = await engine.schedules.list(prefix="digest:", limit=100)
        print([s.id for s in page.items], page.cursor)  # page.cursor: pass it back for the next page

        try:
            await engine.schedules.create("digest:bad", workflow="digest.send", cron="0 8 * * 1", payload={})
        except lg.InvalidSchedule as exc:
            print(exc.field, exc.problem)  # payload ... tenant: Field required

        # One that fires while we watch, through the same sweep, claim and ledger as declared ones:
        await engine.schedules.create("ping:tenant-4711", workflow="digest.send", every="1s", payload={"tenant": "x"})
        for _ in range(100):
            firings = await engine.schedule_firings("ping:tenant-4711")
            if firings:
                break
            await asyncio.sleep(0.1)
        print(firings[0].scheduled_at, firings[0].cause, firings[0].status)
        await engine.schedules.delete("ping:tenant-4711")

        await leave(engine, db, "tenant-4711")
        db.close()


if __name__ == "__main__":
    asyncio.run(main())
