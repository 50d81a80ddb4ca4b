"""stompfast: a fast, dependable STOMP 1.0/1.1/1.2 client for Python."""

from ._client import AsyncClient, AsyncTransaction, Receipt
from ._config import Endpoint
from ._protocol import Message, OversizedMessage
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._scanner import FrameScanner, encode_frame
from ._stats import ClientStats, RttSummary
from ._subscription import AsyncSubscription
from ._sync import Client, Portal, ReceiptFuture, Subscription, SyncMessage, Transaction
from .errors import (
    AlreadySettledError,
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    FlowControlError,
    HeartbeatTimeout,
    LimitExceededError,
    LocalProtocolError,
    MessageTooLargeError,
    NotStompError,
    ProtocolError,
    ReceiptTimeout,
    ReceiveTimeout,
    RemoteProtocolError,
    ServerError,
    StaleMessageError,
    StompConnectionError,
    StompError,
    StompTimeout,
    TLSError,
    TransactionError,
)
from .frames import Frame

__version__ = "0.1.0.dev0"

# A library adds no handler of its own: without logging configured, nothing is printed
# (not even WARNINGs through logging's last resort); configure logging to see the
# records of "stompfast.client" and "stompfast.reconnect" (docs/client.md, Logging).
import logging as _logging

_logging.getLogger("stompfast").addHandler(_logging.NullHandler())

__all__ = [
    "AlreadySettledError",
    "AsyncClient",
    "AsyncSubscription",
    "AsyncTransaction",
    "AuthenticationError",
    "Client",
    "ClientClosedError",
    "ClientStats",
    "ConfigurationError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionEvent",
    "ConnectionLostError",
    "Endpoint",
    "FlowControlError",
    "Frame",
    "FrameScanner",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "Message",
    "MessageTooLargeError",
    "NotStompError",
    "OversizedMessage",
    "Portal",
    "ProtocolError",
    "Receipt",
    "ReceiptFuture",
    "ReceiptTimeout",
    "ReceiveTimeout",
    "ReconnectPolicy",
    "RemoteProtocolError",
    "RttSummary",
    "ServerError",
    "StaleMessageError",
    "StompConnectionError",
    "StompError",
    "StompTimeout",
    "Subscription",
    "SyncMessage",
    "TLSError",
    "Transaction",
    "TransactionError",
    "encode_frame",
]
