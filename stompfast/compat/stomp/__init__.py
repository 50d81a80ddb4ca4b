"""stomp.py 8's public API on stompfast's scanner, encoder and client code: change one import to switch.

::

    from stompfast.compat import stomp      # was: import stomp

    conn = stomp.Connection([("127.0.0.1", 61613)])
    conn.set_listener("", MyListener())
    conn.connect("guest", "guest", wait=True)

The names are stomp.py 8.x's: ``Connection`` (STOMP 1.1), ``Connection10/11/12`` and
their ``StompConnection1x`` aliases, the listeners (``ConnectionListener``,
``StatsListener``, ``WaitingListener``, ``PrintingListener``; ``TestListener`` is in
``listener``, as in stomp.py) and the
modules ``connect``, ``listener``, ``protocol``, ``transport``, ``utils``,
``exception``, ``constants``, ``logging`` (and ``log``, stomp.py 9's name for it).
:func:`stompfast.compat.install` makes ``import stomp`` give this package, for code that
cannot be edited. The frames are scanned and encoded by stompfast's scanner and encoder;
heart-beats are negotiated, a server's first bytes judged (is it STOMP at all?), the
connect backoff computed and the SSL context built by the same functions as the client's.
The sockets and threads are this package's own, as stomp.py's are. What differs from
stomp.py, and why: ``docs/migrating.md``.
"""

from typing import Any

from . import connect, constants, exception, listener, log, logging, protocol, transport, utils

#: the stomp.py release whose API this package follows
__version__ = "8.1.1"

Connection10 = connect.StompConnection10
StompConnection10 = Connection10
Connection11 = connect.StompConnection11
StompConnection11 = Connection11
Connection12 = connect.StompConnection12
StompConnection12 = Connection12
#: the default connection class: STOMP 1.1, as in stomp.py
Connection = connect.StompConnection11

ConnectionListener = listener.ConnectionListener
StatsListener = listener.StatsListener
WaitingListener = listener.WaitingListener
PrintingListener = listener.PrintingListener


class WSStompConnection:
    """stomp.py's STOMP-over-WebSocket connection: not provided by the compat layer (yet).

    Raises:
        UnsupportedFeatureException: always; use ``stompfast.Client("ws://...")`` instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise exception.UnsupportedFeatureException(
            "stompfast.compat.stomp has no WebSocket connection yet: use stompfast.Client('ws://host:port/path'),"
            " see docs/migrating.md"
        )


WSConnection = WSStompConnection

__all__ = [
    "Connection",
    "Connection10",
    "Connection11",
    "Connection12",
    "ConnectionListener",
    "PrintingListener",
    "StatsListener",
    "StompConnection10",
    "StompConnection11",
    "StompConnection12",
    "WSConnection",
    "WSStompConnection",
    "WaitingListener",
    "connect",
    "constants",
    "exception",
    "listener",
    "log",
    "logging",
    "protocol",
    "transport",
    "utils",
]
