# listing_runs.py: the listing filters and cursors of docs/listing.md, run
import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

import lockgate as lg
from lockgate.inspect import RunFilter

app = lg.App()


class Payment(BaseModel):
    card: str


def take(card: str) -> str:
    if card.startswith("bad"):
        raise ValueError("card_declined")
    return "ok"


@app.workflow(name="charge")
async def charge(ctx: lg.Context, p: Payment) -> str:
    return await ctx.step("take", take, p.card)  # type: ignore[no-any-return]


async def main() -> None:
    async with lg.Engine(app, "sqlite:///listing.db") as engine:
        handles = [await engine.start("charge", {"card": f"{'bad' if n % 3 else 'good'}-{n}"}) for n in range(250)]
        for h in handles:
            with contextlib.suppress(lg.RunFailed):
                await engine.result(h.run_id, timeout=60)
        failed_today = await engine.list_runs(
            workflow="charge",
            statuses=("failed", "cancelled"),
            since=datetime.now(UTC) - timedelta(days=1),
            text="card_declined",
        )
        print(len(failed_today), "declined today (first page)")
        pages = 1
        page = await engine.inspector.run_page(RunFilter(statuses=("failed",)), limit=100)
        while page.next_cursor is not None:
            page = await engine.inspector.run_page(RunFilter(statuses=("failed",)), cursor=page.next_cursor, limit=100)
            pages += 1
        print(pages, "pages of failed runs")


if __name__ == "__main__":
    asyncio.run(main())
