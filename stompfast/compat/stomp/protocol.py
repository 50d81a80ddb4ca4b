"""The STOMP 1.0, 1.1 and 1.2 command methods (stomp.py's ``stomp.protocol``).

Each method builds a :class:`~stompfast.compat.stomp.utils.Frame` exactly as stomp.py
does (the caller's ``headers`` dict, then ``**keyword_headers``, then the method's own
headers win) and hands it to the transport, which calls ``on_send`` and writes it. Ids
the caller chooses (receipts, transactions, subscriptions) go on the wire unchanged;
escaping is the encoder's (:func:`stompfast.encode_frame`, per version).
"""

from typing import Any, Dict, Optional, Tuple

from . import logging as log, utils
from .constants import (
    CMD_ABORT,
    CMD_ACK,
    CMD_BEGIN,
    CMD_COMMIT,
    CMD_CONNECT,
    CMD_DISCONNECT,
    CMD_NACK,
    CMD_SEND,
    CMD_STOMP,
    CMD_SUBSCRIBE,
    CMD_UNSUBSCRIBE,
    HDR_ACCEPT_VERSION,
    HDR_ACK,
    HDR_CONTENT_LENGTH,
    HDR_CONTENT_TYPE,
    HDR_DESTINATION,
    HDR_HOST,
    HDR_ID,
    HDR_LOGIN,
    HDR_MESSAGE_ID,
    HDR_PASSCODE,
    HDR_RECEIPT,
    HDR_SUBSCRIPTION,
    HDR_TRANSACTION,
)
from .exception import ConnectFailedException
from .listener import ConnectionListener, HeartbeatListener

Headers = Optional[Dict[str, Any]]


def _required(value: Any, name: str) -> None:
    # stomp.py asserts these; an assert vanishes under python -O, so this raises instead
    if value is None:
        raise AssertionError("'%s' is required" % name)


class _Common:
    """The commands whose frames are the same in every version."""

    transport: Any
    auto_content_length: bool

    def send_frame(self, cmd: str, headers: Headers = None, body: Any = "") -> None:
        """Send one frame through the transport (``on_send`` first)."""
        self.transport.transmit(utils.Frame(cmd, headers if headers is not None else {}, body))

    def abort(self, transaction: str, headers: Headers = None, **keyword_headers: Any) -> None:
        """ABORT ``transaction``."""
        _required(transaction, "transaction")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_TRANSACTION] = transaction
        self.send_frame(CMD_ABORT, headers)

    def begin(self, transaction: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> str:
        """BEGIN a transaction (a new UUID when ``transaction`` is empty); returns its id."""
        headers = utils.merge_headers([headers, keyword_headers])
        if not transaction:
            transaction = utils.get_uuid()
        headers[HDR_TRANSACTION] = transaction
        self.send_frame(CMD_BEGIN, headers)
        return transaction

    def commit(self, transaction: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """COMMIT ``transaction``."""
        _required(transaction, "transaction")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_TRANSACTION] = transaction
        self.send_frame(CMD_COMMIT, headers)

    def disconnect(self, receipt: Optional[str] = None, headers: Headers = None, **keyword_headers: Any) -> None:
        """Send DISCONNECT with ``receipt`` (a new UUID if none); its RECEIPT closes the socket.

        Does nothing when not connected.
        """
        if not self.transport.is_connected():
            log.debug("not sending disconnect, already disconnected")
            return
        headers = utils.merge_headers([headers, keyword_headers])
        rec = receipt or utils.get_uuid()
        headers[HDR_RECEIPT] = rec
        self.transport.set_receipt(rec, CMD_DISCONNECT)
        self.send_frame(CMD_DISCONNECT, headers)

    def send(self, destination: str, body: Any, content_type: Optional[str] = None, headers: Headers = None,
             **keyword_headers: Any) -> None:
        """SEND ``body`` (``str``, sent as UTF-8, or ``bytes``) to ``destination``.

        With ``auto_content_length`` (the default) a non-empty body gets ``content-length``.
        """
        if destination is None or body is None:
            _required(destination, "destination")
            _required(body, "body")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_DESTINATION] = destination
        if content_type:
            headers[HDR_CONTENT_TYPE] = content_type
        if self.auto_content_length and body and HDR_CONTENT_LENGTH not in headers:
            headers[HDR_CONTENT_LENGTH] = len(body)
        self.send_frame(CMD_SEND, headers, body)

