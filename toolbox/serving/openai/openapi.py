"""The OpenAPI document ``toolbox serve`` publishes at ``/openapi.json``.

The request bodies are validated by ``request`` (not by FastAPI, which would answer 422 in
its own shape), so the document is FastAPI's with the bodies and every status a route answers put
in: the pydantic schemas of ``protocol`` (with ``model`` the one served), and the errors in
OpenAI's shape. What the validator refuses the document refuses too, so a schema-driven client
(schemathesis, ``tests/serving/openai/test_server_schema.py``) finds valid requests accepted.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from toolbox.serving.openai.errors import ERROR_SCHEMA
from toolbox.serving.openai.protocol import ChatCompletionRequest, CompletionRequest

# the document ----------------------------------------------------------------------------
_ERRORS = {
    "400": "the request cannot be served: malformed JSON, a bad or unknown field, a prompt too long",
    "401": "the API key is missing or wrong",
    "404": "the model does not exist",
    "408": "the body took longer than the server's body timeout to arrive",
    "413": "the body is larger than the server's limit, or holds more values than the model can use",
    "429": "the engine's queue is full; retry later",
    "503": "the server is shutting down",
}


def _closed(schema: Any) -> Any:
    """pydantic writes a dict with constrained keys as ``patternProperties`` alone, which admits any
    other key; the validator does not, so the document says so (``additionalProperties: false``)."""
    if isinstance(schema, dict):
        if "patternProperties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)
    return schema


def openapi_document(app: FastAPI, model_name: str) -> dict[str, Any]:
    """FastAPI's document with the request bodies (validated by ``request``, not by FastAPI)
    and every status each route answers, errors in OpenAI's shape."""
    if app.openapi_schema:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, model in (
        ("/v1/completions", CompletionRequest),
        ("/v1/chat/completions", ChatCompletionRequest),
    ):
        schema = _closed(model.model_json_schema(ref_template="#/components/schemas/{model}"))
        schemas.update(schema.pop("$defs", {}))
        schema["properties"]["model"]["enum"] = [model_name]
        schemas[model.__name__] = schema
        op = doc["paths"][path]["post"]
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
        op["responses"] = {
            "200": {
                "description": "the completion (JSON), or with stream: true its chunks (text/event-stream)",
                "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}},
            },
            **{code: {"description": text, "content": error} for code, text in _ERRORS.items()},
        }
    for path in ("/v1/models",):
        doc["paths"][path]["get"]["responses"]["401"] = {"description": _ERRORS["401"], "content": error}
    app.openapi_schema = doc
    return doc
