"""The request body's size limit, enforced while the body is read: ASGI middleware in front of the app.

A body whose declared ``content-length`` is over the limit is answered 413 before any of it is
read; a streamed (chunked) body is counted as it arrives and cut off at the limit. The first step
of parsing a request (``request.py``).
"""

from __future__ import annotations

import json
from typing import Any

from toolbox.serving.openai.errors import APIError


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared or streamed) is answered 413
    without being read further."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        refused = False

        async def limited() -> Any:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    raise _TooLarge
            return message

        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)
        except Exception:
            if not refused:
                raise
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(
            APIError(
                413,
                f"the request body is larger than this server's limit of {self.max_bytes} bytes "
                "(--max-request-bytes); send a shorter prompt",
                "invalid_request_error",
                None,
                "request_too_large",
            ).body()
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
