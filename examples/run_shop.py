# run_shop.py: start a checkout, approve it, read its result (docs/quickstart.md, "Run it")
import asyncio

import lockgate as lg
from shop import app


async def main() -> None:
    async with lg.Engine(app, store="sqlite:///shop.db") as engine:
        handle = await engine.start("shop.checkout", {"order_id": "o-1", "amount": 1200})
        print(handle.status, handle.run_id)  # started run_... (run again: existing, the same run)
        if handle.status == "started":  # the key is spent once: a second start finds the first run
            await engine.signal(handle.run_id, "approval", {"approved": True})
        print(await engine.result(handle.run_id, timeout=30))  # ch_o-1, after the 2-second grace


asyncio.run(main())
