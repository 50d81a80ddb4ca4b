"""A deliberately dumb STOMP client over a raw anyio socket, for testing the broker.

It encodes with ``encode_frame`` and decodes with ``FrameScanner``, keeps every
received frame in arrival order, and counts heart-beat EOLs. Nothing is
automatic: the tests say exactly which frames go out and which must come back.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, List, Mapping, Sequence, Tuple, Union

import anyio

from stompfast import FrameScanner, encode_frame
from stompfast.frames import Frame

Headers = Union[Mapping[str, str], Sequence[Tuple[str, str]]]
TIMEOUT = 3.0


class Closed(Exception):
    """The broker closed the connection (EOF or reset)."""


class RawClient:
    def __init__(self, stream: Any, version: str = "1.2") -> None:
        self.stream = stream
        self.version = version
        self.scanner = FrameScanner(version=version)
        self.frames: Deque[Frame] = deque()
        self.eols = 0  # heart-beat EOLs received between frames
        self.eol_times: List[float] = []
        self.raw = bytearray()  # every byte received
        self.eof = False

    @classmethod
    async def open(cls, port: int, version: str = "1.2") -> "RawClient":
        stream = await anyio.connect_tcp("127.0.0.1", port)
        return cls(stream, version)

    @classmethod
    async def connected(cls, port: int, version: str = "1.2", **headers: str) -> "RawClient":
        """Open, CONNECT with ``accept-version:<version>`` and expect CONNECTED."""
        client = await cls.open(port, version)
        hdrs = {"accept-version": version, "host": "/"}
        hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
        await client.send("CONNECT", hdrs)
        frame = await client.expect("CONNECTED")
        assert frame.headers["version"] == version
        return client

    async def send(self, command: str, headers: Headers = (), body: bytes = b"") -> None:
        await self.stream.send(encode_frame(command, headers, body, version=self.version))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def _read(self) -> None:
        if self.eof:
            raise Closed("connection closed")
        try:
            data = await self.stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            self.eof = True
            raise Closed("connection closed") from None
        self.raw += data
        was_between = self.scanner.buffered == 0
        frames = self.scanner.feed(data)
        if not frames and was_between and self.scanner.buffered == 0 and not data.strip(b"\r\n"):
            self.eols += data.count(b"\n")
            self.eol_times.extend([anyio.current_time()] * data.count(b"\n"))
        self.frames.extend(frames)

    async def recv(self, timeout: float = TIMEOUT) -> Frame:
        """The next frame (heart-beats skipped); ``Closed`` if the broker closes first."""
        with anyio.fail_after(timeout):
            while not self.frames:
                await self._read()
        return self.frames.popleft()

    async def expect(self, command: str, timeout: float = TIMEOUT, **headers: str) -> Frame:
        """The next frame, which must be ``command`` with at least these headers (``_`` = ``-``)."""
        frame = await self.recv(timeout)
        assert frame.command == command, f"expected {command}, got {frame!r}"
        for name, value in headers.items():
            name = name.replace("_", "-")
            assert frame.headers.get(name) == value, f"{name}: expected {value!r} in {frame!r}"
        return frame

    async def receipt(self, command: str, headers: Headers = (), body: bytes = b"", rid: str = "r",
                      keep_messages: bool = False) -> None:
        """Send a frame with ``receipt:<rid>`` and expect its RECEIPT as the very next frame.

        With ``keep_messages``, MESSAGE frames that come before the RECEIPT (e.g. the
        deliveries a SUBSCRIBE causes) are allowed and kept for :meth:`recv`."""
        await self.send(command, list(dict(headers).items()) + [("receipt", rid)], body)
        kept = []
        while True:
            frame = await self.recv()
            if keep_messages and frame.command == "MESSAGE":
                kept.append(frame)
                continue
            assert frame.command == "RECEIPT" and frame.headers.get("receipt-id") == rid, frame
            break
        self.frames.extendleft(reversed(kept))

    async def sync(self, rid: str = "sync") -> None:
        """A barrier: everything the broker queued for us before now arrives before this returns.

        Uses BEGIN + ABORT of a fresh transaction with a receipt (harmless on any broker)."""
        await self.send("BEGIN", {"transaction": rid})
        await self.receipt("ABORT", {"transaction": rid}, rid=rid)

    async def read_for(self, seconds: float) -> None:
        """Keep reading for ``seconds`` (frames are kept; heart-beat EOLs counted as they arrive)."""
        with anyio.move_on_after(seconds):
            while True:
                await self._read()

    async def messages(self, n: int, timeout: float = TIMEOUT) -> List[Frame]:
        out = [await self.expect("MESSAGE", timeout) for _ in range(n)]
        return out

    async def expect_closed(self, timeout: float = TIMEOUT) -> List[Frame]:
        """Read until the broker closes; returns the frames received meanwhile."""
        got = list(self.frames)
        self.frames.clear()
        with anyio.fail_after(timeout):
            while True:
                try:
                    await self._read()
                except Closed:
                    break
                got.extend(self.frames)
                self.frames.clear()
        return got

    async def expect_error(self, message: str, timeout: float = TIMEOUT, **headers: str) -> Frame:
        """An ERROR with this ``message`` header, then the connection closes."""
        frames = await self.expect_closed(timeout)
        assert [f.command for f in frames] == ["ERROR"], frames
        frame = frames[0]
        assert frame.headers["message"] == message, frame
        for name, value in headers.items():
            name = name.replace("_", "-")
            assert frame.headers.get(name) == value, f"{name}: expected {value!r} in {frame!r}"
        return frame

    async def aclose(self) -> None:
        with anyio.move_on_after(1, shield=True):
            await self.stream.aclose()

    async def __aenter__(self) -> "RawClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def ack_headers(version: str, message: Frame) -> dict:
    """The ACK/NACK headers for ``message`` per version (1.0 message-id; 1.1 + subscription; 1.2 id)."""
    if version == "1.2":
        return {"id": message.headers["ack"]}
    h = {"message-id": message.headers["message-id"]}
    if version == "1.1":
        h["subscription"] = message.headers["subscription"]
    return h
