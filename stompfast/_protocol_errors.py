"""The broker's ERROR frames on one session, read as exceptions.

STOMP: "the server MUST then close the connection just after sending the ERROR
frame", yet some brokers send more than one before they close (RabbitMQ 4.x puts
the reason in the second). :class:`BrokerErrors` keeps the ERROR that ended a
session and folds the later ones into it; :func:`server_error` reads one frame
as the exception to raise; :func:`error_keeps_session` says whether the broker
that sent it goes on with the session. The session
(:class:`~stompfast._protocol.StompProtocol`) owns one ``BrokerErrors`` and
decides when an ERROR ends it. Like the protocol core, nothing here imports
anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from ._brokers import ERRORS_THAT_KEEP_THE_SESSION
from .errors import AuthenticationError, ServerError
from .frames import Frame

__all__ = ["MAX_LATER_ERRORS", "BrokerErrors", "error_keeps_session", "server_error"]

#: ERROR frames after the one that ended a session kept in ``ServerError.errors``; more are counted
MAX_LATER_ERRORS = 7


def server_error(frame: Frame, connecting: bool) -> ServerError:
    """The exception for an ERROR ``frame``: AuthenticationError while ``connecting``, else ServerError."""
    headers = frame[1]
    message = headers.get("message") or "the broker sent ERROR without a message"
    body = frame[2]
    detail = body.decode("utf-8", "replace").strip() if body else ""
    text = f"{message}: {detail}" if detail and detail not in message else message
    cls = AuthenticationError if connecting else ServerError
    return cls(text, headers=dict(headers), body=body, receipt_id=headers.get("receipt-id"))


def error_keeps_session(server: Optional[str], headers: Mapping[str, str]) -> bool:
    """Whether the broker named by ``server`` keeps the session after this ERROR (ERRORS_THAT_KEEP_THE_SESSION)."""
    if not server:
        return False
    for prefix, keeps in ERRORS_THAT_KEEP_THE_SESSION.items():
        if server.startswith(prefix):
            return bool(keeps(headers))
    return False


class BrokerErrors:
    """The ERROR that ended one session, and the ERRORs the broker sent after it."""

    __slots__ = ("ending", "reading", "_later", "_more")

    def __init__(self) -> None:
        #: the exception of the ERROR that ended the session, or None
        self.ending: Optional[ServerError] = None
        #: an ERROR ended the session and later bytes may still bring ERRORs (until a framing fault)
        self.reading = False
        self._later: List[ServerError] = []
        self._more = 0

    def end(self, frame: Frame, connecting: bool, frames: Sequence[Frame]) -> ServerError:
        """Record the ERROR ``frame`` that ended the session; return :attr:`error`.

        ``frames``: the feed that brought ``frame``; the ERRORs after it are folded in
        now, and those of later feeds by :meth:`fold`.
        """
        self.ending = ending = server_error(frame, connecting)
        self.reading = True
        after = next(i for i, f in enumerate(frames) if f is frame) + 1
        self.fold(frames[after:])
        return self.error or ending

    def stop_reading(self) -> None:
        """A framing fault came after the ending ERROR: nothing after it can be read."""
        self.reading = False

    def fold(self, frames: Sequence[Frame]) -> None:
        """Keep the ERRORs among ``frames`` (frames that came after the ending one) up to MAX_LATER_ERRORS."""
        # The later ERRORs are read as the ending one was: a refused CONNECT's are AuthenticationErrors too.
        connecting = isinstance(self.ending, AuthenticationError)
        for frame in frames:
            if frame[0] == "ERROR":
                if len(self._later) < MAX_LATER_ERRORS:
                    self._later.append(server_error(frame, connecting))
                else:
                    self._more += 1

    @property
    def error(self) -> Optional[ServerError]:
        """The ending ERROR's exception with every later ERROR folded in (``ServerError.errors``); None before."""
        if self.ending is None or not (self._later or self._more):
            return self.ending
        return self.ending.followed_by(self._later, self._more)
