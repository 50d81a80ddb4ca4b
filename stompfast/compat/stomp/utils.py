"""stomp.py's ``stomp.utils``: the mutable ``Frame`` listeners receive, and the documented helpers.

``Frame`` is what every listener callback gets and what ``on_send`` may edit: a plain
mutable object (``cmd``, ``headers``, ``original_headers``, ``body``), unlike stompfast's
immutable :class:`stompfast.Frame`. The parsing helpers (``parse_frame``,
``parse_headers``) follow stomp.py's lenient rules; the connection itself parses with
stompfast's scanner instead.
"""

import copy
import os
import re
import socket
import threading
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..._protocol import negotiate_heart_beat
from .constants import *  # noqa: F401,F403
from .constants import HDR_CONTENT_LENGTH

#: host names taken for the local host (``prefer_localhost`` and ``try_loopback_connect`` read it)
LOCALHOST_NAMES = ["localhost", "127.0.0.1"]

NULL = b"\x00"

# stomp.py adds this machine's names unless STOMP_SKIP_HOSTNAME_SCAN is set; so does this module
if not os.environ.get("STOMP_SKIP_HOSTNAME_SCAN"):
    def _local_names() -> Iterator[str]:
        yield socket.gethostbyname(socket.gethostname())
        yield socket.gethostname()
        yield socket.getfqdn(socket.gethostname())

    try:
        LOCALHOST_NAMES.extend(_local_names())
    except Exception:
        pass

#: a header line of stomp.py's parser: ``key:value``
HEADER_LINE_RE = re.compile("(?P<key>[^:]+)[:](?P<value>.*)")
#: the end of a frame's head: LF LF, or CR LF CR LF (1.2)
PREAMBLE_END_RE = re.compile(b"\n\n|\r\n\r\n")
#: a line end: LF, or CR LF (1.2)
LINE_END_RE = re.compile("\n|\r\n")
#: a passcode in a logged frame
PASSCODE_RE = re.compile(r"passcode:\s+[^\' ]+")

_UNESCAPES = {"\\r": "\r", "\\n": "\n", "\\c": ":", "\\\\": "\\"}


def decode(byte_data: Optional[bytes], encoding: str = "utf-8") -> Optional[str]:
    """Decode bytes to ``str`` (undecodable bytes become U+FFFD); ``None`` stays ``None``."""
    if byte_data is None:
        return None
    return byte_data.decode(encoding, errors="replace")


def encode(char_data: Any, encoding: str = "utf-8") -> bytes:
    """Encode a ``str`` (unencodable characters become ``?``); ``bytes`` are returned as they are.

    Raises:
        TypeError: ``char_data`` is neither ``str`` nor ``bytes`` (a ``bytearray`` too, as in stomp.py).
    """
    if type(char_data) is str:
        return char_data.encode(encoding, errors="replace")
    if type(char_data) is bytes:
        return char_data
    raise TypeError("message should be a string or bytes, found %s" % type(char_data))


def pack(pieces: Iterable[bytes] = ()) -> bytes:
    """Join byte strings."""
    return b"".join(pieces)


def join(chars: Iterable[bytes] = ()) -> str:
    """Join byte strings and decode them as UTF-8."""
    return b"".join(chars).decode()


def is_eol_default(c: bytes) -> bool:
    """Whether a received chunk is one heart-beat (a lone LF)."""
    return c == b"\x0a"


def default_create_thread(callback: Callable[[], Any]) -> threading.Thread:
    """Start ``callback`` in a new daemon thread and return the thread (``override_threading`` replaces this)."""
    thread = threading.Thread(None, callback)
    thread.daemon = True
    thread.start()
    return thread


def is_localhost(host_and_port: Tuple[str, int]) -> int:
    """1 when the host is one of :data:`LOCALHOST_NAMES`, else 2 (a sort key)."""
    host, _ = host_and_port
    return 1 if host in LOCALHOST_NAMES else 2


def _unescape(text: str) -> str:
    # stomp.py keeps an undefined escape as it is, where the spec calls it an error
    return re.sub(r"\\.", lambda m: _UNESCAPES.get(m.group(0), m.group(0)), text)


def parse_headers(lines: Sequence[str], offset: int = 0) -> Dict[str, str]:
    """Headers from header lines (from ``offset``): escapes undone, the first of a repeated name wins."""
    headers: Dict[str, str] = {}
    for line in lines[offset:]:
        match = HEADER_LINE_RE.match(line)
        if match:
            key = _unescape(match.group("key"))
            if key not in headers:
                headers[key] = _unescape(match.group("value"))
    return headers


