"""``install_dashboard(app, client)``: the dashboard's pages, actions, live streams and static files.

Reads go through ``client.inspector`` (or the ``reads`` Inspector over a standby, whose lag every
page shows) and actions through the client's verbs, as the API's do.
Every page is plain HTML that reads without JavaScript; ``static/dashboard.js`` adds partial
updates and Server-Sent Events on top.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from ..facades import Client
from ..inspect import Inspector
from .actions import router as actions
from .live import router as live
from .pages import router as pages
from .render import environment
from .schedules import router as schedules
from .site import DASHBOARD_PREFIX, Dashboard, measure_lag
from .tokens import router as tokens

__all__ = ["install_dashboard"]


def install_dashboard(
    app: FastAPI, client: Client, *, prefix: str = DASHBOARD_PREFIX, reads: Inspector | None = None
) -> None:
    """Serve the dashboard over ``client`` under ``prefix`` of ``app``; ``/`` leads to its runs list.

    ``reads``: an Inspector over a read store (``open_read_store``): pages read there, but the
    page an action leads to, and show its lag."""
    app.state.lockgate_dashboard = Dashboard(client, environment(), prefix, reads)
    app.mount(f"{prefix}/static", StaticFiles(packages=[("lockgate.dashboard", "static")]), name="dashboard-static")
    lag = [Depends(measure_lag)] if reads is not None else []
    for router in (pages, schedules, actions, tokens, live):
        app.include_router(router, prefix=prefix, include_in_schema=False, dependencies=lag)

    @app.get("/", include_in_schema=False)
    @app.get(prefix, include_in_schema=False)
    @app.get(f"{prefix}/", include_in_schema=False)
    async def home(request: Request) -> RedirectResponse:
        return RedirectResponse(str(request.scope.get("root_path", "")) + f"{prefix}/runs", status_code=307)
