"""The request body's limits, enforced while the body is read: ASGI middleware in front of the app.

Size: a body whose declared ``content-length`` is over the limit is answered 413 before any of it
is read; a streamed (chunked) body is counted as it arrives and cut off at the limit. Time: the
whole body must arrive within ``timeout_s`` of the app asking for it (a client sending a byte every
few seconds is answered 408 and its connection closed, one warning line); the headers' own
deadline is the protocol's (``timeouts.py``). The first step of parsing a request
(``request.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from toolbox.serving.openai.errors import APIError

log = logging.getLogger(__name__)


class BodyTooLarge(APIError):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            413,
            f"the request body is larger than this server's limit of {max_bytes} bytes "
            "(--max-request-bytes); send a shorter prompt",
            "invalid_request_error",
            None,
            "request_too_large",
        )


class BodyTooSlow(APIError):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408,
            f"the request body did not arrive within {timeout_s:g} s (--body-timeout); send it at once",
            "invalid_request_error",
            None,
            "request_timeout",
        )


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` (declared or streamed) is answered 413
    without being read further; one that takes longer than ``timeout_s`` to arrive, 408."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, BodyTooLarge(self.max_bytes))
            return
        seen = 0
        body_done = False
        deadline: float | None = None
        loop = asyncio.get_running_loop()

        async def limited() -> Any:
            nonlocal seen, body_done, deadline
            if body_done or self.timeout_s is None:  # after the body: waiting for a disconnect
                return await receive()
            if deadline is None:
                deadline = loop.time() + self.timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                client = scope.get("client") or ("?", 0)
                log.warning(
                    "%s:%s sent %d bytes of its request body to %s in %g s, then too slowly: answered 408",
                    *client[:2], seen, scope.get("path"), self.timeout_s,
                )  # fmt: skip
                raise BodyTooSlow(self.timeout_s) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except (BodyTooLarge, BodyTooSlow) as e:  # raised where no handler answered it
            if not started:
                await self._refuse(send, e)

    async def _refuse(self, send: Any, e: APIError) -> None:
        body = json.dumps(e.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": e.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
