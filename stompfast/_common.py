"""Small things the client's parts share: loggers, the retryable errors, body encoding, error copies and texts."""

from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

from ._config import Endpoint
from .errors import ConnectError, ConnectionLostError, RemoteProtocolError, ServerError, StompTimeout

__all__ = [
    "RETRYABLE", "TEXT_CONTENT_TYPE", "body_bytes", "conn_log", "copy_error", "describe_error", "log", "reconnect_log",
    "where",
]

log = logging.getLogger("stompfast")
#: Connections: connected, a connect that failed, a session lost, closed (INFO / WARNING).
conn_log = logging.getLogger("stompfast.client")
#: The reconnect supervisor: each wait before an attempt, and giving up.
reconnect_log = logging.getLogger("stompfast.reconnect")

#: What ends one connection but not the client when reconnecting is on.
RETRYABLE = (ConnectError, ConnectionLostError, ServerError, RemoteProtocolError, StompTimeout)

TEXT_CONTENT_TYPE = "text/plain;charset=utf-8"


def body_bytes(body: Any, content_type: Optional[str]) -> Tuple[bytes, Optional[str]]:
    """A SEND body as bytes: a ``str`` is UTF-8 (labelled text/plain unless ``content_type`` says otherwise)."""
    if type(body) is bytes:
        return body, content_type
    if isinstance(body, str):
        return body.encode("utf-8"), TEXT_CONTENT_TYPE if content_type is None else content_type
    # Bytes subclasses too
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body), content_type
    raise TypeError(f"body must be bytes or str, not {type(body).__name__}")


def where(endpoint: Optional[Endpoint]) -> str:
    """An endpoint for a log line: its URL without the passcode."""
    return endpoint.url if endpoint is not None else "?"


def copy_error(error: BaseException) -> BaseException:
    """A fresh instance of a stored error, so each waiter gets its own traceback."""
    try:
        reduced: Any = error.__reduce__()
        func, args, state = reduced[:3]
        fresh: BaseException = func(*args)
        if state:
            fresh.__dict__.update(state)
        fresh.__cause__ = error.__cause__
        return fresh
    except Exception:  # pragma: no cover - an exotic error that will not copy
        return error


def describe_error(exc: Optional[BaseException]) -> str:
    """What went wrong, for a person: ``exc``'s ``strerror`` or message, else that of the OSError behind it.

    On trio, anyio raises a ``BrokenResourceError`` with no message ``from`` the
    ``ConnectionResetError``: the first OSError with a ``strerror`` along the
    ``__cause__``/``__context__`` chain says what happened ("Connection reset by
    peer"), as asyncio's exception does directly. Only the type's name is left
    when nothing says more.
    """
    if exc is None:
        return "the connection is closed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    message = str(exc)
    if message:
        return message
    seen = {id(exc)}
    link = exc.__cause__ or exc.__context__
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.strerror:
            return link.strerror
        link = link.__cause__ or link.__context__
    return type(exc).__name__
