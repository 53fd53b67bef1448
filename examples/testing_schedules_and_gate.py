# testing_schedules_and_gate.py: days of a schedule and a debounced burst, on the test clock
import asyncio

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import TestEnv

app = lg.App()


class Edit(BaseModel):
    row_id: str
    text: str


def edit(i: int) -> Edit:
    return Edit(row_id="r-1", text=f"draft {i}")


@app.workflow(name="tour.narration", debounce=lg.Debounce(key=lambda p: p.row_id, period="15m"))
async def narrate(ctx: lg.Context, p: Edit) -> str:
    return p.text


class Report(BaseModel):
    kind: str = "daily"


@app.workflow(name="reports.build")
async def build(ctx: lg.Context, p: Report) -> str:
    return "built"


app.schedule("reports.nightly", workflow="reports.build", cron="0 2 * * *", payload={"kind": "nightly"})


async def test_days_of_a_schedule_and_a_burst() -> None:
    async with TestEnv(app) as env:
        for _ in range(3):
            await env.advance("1d")
            await env.fire_schedules()
        firings = await env.engine.schedule_firings("reports.nightly")
        assert len(firings) == 3 and all(f.status == "succeeded" for f in firings)

        handles = [await env.engine.start("tour.narration", edit(i)) for i in range(20)]
        await env.advance("15m")
        rows = await env.engine.flow(workflow="tour.narration")
        assert sum(r.collapsed for r in rows) == 19 and sum(r.admitted for r in rows) == 1
        assert len({h.ticket for h in handles}) == 20


if __name__ == "__main__":
    asyncio.run(test_days_of_a_schedule_and_a_burst())
    print("3 nightly firings; 20 edits, 1 run")
