"""stomp.py's exceptions (``stomp.exception``), plus the one stompfast adds.

Tree::

    StompException (Exception)
    ├── ConnectionClosedException     the broker closed the connection (receiver thread)
    ├── NotConnectedException         a frame was sent with no connection
    ├── ConnectFailedException        no broker could be reached, or CONNECT was refused
    ├── InterruptedException          a read was interrupted (kept for stomp.py code)
    └── UnsupportedFeatureException   (stompfast) a stomp.py feature the compat layer lacks;
                                      also a NotImplementedError
"""


class StompException(Exception):
    """The root: every exception of this module derives from it."""


class ConnectionClosedException(StompException):
    """The connection was closed by the broker (raised inside the receiver thread)."""


class NotConnectedException(StompException):
    """There is no connection to send on."""


class ConnectFailedException(StompException):
    """No broker answered within ``reconnect_attempts_max`` attempts, or CONNECT was answered with ERROR."""


class InterruptedException(StompException):
    """A socket read was interrupted; the read is retried."""


class UnsupportedFeatureException(StompException, NotImplementedError):
    """A part of stomp.py's API that ``stompfast.compat.stomp`` does not provide (yet).

    ``docs/migrating.md`` lists each one. Catching ``NotImplementedError`` catches it too.
    """
