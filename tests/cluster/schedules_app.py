"""An every-second schedule that ``lockgate serve`` processes fire in the cluster schedule test."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Slot(BaseModel):
    at: str


def slot_payload(scheduled_at: datetime) -> dict[str, str]:
    return {"at": scheduled_at.isoformat()}


@app.workflow(name="cluster.tick")
async def tick(ctx: lg.Context, p: Slot) -> str:
    return p.at


# Buffered, so a slot whose predecessor's run is held by a killed worker waits for it instead of standing down.
app.schedule("every-second", workflow=tick, every="1s", payload=slot_payload, on_overlap="buffer", buffer_limit=1000)
