"""The connection classes (stomp.py's ``stomp.connect``): a transport plus one protocol version.

``StompConnection10``, ``StompConnection11`` and ``StompConnection12`` take stomp.py 8's
constructor arguments and defaults. ``wait_timeout`` (keyword only) is a stompfast
addition: ``None`` (the default) keeps stomp.py's unbounded waits in ``disconnect(receipt)``
and the ``with`` exit; a number of seconds bounds them, all of the exit's waits together
(the receiver's end, the DISCONNECT's receipt, ``on_disconnected``), after which the
socket is closed. It also bounds the DISCONNECT's own write (a broker that stopped
reading): when that cannot finish in time, the socket is closed instead.
"""

from time import monotonic
from typing import Any, List, Optional, Tuple, Type

from . import utils
from .listener import Publisher, WaitingListener
from .protocol import Headers, Protocol10, Protocol11, Protocol12
from .transport import Transport

HostAndPort = Tuple[str, int]


class BaseConnection(Publisher):
    """What every connection class has: the listener registry, ``is_connected``, TLS, the context manager."""

    transport: Transport

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.wait_timeout = None
        self.disconnect_receipt_id: Optional[str] = None
        self.disconnect_listener: Optional[WaitingListener] = None

    @property
    def wait_timeout(self) -> Optional[float]:
        """The stompfast bound (seconds) on the waits stomp.py leaves unbounded; ``None``: stomp.py's."""
        return self.transport.disconnect_write_timeout

    @wait_timeout.setter
    def wait_timeout(self, seconds: Optional[float]) -> None:
        # the transport bounds the DISCONNECT write by it (a broker that stopped reading)
        self.transport.disconnect_write_timeout = seconds

    def __enter__(self) -> "BaseConnection":
        self.disconnect_receipt_id = utils.get_uuid()
        self.disconnect_listener = WaitingListener(self.disconnect_receipt_id)
        self.set_listener("ZZZZZ-disconnect-listener", self.disconnect_listener)
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        listener = self.disconnect_listener
        timeout = self.wait_timeout
        if timeout is None:
            # stomp.py's exit: every wait unbounded (for ever when the broker never answers
            # the DISCONNECT, or when disconnect() sent nothing because the connection was gone)
            self.disconnect(self.disconnect_receipt_id)
            if listener is not None:
                listener.wait_on_receipt()
                listener.wait_on_disconnected()
            return
        # wait_timeout: one deadline for the whole exit (disconnect()'s wait for the receiver
        # is bounded by wait_timeout, the receipt and on_disconnected by what is left of it)
        deadline = monotonic() + timeout
        try:
            self.disconnect(self.disconnect_receipt_id)
            if listener is not None:
                listener.wait_on_receipt(max(0.0, deadline - monotonic()))
                listener.wait_on_disconnected(max(0.0, deadline - monotonic()))
        finally:
            # whatever answered or not, no socket outlives the exit
            if self.transport.socket is not None:
                self.transport.disconnect_socket()

    def disconnect(self, receipt: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """Send DISCONNECT (the protocol class's)."""

    def set_listener(self, name: str, listener: Any) -> None:
        """Add (or replace) the listener called ``name``; listeners are called in the order of their names."""
        self.transport.set_listener(name, listener)

    def remove_listener(self, name: str) -> None:
        """Remove the listener called ``name``."""
        self.transport.remove_listener(name)

    def get_listener(self, name: str) -> Any:
        """The listener called ``name`` (the connection itself is ``"protocol-listener"``), or ``None``."""
        return self.transport.get_listener(name)

    def is_connected(self) -> bool:
        """Whether CONNECTED arrived and the connection has not ended since."""
        return self.transport.is_connected()

    def set_receipt(self, receipt_id: str, value: Optional[str]) -> None:
        """Remember which command ``receipt_id`` belongs to (the transport's)."""
        self.transport.set_receipt(receipt_id, value)

    def set_ssl(self, *args: Any, **kwargs: Any) -> None:
        """Use TLS for some ``(host, port)`` pairs: see :meth:`Transport.set_ssl`."""
        self.transport.set_ssl(*args, **kwargs)

    def get_ssl(self, host_and_port: Optional[HostAndPort] = None) -> Any:
        """The TLS settings for ``host_and_port``."""
        return self.transport.get_ssl(host_and_port)


def _disconnect(conn: Any, protocol: Type[Any], receipt: Optional[str], headers: Headers,
                keyword_headers: Any) -> None:
    protocol.disconnect(conn, receipt, headers, **keyword_headers)
    # only a caller-given receipt makes disconnect() wait for the receiver to end (stomp.py,
    # for ever); with wait_timeout that wait is bounded, and the socket closed when time is up
    if receipt is not None:
        if not conn.transport.stop(conn.wait_timeout):
            conn.transport.disconnect_socket()


class StompConnection10(BaseConnection, Protocol10):
    """A STOMP 1.0 connection (no heart-beats, no ``vhost``)."""

    def __init__(
        self,
        host_and_ports: Optional[List[HostAndPort]] = None,
        prefer_localhost: bool = True,
        try_loopback_connect: bool = True,
        reconnect_sleep_initial: float = 0.1,
        reconnect_sleep_increase: float = 0.5,
        reconnect_sleep_jitter: float = 0.1,
        reconnect_sleep_max: float = 60.0,
        reconnect_attempts_max: int = 3,
        timeout: Optional[float] = None,
        keepalive: Any = None,
        auto_decode: bool = True,
        encoding: str = "utf-8",
        auto_content_length: bool = True,
        bind_host_port: Optional[HostAndPort] = None,
        *,
        wait_timeout: Optional[float] = None,
    ) -> None:
        transport = Transport(host_and_ports, prefer_localhost, try_loopback_connect, reconnect_sleep_initial,
                              reconnect_sleep_increase, reconnect_sleep_jitter, reconnect_sleep_max,
                              reconnect_attempts_max, timeout, keepalive, None, auto_decode, encoding,
                              bind_host_port=bind_host_port)
        BaseConnection.__init__(self, transport)
        Protocol10.__init__(self, transport, auto_content_length)
        self.wait_timeout = wait_timeout

    def connect(self, *args: Any, **kwargs: Any) -> None:
        """Open the socket (``on_connecting``), then send CONNECT: see :meth:`Protocol10.connect`."""
        self.transport.start()
        Protocol10.connect(self, *args, **kwargs)

    def disconnect(self, receipt: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """Send DISCONNECT; with a ``receipt``, also wait for the receiver thread to end (see ``wait_timeout``)."""
        _disconnect(self, Protocol10, receipt, headers, keyword_headers)


class StompConnection11(BaseConnection, Protocol11):
    """A STOMP 1.1 connection (``Connection``, the default)."""

    _protocol: Any = Protocol11

    def __init__(
        self,
        host_and_ports: Optional[List[HostAndPort]] = None,
        prefer_localhost: bool = True,
        try_loopback_connect: bool = True,
        reconnect_sleep_initial: float = 0.1,
        reconnect_sleep_increase: float = 0.5,
        reconnect_sleep_jitter: float = 0.1,
        reconnect_sleep_max: float = 60.0,
        reconnect_attempts_max: int = 3,
        timeout: Optional[float] = None,
        heartbeats: Tuple[int, int] = (0, 0),
        keepalive: Any = None,
        vhost: Optional[str] = None,
        auto_decode: bool = True,
        encoding: str = "utf-8",
        auto_content_length: bool = True,
        heart_beat_receive_scale: float = 1.5,
        bind_host_port: Optional[HostAndPort] = None,
        *,
        wait_timeout: Optional[float] = None,
    ) -> None:
        transport = Transport(host_and_ports, prefer_localhost, try_loopback_connect, reconnect_sleep_initial,
                              reconnect_sleep_increase, reconnect_sleep_jitter, reconnect_sleep_max,
                              reconnect_attempts_max, timeout, keepalive, vhost, auto_decode, encoding,
                              bind_host_port=bind_host_port)
        BaseConnection.__init__(self, transport)
        self._protocol.__init__(self, transport, heartbeats, auto_content_length,
                                heart_beat_receive_scale=heart_beat_receive_scale)
        self.wait_timeout = wait_timeout

    def connect(self, *args: Any, **kwargs: Any) -> None:
        """Open the socket (``on_connecting``), then send STOMP: see :meth:`Protocol11.connect`."""
        self.transport.start()
        Protocol11.connect(self, *args, **kwargs)

    def disconnect(self, receipt: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """Send DISCONNECT; with a ``receipt``, also wait for the receiver thread to end (see ``wait_timeout``)."""
        _disconnect(self, Protocol11, receipt, headers, keyword_headers)


class StompConnection12(BaseConnection, Protocol12):
    """A STOMP 1.2 connection."""

    _protocol: Any = Protocol12

    __init__ = StompConnection11.__init__

    def connect(self, *args: Any, **kwargs: Any) -> None:
        """Open the socket (``on_connecting``), then send STOMP: see :meth:`Protocol12.connect`."""
        self.transport.start()
        Protocol12.connect(self, *args, **kwargs)

    def disconnect(self, receipt: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """Send DISCONNECT; with a ``receipt``, also wait for the receiver thread to end (see ``wait_timeout``)."""
        _disconnect(self, Protocol12, receipt, headers, keyword_headers)

    @staticmethod
    def is_eol(c: bytes) -> bool:
        """Whether ``c`` is a 1.2 line end (LF or CR LF)."""
        return c == b"\x0a" or c == b"\x0d\x0a"


__all__ = ["BaseConnection", "StompConnection10", "StompConnection11", "StompConnection12"]
