"""Every frame in and out at DEBUG on the ``stompfast.frames`` logger, for debugging a session.

Off unless that logger is enabled for DEBUG: each read and each socket write
then asks ``frame_log.isEnabledFor(DEBUG)`` once (not once per frame), and
nothing else happens. When on, the bytes are scanned again by a scanner of
their own per direction (the session's scanner is never touched), and each
frame is logged as one line::

    127.0.0.1:61613 > SEND destination:/queue/a content-length:5 (5 bytes: b'hello')
    127.0.0.1:61613 < MESSAGE subscription:0 message-id:T_0@@session-1@@1 ... (5 bytes: b'hello')

A ``passcode`` header is never logged (shown as ``***``), and bodies are
never logged in full: their size and at most ``BODY_PREVIEW`` bytes. Heart-beat
EOLs are not logged. Logging that starts in the middle of a session may begin
in the middle of a frame: those bytes are reported by size and the scan starts
over at the next read.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional

from ._scanner import FrameScanner
from .errors import ProtocolError

__all__ = ["BODY_PREVIEW", "FrameLog", "frame_log"]

#: Frames in (``<``) and out (``>``), at DEBUG.
frame_log = logging.getLogger("stompfast.frames")
#: Body bytes shown per frame at most.
BODY_PREVIEW = 64
#: Header values shown up to this many characters.
VALUE_PREVIEW = 200
_HIDDEN = ("passcode",)


class FrameLog:
    """One connection's frame log: a scanner per direction (thread-safe: a blocking client's thread writes too)."""

    __slots__ = ("peer", "scanners", "lock")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.scanners: Dict[str, FrameScanner] = {}
        self.lock = threading.Lock()

    def feed(self, direction: str, data: bytes, version: Optional[str] = None) -> None:
        """Log the frames of ``data`` (``direction``: ``<`` received, ``>`` sent)."""
        with self.lock:
            scanner = self.scanners.get(direction)
            if scanner is None:
                scanner = self.scanners[direction] = FrameScanner(version=version or "1.2")
            elif version is not None and scanner.version != version:
                scanner.version = version
            try:
                frames = scanner.feed(data)
            except ProtocolError as exc:
                del self.scanners[direction]
                frame_log.debug("%s %s %d bytes that do not scan as frames (%s)", self.peer, direction, len(data), exc)
                return
        for frame in frames:
            line = describe_frame(frame.command, frame.header_list, frame.body)
            frame_log.debug("%s %s %s", self.peer, direction, line)


    def tap(self, protocol: Any) -> Callable[[str, bytes], None]:
        """``log(direction, data)`` for a connection's outbox and inbox: :meth:`feed` at ``protocol``'s version.

        The callable holds this log and the session only, not the connection that
        owns them, so a lost connection is freed by reference counting.
        """

        def log(direction: str, data: bytes) -> None:
            self.feed(direction, data, protocol.version)

        return log


def describe_frame(command: str, headers: object, body: bytes) -> str:
    """One line for a frame: command, headers (passcode hidden), body size and preview."""
    parts = [command]
    for name, value in headers:  # type: ignore[attr-defined]
        if name in _HIDDEN:
            value = "***"
        elif len(value) > VALUE_PREVIEW:
            value = value[:VALUE_PREVIEW] + "..."
        parts.append(f"{name}:{value}")
    if body:
        preview = bytes(body[:BODY_PREVIEW])
        more = "..." if len(body) > BODY_PREVIEW else ""
        parts.append(f"({len(body)} bytes: {preview!r}{more})")
    return " ".join(parts)
