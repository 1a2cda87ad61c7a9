"""The errors ``toolbox serve`` answers, as OpenAI-style bodies ``{"error": {"message", "type", "param",
"code"}}``, and the HTTP status of each engine exception.

400 a request the server cannot serve (malformed JSON, a bad or unknown field, a prompt longer than
the context), 401 without the API key, 404 an unknown model or route, 405 a wrong method, 413 a body
over the size limit, 429 the engine's queue is full, 503 shutting down, 500 a bug (no traceback).
Messages speak of the request, never of the server's internals.
"""

from __future__ import annotations

from typing import Any

from toolbox.serving.engine import (
    EngineClosedError,
    EngineError,
    GrammarError,
    PromptTooLongError,
    QueueFullError,
)


class APIError(Exception):
    """An error answered as an OpenAI-style body."""

    def __init__(
        self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type_: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def engine_error(e: BaseException) -> APIError:
    """The HTTP answer to an engine's exception."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, QueueFullError):
        return APIError(429, str(e), "rate_limit_error", None, "queue_full")
    if isinstance(e, EngineClosedError):
        return APIError(503, str(e), "service_unavailable", None, "shutting_down")
    if isinstance(e, PromptTooLongError):
        return bad_request(str(e), "prompt", "context_length_exceeded")
    if isinstance(e, GrammarError):
        return bad_request(str(e), str(e).split(":", 1)[0], "invalid_schema")
    if isinstance(e, ValueError):
        message = str(e)
        param = message.split(":", 1)[0] if ":" in message and " " not in message.split(":", 1)[0] else None
        return bad_request(message, param)
    if isinstance(e, EngineError):
        return APIError(500, str(e), "server_error", None, "engine_error")
    return APIError(500, "internal server error", "server_error", None, None)


# the error body, for the published OpenAPI document
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
