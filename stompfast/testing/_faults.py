"""What the fault proxy injects and where: directions, :class:`Trigger`, the fault marker, the frame counter.

:class:`Trigger` (public as ``stompfast.testing.Trigger``) says when a one-shot
fault fires on a link; :class:`Fault` is the marker the proxy queues in a
direction's buffer where it fires; :class:`FrameCounter` finds where STOMP frames
start in a byte stream, so that a frame trigger can be placed. How the proxy
uses them is the docstring of ``_proxy.py`` (the theory of operation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

__all__ = ["DIRECTIONS", "DOWN", "UP", "Fault", "FrameCounter", "Trigger"]

UP = "up"
DOWN = "down"
DIRECTIONS = (UP, DOWN)
#: A header block longer than this stops the frame counting of a direction.
MAX_HEAD = 1 << 20
END_OF_HEAD = re.compile(rb"\n\r?\n")
CONTENT_LENGTH = re.compile(rb"\ncontent-length:([^\r\n]*)")
EOL = b"\r\n"


@dataclass(frozen=True)
class Trigger:
    """When a one-shot fault (reset or half-close) fires on each link.

    Give exactly one of ``bytes``, ``seconds``, ``frame`` or ``command``:

    * ``Trigger(bytes=N, direction="down")``: after the first ``N`` bytes of
      that direction have been forwarded (``bytes=0``: before anything is).
    * ``Trigger(seconds=2.0)``: that many seconds after the link opened.
    * ``Trigger(frame=N, direction="down")``: at the start of the ``N``-th
      frame (1-based) of that direction, counting every command; with
      ``command="MESSAGE"`` only frames of that command count
      (``Trigger(command="RECEIPT")`` alone means its first one).
    * ``offset``: with ``frame``/``command``, that many bytes of the matched
      frame are forwarded first, e.g. half of a frame to cut it mid-way.

    ``direction`` is whose bytes or frames are counted and, for a half-close,
    which direction ends (``"up"``: client to broker, ``"down"``: broker to
    client). A frame number already passed when the trigger is set fires at the
    next frame of that kind; a byte count already passed fires at once.
    """

    bytes: Optional[int] = None
    seconds: Optional[float] = None
    frame: Optional[int] = None
    command: Optional[str] = None
    direction: str = DOWN
    offset: int = 0

    def __post_init__(self) -> None:
        given = [name for name in ("bytes", "seconds", "frame") if getattr(self, name) is not None]
        if self.command is not None and self.frame is None:
            object.__setattr__(self, "frame", 1)
            given.append("frame")
        if len(given) != 1:
            raise ValueError(f"a Trigger takes exactly one of bytes, seconds, frame or command, got {given}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be 'up' or 'down', got {self.direction!r}")
        if self.bytes is not None and (not isinstance(self.bytes, int) or self.bytes < 0):
            raise ValueError(f"bytes must be an int >= 0, got {self.bytes!r}")
        if self.seconds is not None and not self.seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds!r}")
        if self.frame is not None and (not isinstance(self.frame, int) or self.frame < 1):
            raise ValueError(f"frame must be an int >= 1, got {self.frame!r}")
        if not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {self.offset!r}")
        if self.offset and self.frame is None:
            raise ValueError("offset applies to frame and command triggers only")


class Fault:
    """A marker in a pipe's buffer: run this fault once everything before it is forwarded."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        # "reset", "half_close", "eof"
        self.kind = kind


class FrameCounter:
    """Finds where STOMP frames start in a byte stream, whatever its chunking, and their commands."""

    __slots__ = ("pos", "state", "start", "head", "remaining", "lost")

    IDLE, HEAD, BODY, TO_NUL = range(4)

    def __init__(self) -> None:
        # Stream offset of the next byte fed
        self.pos = 0
        self.state = self.IDLE
        # Stream offset of the frame being read
        self.start = 0
        # A header block split across reads
        self.head = bytearray()
        self.remaining = 0
        self.lost = False

    @property
    def pending(self) -> Optional[int]:
        """Stream offset of a frame whose command is not known yet (None if there is none)."""
        if self.state == self.HEAD and not self.lost and b"\n" not in self.head:
            return self.start
        return None

    def feed(self, data: bytes) -> List[Tuple[int, str]]:
        """``(offset, command)`` of every frame whose command line completes in ``data``."""
        found: List[Tuple[int, str]] = []
        base = self.pos
        self.pos += len(data)
        if self.lost:
            return found
        i, n = 0, len(data)
        while i < n:
            state = self.state
            if state == self.IDLE:
                while i < n and data[i] in EOL:
                    i += 1
                if i == n:
                    break
                self.state = self.HEAD
                self.start = base + i
            elif state == self.HEAD:
                if self.head:
                    old = len(self.head)
                    had_line = b"\n" in self.head
                    self.head += data[i:]
                    m = END_OF_HEAD.search(self.head, max(0, old - 2))
                    if m is None:
                        if not had_line and b"\n" in self.head:
                            found.append((self.start, self._command(self.head)))
                        if len(self.head) > MAX_HEAD:
                            self.lost = True
                            self.head = bytearray()
                        break
                    block = bytes(self.head[: m.end()])
                    self.head = bytearray()
                    i += m.end() - old
                    if not had_line:
                        found.append((self.start, self._command(block)))
                else:
                    m = END_OF_HEAD.search(data, i)
                    if m is None:
                        self.head += data[i:]
                        if b"\n" in self.head:
                            found.append((self.start, self._command(self.head)))
                        break
                    block = data[i : m.end()]
                    i = m.end()
                    found.append((self.start, self._command(block)))
                length = CONTENT_LENGTH.search(b"\n" + block)
                value = length.group(1).strip() if length is not None else b""
                if value.isdigit():
                    self.state = self.BODY
                    self.remaining = int(value)
                else:
                    self.state = self.TO_NUL
            elif state == self.BODY:
                take = min(self.remaining, n - i)
                i += take
                self.remaining -= take
                if self.remaining == 0:
                    # The NUL that follows (or, malformed, the next one)
                    self.state = self.TO_NUL
            else:
                k = data.find(b"\0", i)
                if k < 0:
                    break
                i = k + 1
                self.state = self.IDLE
        return found

    @staticmethod
    def _command(block: Union[bytes, bytearray]) -> str:
        return bytes(block[: block.index(b"\n")]).rstrip(b"\r").decode("latin-1")


# Shown as stompfast.testing.Trigger (see the end of _broker.py).
Trigger.__module__ = "stompfast.testing"
