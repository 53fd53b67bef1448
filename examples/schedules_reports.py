# schedules_reports.py: the schedules of docs/schedules.md, declared and operated
import asyncio
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

import lockgate as lg

app = lg.App()

class Day(BaseModel):
    day: str

@app.workflow(
    name="reports.nightly",
    schedule=lg.Schedule(
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        payload=lambda scheduled_at: {"day": scheduled_at.date().isoformat()},
    ),
)
async def nightly(ctx: lg.Context, p: Day) -> None:
    ...

# More schedules of one workflow, each with its own name and payload:
app.schedule("reports.hourly", workflow=nightly, every="1h",
             payload=lambda at: {"day": at.strftime("%Y-%m-%d %H:00")})


def options() -> None:
    """Each option of the page, built and checked."""
    lg.Schedule(cron="*/15 9-17 * * 1-5", timezone="America/New_York", payload={"region": "us"})
    lg.Schedule(every="30s", payload=lambda at: {"window_end": at.isoformat()})
    lg.Schedule(cron="0 * * * *", on_overlap="buffer", buffer_limit=3)
    lg.Schedule(cron="0 0 * * *", backfill="all")          # fire every missed midnight after downtime
    lg.Schedule(cron="0 * * * *", backfill="6h")           # ...only those of the last six hours
    lg.Schedule(cron="0 4 * * *", max_runtime="2h", jitter="5m")


async def main() -> None:
    options()
    end = datetime.now(UTC)
    start = end - timedelta(days=3)
    async with lg.Engine(app, store="sqlite:///reports.db") as engine:   # or postgresql://...
        for s in await engine.list_schedules():        # declared and stored (orphaned) schedules
            print(s.name, s.spec, s.timezone, s.next_at, s.paused, s.orphaned, s.missed, s.firings)
        await engine.pause_schedule("reports.nightly", reason="migration")
        await engine.unpause_schedule("reports.nightly")
        fired = await engine.run_schedule("reports.nightly")           # Fired(status, run_id, ...)
        for f in await engine.schedule_firings("reports.nightly", limit=20):
            print(f.scheduled_at, f.cause, f.status, f.why, f.run_id)
        slots = await engine.backfill_schedule("reports.nightly", start, end, commit=True)
        print(fired.status, len(slots), "nights backfilled")


if __name__ == "__main__":
    asyncio.run(main())
