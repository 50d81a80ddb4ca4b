"""stompfast: a fast, dependable STOMP 1.0/1.1/1.2 client for Python."""

from ._client import AsyncClient, AsyncTransaction, Receipt
from ._protocol import Message
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._scanner import FrameScanner, encode_frame
from ._subscription import AsyncSubscription
from ._sync import Client, Portal, ReceiptFuture, Subscription, SyncMessage, Transaction
from .errors import (
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

__all__ = [
    "AsyncClient",
    "AsyncSubscription",
    "AsyncTransaction",
    "AuthenticationError",
    "Client",
    "ClientClosedError",
    "ConfigurationError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionEvent",
    "ConnectionLostError",
    "FlowControlError",
    "Frame",
    "FrameScanner",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "Message",
    "Portal",
    "ProtocolError",
    "Receipt",
    "ReceiptFuture",
    "ReceiptTimeout",
    "ReceiveTimeout",
    "ReconnectPolicy",
    "RemoteProtocolError",
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
