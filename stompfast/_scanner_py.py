"""Reference STOMP frame scanner and encoder in plain Python: the executable spec.

``_scanner_c.pyx`` implements exactly the same behaviour faster; the test suite
runs every scanner test on both and compares them on random input. What the
scanner accepts and refuses is documented in ``docs/framing.md``.

Theory of operation
-------------------
The scanner keeps one ``bytearray``. When it is empty, ``feed()`` scans the
caller's ``bytes`` in place and keeps only their incomplete tail; otherwise it
appends to the buffer, takes every complete frame off the front and deletes what
it consumed (deleting from the front of a bytearray is O(1) in CPython). Between
calls the buffer holds only the start of one incomplete frame, at index 0.

A frame is scanned in two stages:

1. *head*: search for the blank line that ends the headers. The search resumes
   where the previous call stopped (``_scan``), so no byte is searched twice.
   Bytes of an unfinished head are checked incrementally (``_checked``) for the
   faults that can be proved before the head is complete.
2. *body*: with ``content-length``, wait until that many bytes and one more (the
   NUL) are buffered; without, search for the NUL, again resuming (``_scan``).

With ``skip_oversized``, a MESSAGE whose ``content-length`` takes it past
``max_frame_bytes`` is not a fault: once its head is parsed, the scanner holds a
:class:`~stompfast.frames.SkippedFrame` (its headers, no body) in ``_skipping``
and counts the body off as it arrives (``_skip_left``: body bytes still to come),
buffering none of it; after the NUL the SkippedFrame takes the frame's place.

Faults are positional: each has the stream position at which it becomes
provable, and when several are present the earliest wins (ties in a fixed
order). That is what makes the result, the frames before a fault and the class
of the fault, independent of how the input was split into chunks.
"""

from __future__ import annotations

import re
from itertools import islice, repeat
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .errors import ConfigurationError, LimitExceededError, LocalProtocolError, RemoteProtocolError
from .frames import COMMANDS, Frame, SkippedFrame

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_HEADERS",
    "DEFAULT_MAX_HEADER_BYTES",
    "MAX_LIMIT",
    "FrameScanner",
    "encode_frame",
]

#: 100 MiB: ActiveMQ's default ``maxFrameSize``.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
#: ActiveMQ's default ``maxHeaders``.
DEFAULT_MAX_HEADERS = 1000
#: Command line, header lines and the blank line together.
DEFAULT_MAX_HEADER_BYTES = 256 * 1024
#: The largest value any limit may be set to.
MAX_LIMIT = 2**48

_VERSIONS = {"1.0": 10, "1.1": 11, "1.2": 12}
# STOMP 1.1/1.2 "Value Encoding": CONNECT and CONNECTED are never escaped (STOMP
# is the 1.1+ spelling of CONNECT and follows the same rule).
_UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})
_UNESCAPE = {
    11: {"\\n": "\n", "\\c": ":", "\\\\": "\\"},
    12: {"\\n": "\n", "\\c": ":", "\\\\": "\\", "\\r": "\r"},
}


def _escape(text: str, ver: int) -> str:
    """Escape a 1.1/1.2 name or value (``str.replace`` beats ``str.translate`` here)."""
    # First, so that the backslashes added below stay single
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if ":" in text:
        text = text.replace(":", "\\c")
    if ver == 12 and "\r" in text:
        text = text.replace("\r", "\\r")
    return text

_ESCAPE_SEQ = re.compile(r"\\.?", re.S)
# STOMP 1.0 peers pad names and values with these
_PAD = " \t"
#: what the scanning methods read: the caller's bytes, or the scanner's own growing buffer
_Buf = Union[bytes, bytearray]
if TYPE_CHECKING:
    #: a parsed head: ``(command, headers, repeats, body_start, content_length)`` (see ``frames``)
    _Head = Tuple[str, Dict[str, str], Optional[List[Tuple[str, str]]], int, int]
# Bytes that may begin an empty line before a frame (the space only when lenient)
_SKIPPABLE = b"\n\r "
_split = str.split
# Endless: shared by every map() below
_COLONS = repeat(":")
_ONES = repeat(1)


