"""The test broker's server socket: the TCP listener, TLS on top of it when asked, and closing streams quietly."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Tuple

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener

from ._broker_model import Tally

__all__ = ["CountingTLSListener", "aclose_quietly", "open_listener"]

log = logging.getLogger("stompfast.testing")


async def aclose_quietly(stream: Any) -> None:
    """Close ``stream`` quietly, shielded from cancellation and bounded (1 s)."""
    with anyio.move_on_after(1, shield=True):
        with contextlib.suppress(Exception):
            await stream.aclose()


class CountingTLSListener(TLSListener):
    """anyio's TLS listener, counting failed handshakes instead of logging them as errors."""

    def __init__(self, listener: Any, ssl_context: Any, tally: Tally) -> None:
        # Brokers close without close_notify, and so may this one's clients.
        super().__init__(listener, ssl_context, standard_compatible=False, handshake_timeout=10)
        self._tally = tally

    async def handle_handshake_error(  # type: ignore[override]  # (a staticmethod in anyio; ours counts)
        self, exc: BaseException, stream: Any
    ) -> None:
        self._tally.count("tls_handshake_failed")
        log.debug("stompfast.testing: TLS handshake failed: %r", exc)
        await aclose_quietly(stream)
        if not isinstance(exc, Exception):
            raise exc


async def open_listener(host: str, port: int, ssl_context: Any, tally: Tally) -> Tuple[Any, int]:
    """Listen on ``host:port`` (TLS over it with ``ssl_context``); return the listener and the port it got."""
    listener: Any = await anyio.create_tcp_listener(local_host=host, local_port=port)
    bound = listener.extra(SocketAttribute.local_port)
    if ssl_context is not None:
        listener = CountingTLSListener(listener, ssl_context, tally)
    return listener, bound
