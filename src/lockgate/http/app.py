"""``create_app(client)``: the HTTP inspect-and-operate API as a FastAPI app.

Reads go through ``client.inspector`` (or the ``reads`` Inspector over a standby) and actions
through the client's verbs; the app opens and closes nothing, so the caller keeps the client
(and the read store) open while the app serves.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from .. import __version__
from ..dashboard import DASHBOARD_PREFIX, DashboardSession, install_dashboard
from ..facades import Client
from ..inspect import Inspector
from .callbacks import install_callbacks
from .head import HeadAsGet
from .hooks import install_hooks
from .metrics import CONTENT_TYPE_LATEST, StoreMetrics
from .openapi import install_openapi
from .problems import install_problem_handlers
from .reads import router as read_routes
from .replay import router as replay
from .schedules import router as schedules
from .security import AccessPolicy, GuardMiddleware
from .streams import STREAM_PATH, StreamCors, origins_from_env, stream_token_of
from .streams import router as streams
from .verbs import router as verbs

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"


def create_app(
    client: Client,
    *,
    policy: AccessPolicy | None = None,
    dashboard: bool = True,
    cluster_metrics: bool | Callable[[], bool] = True,
    reads: Inspector | None = None,
    stream_origins: Sequence[str] | None = None,
) -> FastAPI:
    """The API over an open ``client``, under ``/api/v1``, with ``/metrics`` beside it.

    ``policy`` holds the tokens and the body limit (default: from ``LOCKGATE_TOKEN`` and
    ``LOCKGATE_TOKEN_READ``, 1 MiB). No CORS headers are sent: mount it behind your own
    middleware to allow a browser origin. ``dashboard`` serves the pages of docs/dashboard.md
    under ``/ui`` (``/`` leads there). ``/metrics`` serves this process's own metrics
    (collected from now on) and, where ``cluster_metrics`` is (or answers) true, the gauges
    sampled from the store, which are the same on every replica.

    ``reads``: an ``Inspector`` over a read store (``open_read_store``: a streaming standby of the
    client's store). The read routes, the dashboard's pages and ``/metrics`` then read there, and
    ``/healthz`` and every dashboard page show its lag; verbs, their answers and what must show
    them stay on the client's store (docs/postgres.md, "Reads off a standby").
    ``stream_origins`` (default: ``LOCKGATE_STREAM_ORIGINS``) are the browser origins that may read
    run streams (docs/streams.md).
    """
    policy = policy or AccessPolicy.from_env()
    app = FastAPI(
        title="lockgate",
        version=__version__,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    app.state.lockgate_client = client
    inspector = reads or client.inspector
    app.state.lockgate_inspector = inspector
    reports = cluster_metrics if callable(cluster_metrics) else (lambda: cluster_metrics)
    metrics = StoreMetrics(inspector, reports, client.core.metrics().registry)
    app.state.lockgate_metrics = metrics
    install_problem_handlers(app)
    api = APIRouter(prefix=API_PREFIX)
    api.include_router(read_routes)
    api.include_router(schedules)
    api.include_router(verbs)
    api.include_router(replay)
    api.include_router(streams)  # GET /runs/{id}/stream: Server-Sent Events, stream tokens (http/streams.py)
    app.include_router(api)
    install_hooks(app, client)  # POST /hooks/{name}: signed by each provider, not by the API's token
    install_callbacks(app, client)  # /callbacks/{token}: the token is the credential

    @app.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)

    if dashboard:
        install_dashboard(app, client, reads=reads)
    install_openapi(app)
    app.add_middleware(GuardMiddleware, policy=policy, let_through=_presents_stream_token)
    app.add_middleware(StreamCors, origins=origins_from_env() if stream_origins is None else stream_origins)
    if dashboard:  # outside the guard: a browser signs in with a cookie the guard then sees as a token
        app.add_middleware(DashboardSession, policy=policy, prefix=DASHBOARD_PREFIX)
    app.add_middleware(HeadAsGet)  # outermost: the guard and the session see a HEAD as the read it is
    return app


def _presents_stream_token(scope: MutableMapping[str, Any]) -> bool:
    """A read of the stream endpoint with a stream token: its route checks the token."""
    return bool(STREAM_PATH.search(str(scope.get("path", "")))) and stream_token_of(scope) is not None
