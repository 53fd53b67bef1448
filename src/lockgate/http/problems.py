"""Errors as RFC 9457 ``application/problem+json`` documents named after the typed error.

Each lockgate error maps to one status: an unknown run or ticket is 404, a verb the run's
state refuses is 409, a bad argument or body is 422, an unreachable store is 503.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from ..errors import (
    BlockingStartRefused,
    EngineClosed,
    InvalidArgument,
    LockgateError,
    PayloadError,
    ResultTimeout,
    RunNotEligible,
    ScheduleExists,
    ScheduleNotOwned,
    SingletonHeld,
    StoreError,
    UnknownRun,
    UnknownSchedule,
    UnknownWorkflow,
    UpdateFailed,
)

__all__ = ["PROBLEM_JSON", "ApiProblem", "install_problem_handlers", "problem_response", "status_of"]

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("lockgate.http")

_STATUS: list[tuple[type[Exception], int]] = [
    (UnknownRun, 404),
    (UnknownSchedule, 404),
    (ScheduleExists, 409),
    (ScheduleNotOwned, 409),
    (UnknownWorkflow, 404),
    (RunNotEligible, 409),
    (SingletonHeld, 409),
    (BlockingStartRefused, 409),
    (UpdateFailed, 409),
    (PayloadError, 422),
    (InvalidArgument, 422),
    (ResultTimeout, 504),
    (StoreError, 503),
    (EngineClosed, 503),
]

_TITLES = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class ApiProblem(Exception):
    """A refusal decided by the API itself (an unknown ticket, a missing token, ...)."""

    def __init__(self, status: int, name: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.name = name
        self.detail = detail


def status_of(exc: LockgateError) -> int:
    """The HTTP status of a lockgate error: 409 for any other refusal of a verb."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 409


def problem_response(
    status: int, name: str, detail: str | None, *, instance: str | None = None, **extra: Any
) -> JSONResponse:
    """A problem+json response whose ``type`` is ``urn:lockgate:error:<name>``."""
    body: dict[str, Any] = {
        "type": f"urn:lockgate:error:{name}",
        "title": _TITLES.get(status, name),
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(jsonable_encoder(body), status_code=status, media_type=PROBLEM_JSON)


def _field_error(error: Any) -> dict[str, Any]:
    """One validation error as ``{"field", "message"}``: a body that is not JSON names the body."""
    if error.get("type") == "json_invalid":  # its loc is ("body", <character offset>), not a field
        where = [p for p in error.get("loc", ()) if p != "body"]
        at = f" at character {where[0]}" if where else ""
        reason = (error.get("ctx") or {}).get("error")
        return {"field": "body", "message": f"malformed JSON{at}" + (f": {reason}" if reason else "")}
    field = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    return {"field": field, "message": error.get("msg")}


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document (no traceback ever leaves the process)."""

    async def on_api_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return problem_response(exc.status, exc.name, exc.detail, instance=request.url.path)

    async def on_lockgate(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, LockgateError)
        return problem_response(status_of(exc), type(exc).__name__, str(exc), instance=request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [_field_error(e) for e in exc.errors()]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem_response(422, "InvalidRequest", detail, instance=request.url.path, errors=errors)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        name = "NotFound" if exc.status_code == 404 else _TITLES.get(exc.status_code, "HTTPError").replace(" ", "")
        response = problem_response(exc.status_code, name, str(exc.detail), instance=request.url.path)
        response.headers.update(exc.headers or {})  # a 405's Allow, above all
        return response

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, OSError):  # the database went away below the store's own errors
            return problem_response(503, "StoreError", f"store unreachable: {exc}", instance=request.url.path)
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, type(exc).__name__, "internal error (logged)", instance=request.url.path)

    app.add_exception_handler(ApiProblem, on_api_problem)
    app.add_exception_handler(LockgateError, on_lockgate)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
