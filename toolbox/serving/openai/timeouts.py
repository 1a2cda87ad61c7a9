"""The header deadline of ``toolbox serve``'s connections: uvicorn's h11 protocol with a timer.

uvicorn closes a kept-alive connection that stays idle, but not one that trickles: a client that
sends a request's headers a byte every two seconds (slowloris) held its connection, and 500 such
clients 500 of them, indefinitely. Here every request's headers must be complete within
``header_timeout`` seconds of the connection opening, or of the first byte of a following request
on a kept-alive connection: otherwise the server answers 408 and closes the connection (one
warning line). The body has its own deadline (``body_limit.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 33\r\n"
    b"connection: close\r\n\r\nthe request headers came too slow"
)


def guarded_h11(header_timeout: float) -> type:
    """uvicorn's ``H11Protocol`` whose request headers must arrive within ``header_timeout`` s."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # (part of) a request's headers, not yet all
                self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:  # from the first byte: more bytes do not push it back
                self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a response is still being sent: the next request's clock starts after it
            client = self.client or ("?", 0)
            log.warning(
                "%s:%s did not send complete request headers within %g s (--header-timeout): "
                "answered 408, connection closed",
                *client[:2],
                header_timeout,
            )
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    return GuardedH11Protocol
