"""``Dashboard``: what every page, action and live stream of the dashboard renders with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment

from .. import __version__
from ..clock import to_datetime
from ..facades import Client
from ..inspect import Inspector, ReplicaLag
from .render import span
from .session import READ_ONLY

__all__ = ["AFTER_ACTION", "DASHBOARD_PREFIX", "NAV", "Dashboard", "dashboard", "lag_text", "measure_lag"]

AFTER_ACTION = ("done", "unpaused")
"""Query parameters of the page an action leads to: that page must show the action, so it reads the write store."""

DASHBOARD_PREFIX = "/ui"

NAV = (
    ("runs", "Runs"),
    ("flow", "Flow"),
    ("why", "Why"),
    ("events", "Events"),
    ("schedules", "Schedules"),
    ("cluster", "Cluster"),
)


@dataclass(frozen=True)
class Dashboard:
    """What every dashboard route needs: the client, the inspector pages read with and the templates.

    ``reads``: an Inspector over a read store (a standby of the client's store), or ``None``.
    """

    client: Client
    env: Environment
    prefix: str
    reads: Inspector | None = None

    @property
    def inspector(self) -> Inspector:
        """Where pages read: the read store when there is one, else the client's store."""
        return self.reads or self.client.inspector

    def reading(self, query: Mapping[str, str]) -> Inspector:
        """Where the page of ``query`` reads: the write store on the page an action leads to (a standby
        may not have replayed the action yet), else ``inspector``."""
        if self.reads is not None and any(name in query for name in AFTER_ACTION):
            return self.client.inspector
        return self.inspector

    def now(self) -> datetime:
        found = to_datetime(self.inspector.clock.now())
        assert found is not None
        return found

    def base(self, request: Request) -> str:
        """The dashboard's path as the browser sees it (under whatever the app is mounted at)."""
        return str(request.scope.get("root_path", "")) + self.prefix

    def html(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """``template`` rendered with the common context (links, clock, navigation)."""
        return HTMLResponse(self.fragment(request, template, **context), status_code=status)

    def fragment(self, request: Request, template: str, **context: Any) -> str:
        page = {
            "ui": self.base(request),
            "now": self.now(),
            "nav": NAV,
            "version": __version__,
            "read_only": bool(request.scope.get("state", {}).get(READ_ONLY)),
            "standby": request.scope.get("state", {}).get(LAG),
        }
        return self.env.get_template(template).render(**page, **context)


LAG = "lockgate_lag"  # the request state's key for the read store's lag, as text


def lag_text(lag: ReplicaLag) -> str:
    """The read store's lag as the header of every page shows it."""
    if lag.bytes_behind == 0:
        return "caught up"
    if lag.seconds is None:
        return "lag unknown (the write store did not answer)" if lag.bytes_behind is None else "lag unknown"
    return f"{span(lag.seconds)} behind ({lag.bytes_behind} bytes of WAL)"


async def measure_lag(request: Request) -> None:
    """Before a route of the dashboard runs, with a read store: measure its lag, which every page shows."""
    reads = dashboard(request).reads
    if reads is not None:
        lag = await reads.replica_lag()
        if lag is not None:
            request.scope.setdefault("state", {})[LAG] = lag_text(lag)


def dashboard(request: Request) -> Dashboard:
    """The dashboard ``install_dashboard`` put on the app's state."""
    found: Dashboard = request.app.state.lockgate_dashboard
    return found
