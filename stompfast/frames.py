"""The STOMP frame value and the command names.

:class:`Frame` is the one immutable type that both scanners produce (the Cython
``_scanner_c`` and the pure-Python ``_scanner_py``), so code above the scanner
never knows which one ran.

Representation (an implementation detail the scanners rely on): a ``tuple``
subclass of four items ``(command, headers, body, repeats)`` where ``headers`` is
a ``dict`` in wire order holding the first value of every header name, and
``repeats`` is ``None`` when no header name repeats, else the full wire-order
list of ``(name, value)`` pairs. A tuple subclass is what C can build in a
handful of instructions, and keeping the pair list only when it carries
information saves a list and N tuples per frame on the hot path.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = [
    "CLIENT_COMMANDS",
    "COMMANDS",
    "Frame",
    "SERVER_COMMANDS",
    "SkippedFrame",
]

#: Commands a client sends (STOMP 1.2 section "Client Frames"); ``STOMP`` is the 1.1+ alias of CONNECT.
CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
#: Commands a server sends.
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
#: Every command either side may send; the scanners reject anything else.
COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS

HeadersArg = Union[Mapping[str, str], Iterable[Tuple[str, str]], None]


def _rebuild(items: Tuple[Any, ...]) -> "Frame":
    return tuple.__new__(Frame, items)


# (the builtin generic base, unlike typing.Tuple, leaves the MRO as it was: Frame, tuple, object)
class Frame(tuple[str, Dict[str, str], bytes, Optional[List[Tuple[str, str]]]]):
    """One STOMP frame: ``command``, ``headers``, ``header_list`` and ``body``.

    ``Frame("SEND", {"destination": "/queue/a"}, b"hi")`` builds one by hand;
    ``headers`` may also be a sequence of ``(name, value)`` pairs, which keeps
    repeated names. Frames compare equal when command, body and headers are
    equal (as mappings, and as full pair lists when a name repeats). Frames are
    not hashable (the headers are a dict).
    """

    __slots__ = ()

    def __new__(cls, command: str, headers: HeadersArg = None, body: bytes = b"") -> "Frame":
        if not isinstance(command, str):
            raise TypeError(f"command must be str, not {type(command).__name__}")
        if not isinstance(body, bytes):
            body = bytes(body)
        first: Dict[str, str] = {}
        pairs: List[Tuple[str, str]] = []
        repeated = False
        items = headers.items() if isinstance(headers, Mapping) else (headers or ())
        for name, value in items:
            if not isinstance(name, str) or not isinstance(value, str):
                raise TypeError("header names and values must be str")
            pairs.append((name, value))
            if name in first:
                repeated = True
            else:
                first[name] = value
        return tuple.__new__(cls, (command, first, body, pairs if repeated else None))

    # Tuple's default would call __new__ with the raw items
    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (tuple(self),))

    @property
    def command(self) -> str:
        """The frame's command, e.g. ``"MESSAGE"``."""
        return self[0]

    @property
    def headers(self) -> Mapping[str, str]:
        """Read-only mapping of header name to value; the first of a repeated name wins.

        STOMP 1.2: "If the client receives repeated frame header entries, only the
        first header entry SHOULD be used as the value of header entry."
        """
        return MappingProxyType(self[1])

    @property
    def header_list(self) -> List[Tuple[str, str]]:
        """Every header as ``(name, value)`` in wire order, repeats kept (a new list)."""
        repeats = self[3]
        if repeats is None:
            return list(self[1].items())
        return list(repeats)

    @property
    def body(self) -> bytes:
        """The body bytes exactly as received (empty when there is none)."""
        return self[2]

    def __repr__(self) -> str:
        body = self[2]
        shown = body if len(body) <= 64 else body[:64] + b"..."
        return f"Frame({self[0]!r}, {self.header_list!r}, {shown!r})"


def _rebuild_skipped(items: Tuple[Any, ...]) -> "SkippedFrame":
    return tuple.__new__(SkippedFrame, items)


class SkippedFrame(Frame):
    """A MESSAGE over ``max_frame_bytes`` whose body a scanner counted off unread.

    Only a scanner made with ``skip_oversized=True`` produces one, and only for a
    MESSAGE whose headers are within the limits and whose ``content-length``
    says where its body ends. ``headers`` are the frame's own; ``body`` is empty;
    :attr:`size` is the body's size as ``content-length`` declared it.
    """

    __slots__ = ()

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild_skipped, (tuple(self),))

    @property
    def size(self) -> int:
        """The skipped body's size in bytes (its ``content-length``)."""
        return int(self[1]["content-length"])

    def __repr__(self) -> str:
        return f"SkippedFrame({self[0]!r}, {self.header_list!r}, body of {self.size} bytes skipped)"
