"""The live dashboard: server-rendered pages over the inspect layer, served beside the HTTP API.

``install_dashboard(app, client)`` adds it to a FastAPI app (``create_app`` does, under
``/ui``). Pages read without JavaScript; ``static/dashboard.js`` adds partial updates and
Server-Sent Events. See docs/dashboard.md.
"""

from __future__ import annotations

from .app import install_dashboard
from .runs_filter import RunFilter, RunsPage, fetch_runs
from .session import DashboardSession
from .site import DASHBOARD_PREFIX

__all__ = ["DASHBOARD_PREFIX", "DashboardSession", "RunFilter", "RunsPage", "fetch_runs", "install_dashboard"]