class Protocol10(_Common, ConnectionListener):
    """STOMP 1.0: no ``id`` needed on SUBSCRIBE, ACK by ``message-id``, no NACK, no heart-beats."""

    def __init__(self, transport: Any, auto_content_length: bool = True) -> None:
        self.transport = transport
        self.auto_content_length = auto_content_length
        transport.set_listener("protocol-listener", self)
        self.version = "1.0"
        transport.version = "1.0"

    def ack(self, id: str, transaction: Optional[str] = None, receipt: Optional[str] = None) -> None:
        """ACK the message whose ``message-id`` is ``id``."""
        _required(id, "id")
        headers: Dict[str, Any] = {HDR_MESSAGE_ID: id}
        if transaction:
            headers[HDR_TRANSACTION] = transaction
        if receipt:
            headers[HDR_RECEIPT] = receipt
        self.send_frame(CMD_ACK, headers)

    def connect(self, username: Optional[str] = None, passcode: Optional[str] = None, wait: bool = False,
                headers: Headers = None, **keyword_headers: Any) -> None:
        """Send CONNECT; with ``wait=True`` block until CONNECTED (unbounded, as in stomp.py).

        Raises:
            ConnectFailedException: (``wait=True``) the broker answered ERROR or closed the connection.
        """
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_ACCEPT_VERSION] = self.version
        if username is not None:
            headers[HDR_LOGIN] = username
        if passcode is not None:
            headers[HDR_PASSCODE] = passcode
        self.send_frame(CMD_CONNECT, headers)
        if wait:
            self.transport.wait_for_connection()
            if self.transport.connection_error:
                raise ConnectFailedException()

    def subscribe(self, destination: str, id: Optional[str] = None, ack: str = "auto", headers: Headers = None,
                  **keyword_headers: Any) -> None:
        """SUBSCRIBE to ``destination`` (``ack``: auto, client or client-individual)."""
        _required(destination, "destination")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_DESTINATION] = destination
        if id:
            headers[HDR_ID] = id
        headers[HDR_ACK] = ack
        self.send_frame(CMD_SUBSCRIBE, headers)

    def unsubscribe(self, destination: Optional[str] = None, id: Optional[str] = None, headers: Headers = None,
                    **keyword_headers: Any) -> None:
        """UNSUBSCRIBE by ``id`` or by ``destination``."""
        if id is None and destination is None:
            raise AssertionError("'id' or 'destination' is required")
        headers = utils.merge_headers([headers, keyword_headers])
        if id:
            headers[HDR_ID] = id
        if destination:
            headers[HDR_DESTINATION] = destination
        self.send_frame(CMD_UNSUBSCRIBE, headers)