def parse_frame(frame: bytes) -> "Optional[Frame]":
    """Parse one frame's bytes (without its NUL) into a :class:`Frame`; ``None`` when it holds no command."""
    match = PREAMBLE_END_RE.search(frame)
    if match:
        head_end, body_start = match.start(), match.end()
    else:
        head_end = body_start = len(frame)
    lines = LINE_END_RE.split(frame[:head_end].decode("utf-8", errors="replace"))
    first = 0
    while first < len(lines) and not lines[first]:
        first += 1
    if first >= len(lines):
        return None
    return Frame(lines[first], parse_headers(lines, first + 1), frame[body_start:])


def merge_headers(header_map_list: Iterable[Optional[Dict[str, Any]]]) -> Dict[str, Any]:
    """One new dict from several (later ones win); ``None`` entries are skipped."""
    headers: Dict[str, Any] = {}
    for header_map in header_map_list:
        if header_map:
            headers.update(header_map)
    return headers


def clean_headers(headers: Dict[str, Any]) -> Dict[str, Any]:
    """The headers with the passcode masked (a copy when there is one to mask)."""
    if "passcode" in headers:
        headers = copy.copy(headers)
        headers["passcode"] = "********"
    return headers


def clean_lines(lines: Any) -> str:
    """``str(lines)`` with passcodes masked, for logs."""
    return re.sub(PASSCODE_RE, "passcode:********", str(lines))


def calculate_heartbeats(shb: Sequence[str], chb: Tuple[int, int]) -> Tuple[int, int]:
    """The agreed heart-beats ``(send, receive)`` in ms from the server's header pair and the client's ints.

    STOMP 1.1, Heart-beating: each side sends at ``max(cx, sy)`` unless either is 0. It is
    the client's negotiation (``negotiate_heart_beat``), so two things differ from
    stomp.py: a server value above one hour is taken as one hour, and a value that is
    not ASCII digits raises :class:`stompfast.RemoteProtocolError` (stomp.py takes whatever
    ``int()`` takes, and raises its ``ValueError`` on the rest).
    """
    return negotiate_heart_beat(chb, ",".join(shb))


def convert_frame(frame: "Frame") -> List[bytes]:
    """A frame as the byte pieces stomp.py writes: headers sorted by name, tuples as repeated headers.

    Kept for code that calls it; the connection encodes with :func:`stompfast.encode_frame`.
    """
    lines: List[bytes] = []
    body = None
    if frame.body:
        body = encode(frame.body)
        if HDR_CONTENT_LENGTH in frame.headers:
            frame.headers[HDR_CONTENT_LENGTH] = len(body)
    if frame.cmd:
        lines.append(encode(frame.cmd))
        lines.append(b"\n")
    for key, vals in sorted(frame.headers.items()):
        if vals is None:
            continue
        for val in vals if type(vals) is tuple else (vals,):
            lines.append(encode("%s:%s\n" % (key, val)))
    lines.append(b"\n")
    if body:
        lines.append(body)
    if frame.cmd:
        lines.append(NULL)
    return lines


def length(s: Optional[Any]) -> int:
    """``len(s)``, or 0 for ``None``."""
    return len(s) if s is not None else 0


class Frame:
    """A STOMP frame as listeners see it: mutable ``cmd``, ``headers``, ``body``.

    ``original_headers`` is a copy of the headers taken when the frame was made, so a
    listener's edits in ``on_before_message`` leave it as received. ``body`` is ``str``
    with ``auto_decode=True`` (the default) and ``bytes`` otherwise. A heart-beat to send
    is ``Frame(None, {}, None)``.
    """

    def __init__(self, cmd: Optional[str], headers: Optional[Dict[str, Any]] = None, body: Any = None) -> None:
        self.cmd = cmd
        self.headers: Dict[str, Any] = headers if headers is not None else {}
        self.original_headers: Dict[str, Any] = (
            self.headers.copy() if type(self.headers) is dict else copy.copy(self.headers)
        )
        self.body = body

    def __str__(self) -> str:
        return "{cmd=%s,headers=[%s],body=%s}" % (self.cmd, self.headers, self.body)


def get_uuid() -> str:
    """A random UUID as a string (the ids stomp.py makes for transactions and receipts)."""
    return str(uuid.uuid4())


def get_errno(e: BaseException) -> Any:
    """The ``errno`` of an exception, or its first argument."""
    try:
        return e.errno  # type: ignore[attr-defined]
    except AttributeError:
        return e.args[0]


#: the frame listeners' ``on_heartbeat`` stands for: a received heart-beat
HEARTBEAT_FRAME = Frame("heartbeat")
