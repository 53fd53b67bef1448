"""A workflow whose schedules are created at runtime: what ``lockgate serve`` serves in the cluster test."""

from __future__ import annotations

from pydantic import BaseModel

import lockgate as lg

app = lg.App()


class Tenant(BaseModel):
    tenant: int


@app.workflow(name="cluster.digest")
async def digest(ctx: lg.Context, p: Tenant) -> int:
    return p.tenant
