"""The OpenAPI document: FastAPI's own, with every error answer described as the problem+json it is."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .models import Problem
from .problems import PROBLEM_JSON

__all__ = ["install_openapi"]

_ERRORS = {
    "401": "No token, or a wrong one",
    "403": "The read token cannot operate",
    "404": "Unknown run, ticket, event or workflow",
    "409": "The verb is refused in the current state",
    "413": "Request body too large",
    "422": "Invalid parameter or body (the field is named)",
    "503": "The store is unreachable",
}


def install_openapi(app: FastAPI) -> None:
    """Build ``app``'s document once, with the problem answers of every operation."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        problem = {"content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for status, description in _ERRORS.items():
                    responses[status] = {"description": description, **problem}
        app.openapi_schema = spec
        return spec

    app.openapi = document  # type: ignore[method-assign]
