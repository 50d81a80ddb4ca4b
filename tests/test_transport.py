"""The I/O edge's messages: what a ConnectionLostError says on every backend.

Runs on asyncio, asyncio+uvloop and trio (the ``anyio_backend`` fixture). The
broker here is a raw socket in a thread, so that it can do what the in-process
broker never does: reset the connection.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading

import anyio
import pytest

from stompfast import AsyncClient, ConnectionLostError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5


class ResettingBroker:
    """Answers one CONNECT with CONNECTED, then, when told, closes with SO_LINGER 0 (a TCP RST)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reset = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "ResettingBroker":
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.reset.set()
        self.thread.join(WAIT)
        self.listener.close()

    def _serve(self) -> None:
        self.listener.settimeout(WAIT)
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(WAIT)
            data = b""
            while b"\x00" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
            self.reset.wait(WAIT)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def test_a_reset_connection_says_connection_reset_on_every_backend(anyio_backend):
    with ResettingBroker() as broker:
        client = AsyncClient(f"stomp://127.0.0.1:{broker.port}/", reconnect=False, heart_beat=(0, 0))
        async with client:
            broker.reset.set()
            with anyio.fail_after(WAIT):
                while client.error is None:
                    await anyio.sleep(0.01)
            error = client.error
    assert isinstance(error, ConnectionLostError)
    message = str(error)
    # asyncio's ConnectionResetError says so itself; on trio, anyio's BrokenResourceError
    # (no message) was raised from it, and the message used to be just the type's name
    assert os.strerror(errno.ECONNRESET) in message, message  # "Connection reset by peer"
    assert "BrokenResourceError" not in message
    if anyio_backend[0] == "trio":  # Transport.receive: raise ... from the anyio error
        cause = error.__cause__
        assert isinstance(cause, anyio.BrokenResourceError)
        assert isinstance(cause.__cause__, ConnectionResetError)
