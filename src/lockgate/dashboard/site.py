"""``Dashboard``: what every page, action and live stream of the dashboard renders with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment

from .. import __version__
from ..clock import to_datetime
from ..facades import Client
from ..inspect import Inspector
from .session import READ_ONLY

__all__ = ["DASHBOARD_PREFIX", "NAV", "Dashboard", "dashboard"]

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
    """What every dashboard route needs: the client, its inspector and the templates."""

    client: Client
    env: Environment
    prefix: str

    @property
    def inspector(self) -> Inspector:
        return self.client.inspector

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
        }
        return self.env.get_template(template).render(**page, **context)


def dashboard(request: Request) -> Dashboard:
    """The dashboard ``install_dashboard`` put on the app's state."""
    found: Dashboard = request.app.state.lockgate_dashboard
    return found