class Protocol11(_Common, HeartbeatListener, ConnectionListener):
    """STOMP 1.1: SUBSCRIBE needs an ``id``, ACK/NACK name ``message-id`` and ``subscription``, heart-beats.

    ``connect`` sends STOMP (``with_connect_command=True``: CONNECT) and ``host`` only when
    ``vhost`` was given.
    """

    def __init__(self, transport: Any, heartbeats: Tuple[int, int] = (0, 0), auto_content_length: bool = True,
                 heart_beat_receive_scale: float = 1.5) -> None:
        HeartbeatListener.__init__(self, transport, heartbeats, heart_beat_receive_scale)
        self.transport = transport
        self.auto_content_length = auto_content_length
        transport.set_listener("protocol-listener", self)
        self.version = "1.1"
        transport.version = "1.1"

    def ack(self, id: str, subscription: str, transaction: Optional[str] = None,
            receipt: Optional[str] = None) -> None:
        """ACK message ``id`` of ``subscription``."""
        _required(id, "id")
        _required(subscription, "subscription")
        headers: Dict[str, Any] = {HDR_MESSAGE_ID: id, HDR_SUBSCRIPTION: subscription}
        if transaction:
            headers[HDR_TRANSACTION] = transaction
        if receipt:
            headers[HDR_RECEIPT] = receipt
        self.send_frame(CMD_ACK, headers)

    def nack(self, id: str, subscription: str, transaction: Optional[str] = None, receipt: Optional[str] = None,
             **keyword_headers: Any) -> None:
        """NACK message ``id`` of ``subscription``."""
        _required(id, "id")
        _required(subscription, "subscription")
        headers = utils.merge_headers([{HDR_MESSAGE_ID: id, HDR_SUBSCRIPTION: subscription}, keyword_headers])
        if transaction:
            headers[HDR_TRANSACTION] = transaction
        if receipt:
            headers[HDR_RECEIPT] = receipt
        self.send_frame(CMD_NACK, headers)

    def _host(self) -> Optional[str]:
        return self.transport.vhost or None

    def connect(self, username: Optional[str] = None, passcode: Optional[str] = None, wait: bool = False,
                headers: Headers = None, with_connect_command: bool = False, **keyword_headers: Any) -> None:
        """Send STOMP (or CONNECT); with ``wait=True`` block until CONNECTED (unbounded, as in stomp.py).

        Raises:
            ConnectFailedException: (``wait=True``) the broker answered ERROR or closed the connection.
        """
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_ACCEPT_VERSION] = self.version
        host = self._host()
        if host:
            headers[HDR_HOST] = host
        if username is not None:
            headers[HDR_LOGIN] = username
        if passcode is not None:
            headers[HDR_PASSCODE] = passcode
        self.send_frame(CMD_CONNECT if with_connect_command else CMD_STOMP, headers)
        if wait:
            self.transport.wait_for_connection()
            if self.transport.connection_error:
                raise ConnectFailedException()

    def subscribe(self, destination: str, id: str, ack: str = "auto", headers: Headers = None,
                  **keyword_headers: Any) -> None:
        """SUBSCRIBE to ``destination`` as ``id`` (``ack``: auto, client or client-individual)."""
        _required(destination, "destination")
        _required(id, "id")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_DESTINATION] = destination
        headers[HDR_ID] = id
        headers[HDR_ACK] = ack
        self.send_frame(CMD_SUBSCRIBE, headers)

    def unsubscribe(self, id: str, headers: Headers = None, **keyword_headers: Any) -> None:
        """UNSUBSCRIBE subscription ``id``."""
        _required(id, "id")
        headers = utils.merge_headers([headers, keyword_headers])
        headers[HDR_ID] = id
        self.send_frame(CMD_UNSUBSCRIBE, headers)


class Protocol12(Protocol11):
    """STOMP 1.2: ACK/NACK by the MESSAGE's ``ack`` header value alone; ``host`` always sent.

    ``host`` is the ``vhost`` if given, else the host name connected to (stomp.py's
    rule: RabbitMQ refuses ``host:127.0.0.1`` unless such a vhost exists, so pass
    ``vhost="/"`` there).
    """

    def __init__(self, transport: Any, heartbeats: Tuple[int, int] = (0, 0), auto_content_length: bool = True,
                 heart_beat_receive_scale: float = 1.5) -> None:
        Protocol11.__init__(self, transport, heartbeats, auto_content_length, heart_beat_receive_scale)
        self.version = "1.2"
        transport.version = "1.2"

    def _host(self) -> Optional[str]:
        current = self.transport.current_host_and_port
        return self.transport.vhost or (current[0] if current else None)

    def ack(self, id: str, transaction: Optional[str] = None,  # type: ignore[override]
            receipt: Optional[str] = None) -> None:
        """ACK the message whose ``ack`` header is ``id``."""
        _required(id, "id")
        headers: Dict[str, Any] = {HDR_ID: id}
        if transaction:
            headers[HDR_TRANSACTION] = transaction
        if receipt:
            headers[HDR_RECEIPT] = receipt
        self.send_frame(CMD_ACK, headers)

    def nack(self, id: str, transaction: Optional[str] = None,  # type: ignore[override]
             receipt: Optional[str] = None, **keyword_headers: Any) -> None:
        """NACK the message whose ``ack`` header is ``id``."""
        _required(id, "id")
        headers = utils.merge_headers([{HDR_ID: id}, keyword_headers])
        if transaction:
            headers[HDR_TRANSACTION] = transaction
        if receipt:
            headers[HDR_RECEIPT] = receipt
        self.send_frame(CMD_NACK, headers)
