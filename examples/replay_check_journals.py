# replay_check_journals.py: export a live run's journal, then replay it against the code (docs/replay-check.md)
import asyncio
from pathlib import Path

from pydantic import BaseModel

import lockgate as lg
from lockgate.testing import replay_check

app = lg.App()


class Order(BaseModel):
    order_id: str


class Go(BaseModel):
    ok: bool = True


def reserve(order_id: str) -> str:
    return f"reserved {order_id}"


@app.workflow(name="orders.ship")
async def ship(ctx: lg.Context, p: Order) -> str:
    await ctx.step("reserve", reserve, p.order_id)
    await ctx.wait_for_signal("packed", Go)
    return p.order_id


async def test_live_histories_still_replay() -> None:
    for path in Path("tests/journals").glob("*.json"):
        verdict = await replay_check(app, path)     # a path, the file's text, or a JournalExport
        assert not verdict.breaks, verdict


async def main() -> None:
    folder = Path("tests/journals")
    folder.mkdir(parents=True, exist_ok=True)
    async with lg.Engine(app, "sqlite:///ship.db") as engine:
        handle = await engine.start("orders.ship", {"order_id": "o-1"})
        while (await engine.get_run(handle.run_id)).waiting_on != "signal":
            await asyncio.sleep(0.02)
        export = await engine.inspector.export_run(handle.run_id)  # as `lockgate workflows export` writes it
        (folder / f"{handle.run_id}.json").write_text(export.to_json())
    await test_live_histories_still_replay()
    print("every exported journal replays against this code")


if __name__ == "__main__":
    asyncio.run(main())