def _version_code(version: Any) -> int:
    try:
        return _VERSIONS[version]
    except (KeyError, TypeError):
        raise ConfigurationError(
            f"unsupported STOMP version {version!r}: expected '1.0', '1.1' or '1.2'"
        ) from None


def _limit(name: str, value: Any, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(f"{name} must be an int from 1 to 2**48 or None, not {value!r}")
    return value


class _BadEscape(Exception):
    pass


def _unescape(text: str, table: Dict[str, str]) -> str:
    def replace(match: "re.Match[str]") -> str:
        seq = match.group()
        try:
            return table[seq]
        except KeyError:
            raise _BadEscape(seq) from None

    return _ESCAPE_SEQ.sub(replace, text)


def _unescape_joined(text: str, ver: int) -> Optional[str]:
    """Unescape a 1.1/1.2 string with str methods only; None if an escape is undefined.

    Splitting on the escaped backslash first leaves every other backslash as the
    start of a ``\\n``, ``\\c`` or (1.2) ``\\r`` escape, or of a fault.
    """
    parts = text.split("\\\\")
    for i, part in enumerate(parts):
        if "\\" in part:
            part = part.replace("\\n", "\n").replace("\\c", ":")
            if ver == 12:
                part = part.replace("\\r", "\r")
            if "\\" in part:
                return None
            parts[i] = part
    return "\\".join(parts)


class FrameScanner:
    """Turns received bytes into :class:`~stompfast.Frame` values.

    Args:
        version: the STOMP version whose header rules apply (``"1.0"``, ``"1.1"``
            or ``"1.2"``); settable later through :attr:`version`.
        max_frame_bytes: largest frame, command to NUL inclusive (None: 100 MiB).
        max_headers: most header lines in one frame (None: 1,000).
        max_header_bytes: largest command line plus header block (None: 256 KiB).
        lenient: accept the early lenient framing draft (case-insensitive command
            and header names, trailing spaces stripped from lines, leading spaces
            from values, whitespace-only lines between frames).
        skip_oversized: a MESSAGE over ``max_frame_bytes`` whose headers are
            within the limits and whose ``content-length`` says where its body
            ends is not a fault: its body is counted off as it arrives, never
            buffered, and ``feed()`` returns a :class:`~stompfast.frames.SkippedFrame`
            (headers, empty body, ``size``) in its place. Any other frame over a
            limit, and a MESSAGE without ``content-length``, still raises
            :class:`~stompfast.LimitExceededError`.
    """

    __slots__ = (
        "_buf",
        "_base",
        "_ver",
        "_version",
        "_lenient",
        "_max_frame",
        "_max_headers",
        "_max_header_bytes",
        "_in_frame",
        "_scan",
        "_checked",
        "_lfs",
        "_cmd_done",
        "_head",
        "_failed",
        "_skip",
        "_skipping",
        "_skip_left",
        "_skipped",
    )

    def __init__(
        self,
        version: str = "1.2",
        max_frame_bytes: Optional[int] = None,
        max_headers: Optional[int] = None,
        max_header_bytes: Optional[int] = None,
        lenient: bool = False,
        skip_oversized: bool = False,
    ) -> None:
        self._ver = _version_code(version)
        self._version = version
        self._max_frame = _limit("max_frame_bytes", max_frame_bytes, DEFAULT_MAX_FRAME_BYTES)
        self._max_headers = _limit("max_headers", max_headers, DEFAULT_MAX_HEADERS)
        self._max_header_bytes = _limit("max_header_bytes", max_header_bytes, DEFAULT_MAX_HEADER_BYTES)
        self._lenient = bool(lenient)
        self._skip = bool(skip_oversized)
        # The MESSAGE whose body is being counted off
        self._skipping: Optional[SkippedFrame] = None
        # Body bytes of it still to come
        self._skip_left = 0
        self._skipped = 0
        self._buf = bytearray()
        # Stream offset of _buf[0]
        self._base = 0
        # (message, offset) of the fault
        self._failed: Optional[Tuple[str, Optional[int]]] = None
        self._reset_frame()

    def _reset_frame(self) -> None:
        # Past the EOLs that may precede a frame
        self._in_frame = False
        # Where the next delimiter search starts, relative to the frame
        self._scan = 0
        # Head bytes already checked for early faults
        self._checked = 0
        # LFs among them
        self._lfs = 0
        # The command line was complete and valid
        self._cmd_done = False
        self._head: Optional[_Head] = None

    @property
    def version(self) -> str:
        """The STOMP version whose header rules apply to the next frame."""
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        self._ver = _version_code(version)
        self._version = version

    @property
    def lenient(self) -> bool:
        """Whether the lenient legacy framing rules are on."""
        return self._lenient

    @property
    def skip_oversized(self) -> bool:
        """Whether a MESSAGE over ``max_frame_bytes`` with ``content-length`` is skipped, not a fault."""
        return self._skip

    @property
    def skipped(self) -> int:
        """How many SkippedFrames ``feed()`` has returned (or put in an error's ``frames``)."""
        return self._skipped

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame

    @property
    def max_headers(self) -> int:
        return self._max_headers

    @property
    def max_header_bytes(self) -> int:
        return self._max_header_bytes

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (0 between frames).

        A CR between frames that waits for its LF is held too, but it starts no
        frame and does not count.
        """
        return len(self._buf) if self._in_frame else 0

    def feed(self, data: Union[bytes, bytearray, memoryview] = b"") -> List[Frame]:
        """Scan ``data`` and return the frames it completed, in order.

        Raises:
            RemoteProtocolError: the input is not valid STOMP; ``frames`` on the
                exception holds the frames completed before the fault.
            LimitExceededError: a limit was exceeded (a RemoteProtocolError).
        """
        if self._failed is not None:
            message, offset = self._failed
            raise RemoteProtocolError(
                f"the scanner failed earlier and cannot resynchronise: {message}", offset=offset, frames=[]
            )
        buf = self._buf
        frames: List[Frame] = []
        try:
            if not buf and type(data) is bytes:
                # Nothing pending: scan the caller's bytes where they are (slices of
                # bytes are bytes, one copy) and keep only the incomplete tail.
                consumed = self._scan_frames(data, frames)
                if consumed < len(data):
                    buf += memoryview(data)[consumed:]
                self._base += consumed
                return frames
            try:
                buf += data
            except (TypeError, BufferError):
                raise TypeError(
                    f"data must be a contiguous bytes-like object, not {type(data).__name__}"
                ) from None
            consumed = self._scan_frames(buf, frames)
        except RemoteProtocolError as exc:
            exc.frames = frames
            # Keep the text, not the exception: its traceback would hold this
            # scanner (and its owner) in a reference cycle. Give the buffer back:
            # a failed scanner reads nothing more.
            self._failed = (str(exc), exc.offset)
            # The traceback's frames hold it too
            del buf[:]
            self._buf = bytearray()
            raise
        if consumed:
            del buf[:consumed]
            self._base += consumed
        return frames

    # -- errors ---------------------------------------------------------

    def _fault(self, pos: int, message: str) -> RemoteProtocolError:
        offset = self._base + pos
        return RemoteProtocolError(f"{message} (at stream offset {offset})", offset=offset, frames=[])

    def _over_limit(self, pos: int, name: str, limit: int, what: str) -> LimitExceededError:
        offset = self._base + pos
        return LimitExceededError(
            f"{what} exceeds {name}={limit} (at stream offset {offset})",
            offset=offset,
            frames=[],
            limit_name=name,
            limit=limit,
        )

    # -- scanning -------------------------------------------------------

    def _scan_frames(self, buf: Union[bytes, bytearray], frames: List[Frame]) -> int:
        """Append every complete frame in ``buf`` to ``frames``; return bytes consumed.

        The pending frame, if any, starts at ``buf[0]``.
        """
        n = len(buf)
        pos = 0
        # Once per feed, not per frame
        if self._skipping is not None:
            pos = self._skip_body(buf, 0, n, frames)
            if self._skipping is not None:
                return pos
        fast = not self._lenient and self._ver != 10
        append = frames.append
        make = tuple.__new__
        # Per-frame state lives in attributes only while a frame is incomplete
        # (``_in_frame`` is then True); a frame that is complete in ``buf`` from
        # the start is scanned with locals alone.
        while True:
            head = self._head
            if head is None:
                if not self._in_frame:
                    if pos >= n:
                        return pos
                    if buf[pos] in _SKIPPABLE:
                        pos, ready = self._skip_eols(buf, pos, n)
                        # All consumed, or an empty line awaiting its LF
                        if not ready:
                            return pos
                if fast:
                    j = buf.find(b"\n\n", pos + self._scan, n)
                    if j >= 0:
                        head = self._fast_head(buf, pos, j)
                # A CR, an escape, a fault, 1.0 or lenient rules: the general path
                if head is None:
                    self._in_frame = True
                    found = self._find_head_end(buf, pos, n)
                    if found is None:
                        self._check_head(buf, pos, n, False)
                        return pos
                    hend, body_start = found
                    self._check_head(buf, pos, body_start, True)
                    head = self._parse_head(buf, pos, hend, body_start)
                    # Only this path parses an oversized head
                    if self._skipping is not None:
                        self._reset_frame()
                        pos = self._skip_body(buf, pos + head[3], n, frames)
                        if self._skipping is not None:
                            return pos
                        continue
            command, headers, repeats, body_start, length = head
            start = pos + body_start
            if length >= 0:
                end = start + length
                # The NUL after the body is not here yet
                if end >= n:
                    self._head = head
                    self._in_frame = True
                    return pos
                if buf[end] != 0:
                    raise self._fault(end, f"{command} frame: no NUL after the {length} body bytes of content-length")
            else:
                end = buf.find(b"\0", pos + max(self._scan, body_start), n)
                if end < 0 or end - pos + 1 > self._max_frame:
                    if end >= 0 or n - pos >= self._max_frame:
                        # Without content-length only the NUL ends the body, so
                        # the frame cannot be skipped: say so, the fix is the sender's.
                        raise self._over_limit(
                            pos + self._max_frame - 1,
                            "max_frame_bytes",
                            self._max_frame,
                            f"{command} frame without content-length",
                        )
                    self._head = head
                    self._in_frame = True
                    self._scan = n - pos
                    return pos
            body = buf[start:end] if type(buf) is bytes else bytes(buf[start:end])
            append(make(Frame, (command, headers, body, repeats)))
            pos = end + 1
            if self._in_frame:
                self._head = None
                self._in_frame = self._cmd_done = False
                self._scan = self._checked = self._lfs = 0

    def _skip_body(self, buf: _Buf, pos: int, n: int, frames: List[Frame]) -> int:
        """Count off the skipped MESSAGE's body bytes from ``buf[pos:n]``; return the new position.

        When the NUL after the body is here, the SkippedFrame goes to ``frames``
        and ``_skipping`` is cleared; otherwise all of ``buf`` is consumed.
        """
        left = self._skip_left
        if n - pos <= left:
            self._skip_left = left - (n - pos)
            return n
        end = pos + left
        skipped = self._skipping
        assert skipped is not None
        if buf[end] != 0:
            raise self._fault(end, f"MESSAGE frame: no NUL after the {skipped.size} body bytes of content-length")
        frames.append(skipped)
        self._skipped += 1
        self._skipping = None
        return end + 1

    def _skip_eols(self, buf: _Buf, pos: int, n: int) -> Tuple[int, bool]:
        """Skip the empty lines (heart-beats) before a frame.

        Returns ``(pos, ready)``: where the frame starts, or, when ``ready`` is
        False, where the unfinished empty line (or the end of the input) is.
        An empty line is ``LF`` or ``CR LF``; with ``lenient``, any run of spaces
        and CRs before an LF.
        """
        lenient = self._lenient
        while pos < n:
            c = buf[pos]
            if c == 10:
                pos += 1
                continue
            if c == 13 or (lenient and c == 32):
                j = pos + 1
                if lenient:
                    while j < n and buf[j] in (32, 13):
                        j += 1
                    if j - pos > self._max_header_bytes:
                        raise self._over_limit(
                            pos + self._max_header_bytes,
                            "max_header_bytes",
                            self._max_header_bytes,
                            "run of spaces and CRs between frames",
                        )
                if j >= n:
                    return pos, False
                if buf[j] == 10:
                    pos = j + 1
                    continue
                if lenient:
                    # The spaces begin the command line
                    return pos, True
                raise self._fault(pos, "CR not followed by LF between frames")
            return pos, True
        return pos, False

    def _find_head_end(self, buf: _Buf, start: int, n: int) -> Optional[Tuple[int, int]]:
        """Find the blank line ending the head: ``(LF ending the last line, body start)``."""
        scan = start + self._scan
        # LF, any spaces and CRs, LF
        if self._lenient:
            i = scan
            while True:
                i = buf.find(b"\n", i, n)
                if i < 0:
                    self._scan = n - start
                    return None
                j = i + 1
                while j < n and buf[j] in (32, 13):
                    j += 1
                if j >= n:
                    self._scan = i - start
                    return None
                if buf[j] == 10:
                    return i, j + 1
                i = j
        j = buf.find(b"\n\n", scan, n)
        k = buf.find(b"\n\r\n", scan, n if j < 0 else j + 2)
        if k >= 0:
            return k, k + 3
        if j >= 0:
            return j, j + 2
        # A terminator may straddle the next chunk
        self._scan = max(n - 2, scan) - start
        return None

    def _command(self, line: bytes) -> Optional[str]:
        """The command named by a command line (without its LF), or None if invalid."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if self._lenient:
            line = line.rstrip(b" \r").upper()
        try:
            command = line.decode("ascii")
        except UnicodeDecodeError:
            return None
        return command if command in COMMANDS else None

    def _check_head(self, buf: _Buf, start: int, end: int, complete: bool) -> None:
        """Raise the earliest fault provable in the head bytes ``buf[start:end]``.

        Checks only bytes not checked before. In stream order, ties broken in this
        order: a NUL in the head, an invalid command, too many header lines, too many
        header bytes, too many frame bytes.
        """
        c0 = start + self._checked
        faults = []
        nul = buf.find(b"\0", c0, end)
        if nul >= 0:
            faults.append((nul, 0, self._fault(nul, "NUL before the end of the headers: the frame was cut short")))
        if not self._cmd_done:
            # Not before c0: those bytes held no LF
            lf = buf.find(b"\n", c0, end)
            if lf >= 0:
                if self._command(bytes(buf[start:lf])) is None:
                    line = bytes(buf[start : min(lf, start + 40)])
                    faults.append((lf, 1, self._fault(lf, f"unknown command {line!r}")))
                else:
                    self._cmd_done = True
        lfs = self._lfs + buf.count(b"\n", c0, end)
        # Header lines complete so far: every LF ends the command line or a header
        # line, except the blank line's LF once the head is complete.
        if lfs - (2 if complete else 1) > self._max_headers:
            at = start - 1
            for _ in range(self._max_headers + 2):
                at = buf.find(b"\n", at + 1, end)
            faults.append(
                (at, 2, self._over_limit(at, "max_headers", self._max_headers, "number of header lines"))
            )
        if end - start > self._max_header_bytes:
            at = start + self._max_header_bytes
            faults.append(
                (at, 3, self._over_limit(at, "max_header_bytes", self._max_header_bytes, "header block"))
            )
        if end - start >= self._max_frame:
            at = start + self._max_frame - 1
            faults.append((at, 4, self._over_limit(at, "max_frame_bytes", self._max_frame, "frame")))
        if faults:
            raise min(faults, key=lambda fault: fault[:2])[2]
        self._checked = end - start
        self._lfs = lfs

    def _fast_head(self, buf: _Buf, start: int, hend: int) -> Optional[_Head]:
        """Parse a head ending in ``LF LF`` at ``hend`` quickly, or return None.

        None sends the head down the general path, which finds the same end (a CR
        anywhere would be needed for an earlier ``LF CR LF``), unescapes, strips,
        and raises the exact fault. The fast path takes only heads with valid
        UTF-8, a known command, every limit kept, no NUL, no CR, nothing to
        unescape, no repeated or empty name.
        """
        try:
            text = buf[start:hend].decode("utf-8")
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        command = lines[0]
        size = hend + 2 - start
        if (
            command not in COMMANDS
            or "\r" in text
            or "\0" in text
            or len(lines) > self._max_headers + 1
            or size > self._max_header_bytes
            or size >= self._max_frame
        ):
            return None
        try:
            headers = dict(map(_split, islice(lines, 1, None), _COLONS, _ONES))
        # A line without ':'
        except ValueError:
            return None
        if len(headers) != len(lines) - 1 or "" in headers:
            return None
        if "\\" in text and command not in _UNESCAPED_COMMANDS:
            # Unescape, in place, the values that hold a backslash (the names
            # must hold none: their backslashes would show in the count).
            ver = self._ver
            seen = 0
            for name, value in headers.items():
                if "\\" in value:
                    seen += value.count("\\")
                    if "\\\\" in value:
                        joined = _unescape_joined(value, ver)
                        if joined is None:
                            return None
                        value = joined
                    # Every backslash starts \n, \c or (1.2) \r
                    else:
                        value = value.replace("\\c", ":").replace("\\n", "\n")
                        if ver == 12:
                            value = value.replace("\\r", "\r")
                        if "\\" in value:
                            return None
                    headers[name] = value
            if seen != text.count("\\"):
                # An escaped name: rare, and may collide after unescaping
                return None
        length = -1
        declared = headers.get("content-length")
        if declared is not None:
            if not (declared.isascii() and declared.isdigit()):
                return None
            length = int(declared)
            if size + length + 1 > self._max_frame:
                return None
        return command, headers, None, size, length

    def _parse_head(
        self, buf: _Buf, start: int, hend: int, body_start: int
    ) -> _Head:
        """Parse a complete head into ``(command, headers, repeats, body_start, content_length)``.

        ``body_start`` is relative to ``start``; ``content_length`` is -1 when absent.
        """
        raw = buf[start:hend]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fault(start + exc.start, "command or header is not valid UTF-8") from None
        lines = text.split("\n")
        ver = self._ver
        lenient = self._lenient
        if "\r" in text or lenient:
            lines = [self._strip_eol(line, start) for line in lines]
        command = lines[0]
        if lenient:
            command = command.upper()
        unescape = ver > 10 and "\\" in text and command not in _UNESCAPED_COMMANDS
        table = _UNESCAPE.get(ver, {})
        pad = ver == 10
        headers: Dict[str, str] = {}
        repeats: Optional[List[Tuple[str, str]]] = None
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise self._fault(start, f"{command} frame: header line without ':': {line[:40]!r}")
            if pad:
                name = name.strip(_PAD)
                value = value.strip(_PAD)
            elif lenient:
                value = value.lstrip(" ")
            if not name:
                raise self._fault(start, f"{command} frame: header with an empty name")
            if unescape and ("\\" in name or "\\" in value):
                try:
                    name = _unescape(name, table)
                    value = _unescape(value, table)
                except _BadEscape as exc:
                    raise self._fault(
                        start, f"{command} frame: undefined escape {exc.args[0]!r} in header {line[:40]!r}"
                    ) from None
            if lenient:
                name = name.lower()
            if repeats is not None:
                repeats.append((name, value))
                if name not in headers:
                    headers[name] = value
            elif name in headers:
                repeats = list(headers.items())
                repeats.append((name, value))
            else:
                headers[name] = value
        length = -1
        declared = headers.get("content-length")
        if declared is not None:
            if not (declared.isascii() and declared.isdigit()):
                raise self._fault(start, f"{command} frame: content-length is not a byte count: {declared[:40]!r}")
            length = int(declared)
            size = body_start - start + length + 1
            if size > self._max_frame:
                if self._skip and command == "MESSAGE" and length <= MAX_LIMIT:
                    self._skipping = tuple.__new__(SkippedFrame, (command, headers, b"", repeats))
                    self._skip_left = length
                    return command, headers, repeats, body_start - start, length
                raise self._over_limit(
                    body_start - 1, "max_frame_bytes", self._max_frame, f"{command} frame of {size} bytes"
                )
        return command, headers, repeats, body_start - start, length

    def _strip_eol(self, line: str, start: int) -> str:
        if self._lenient:
            line = line.rstrip(" \r")
        elif line.endswith("\r"):
            line = line[:-1]
        if "\r" in line and self._ver == 12:
            raise self._fault(start, f"CR inside a header line (STOMP 1.2 allows none): {line[:40]!r}")
        return line


HeadersArg = Union[Mapping[str, Any], Iterable[Tuple[str, Any]], None]


def encode_frame(
    command: str,
    headers: HeadersArg = None,
    body: Union[bytes, bytearray, memoryview] = b"",
    version: str = "1.2",
) -> bytes:
    """Encode one frame for the wire.

    Header names and values are escaped as ``version`` requires (CONNECT, STOMP and
    CONNECTED never are); ``content-length`` is added when ``body`` is non-empty.

    Raises:
        LocalProtocolError: the frame cannot be expressed in this version (nothing
            was encoded): unknown command, empty header name, a character the
            version cannot escape, a ``content-length`` that disagrees with the body.
        TypeError: a header name that is not ``str``, a value that is neither
            ``str`` nor ``int``, a body that is not bytes-like.
        ConfigurationError: an unknown version.
    """
    ver = _version_code(version)
    if not isinstance(command, str) or command not in COMMANDS:
        raise LocalProtocolError(f"unknown STOMP command {command!r}")
    if not isinstance(body, bytes):
        if not isinstance(body, (bytearray, memoryview)):
            raise TypeError(f"body must be bytes, bytearray or memoryview, not {type(body).__name__}")
        body = bytes(body)
    raw = ver == 10 or command in _UNESCAPED_COMMANDS
    if type(headers) is dict and not raw:
        wire = _encode_dict_fast(command, headers, body, ver)
        if wire is not None:
            return wire
    return _encode_general(command, headers, body, ver, raw)


def _encode_dict_fast(command: str, headers: Dict[Any, Any], body: bytes, ver: int) -> Optional[bytes]:
    """Encode a dict of str headers with whole-string operations, or return None.

    All names are joined into one string and all values into another (NUL, which
    no header may hold, separates them), escaped in one go each and zipped back
    into lines. None hands anything unusual (a non-str value, a NUL,
    a CR on 1.1, an empty name, content-length given) to the general path, which
    also raises the exact error.
    """
    try:
        names = "\0".join(headers)
        values = "\0".join(headers.values())
    except TypeError:
        return None
    count = len(headers)
    if (
        not count
        or names.count("\0") != count - 1
        or values.count("\0") != count - 1
        or "content-length" in headers
        or (ver == 11 and ("\r" in names or "\r" in values))
    ):
        return None
    names_list = _escape(names, ver).split("\0")
    if "" in names_list:
        return None
    lines = [command]
    lines.extend(map(":".join, zip(names_list, _escape(values, ver).split("\0"))))
    if body:
        lines.append("content-length:" + str(len(body)))
    lines.append("\n")
    try:
        head = "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError:
        return None
    return b"".join((head, body, b"\0"))


def _encode_general(command: str, headers: HeadersArg, body: bytes, ver: int, raw: bool) -> bytes:
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    lines = [command]
    has_length = False
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        if not isinstance(value, str):
            if isinstance(value, int) and not isinstance(value, bool):
                value = int.__repr__(value)
            else:
                raise TypeError(f"header {name!r}: value must be str or int, not {type(value).__name__}")
        if not name:
            raise LocalProtocolError(f"{command} frame: header with an empty name")
        if name == "content-length":
            if not (value.isascii() and value.isdigit()) or int(value) != len(body):
                raise LocalProtocolError(
                    f"{command} frame: content-length {value!r} does not match the {len(body)}-byte body"
                )
            has_length = True
        if "\0" in name or "\0" in value:
            raise LocalProtocolError(f"{command} frame: header {name!r} holds a NUL, which STOMP cannot carry")
        if raw:
            if "\n" in name or "\r" in name or ":" in name or "\n" in value or "\r" in value:
                where = "STOMP 1.0" if ver == 10 else command
                raise LocalProtocolError(
                    f"{command} frame: header {name!r} holds a CR, LF or (in the name) ':',"
                    f" which {where} frames cannot escape"
                )
        else:
            if ver == 11 and ("\r" in name or "\r" in value):
                raise LocalProtocolError(f"{command} frame: header {name!r} holds a CR, which STOMP 1.1 cannot escape")
            name = _escape(name, ver)
            value = _escape(value, ver)
        lines.append(name + ":" + value)
    if body and not has_length:
        lines.append(f"content-length:{len(body)}")
    lines.append("\n")
    try:
        head = "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"{command} frame: header is not encodable as UTF-8: {exc.reason}") from None
    return b"".join((head, body, b"\0"))
