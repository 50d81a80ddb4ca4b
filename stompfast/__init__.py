"""stompfast: a fast, dependable STOMP 1.0/1.1/1.2 client for Python."""

from ._client import AsyncClient, AsyncTransaction, Receipt
from ._protocol import Message
from ._scanner import FrameScanner, encode_frame
from ._subscription import AsyncSubscription
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
    "ClientClosedError",
    "ConfigurationError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionLostError",
    "FlowControlError",
    "Frame",
    "FrameScanner",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "Message",
    "ProtocolError",
    "Receipt",
    "ReceiptTimeout",
    "ReceiveTimeout",
    "RemoteProtocolError",
    "ServerError",
    "StaleMessageError",
    "StompConnectionError",
    "StompError",
    "StompTimeout",
    "TLSError",
    "TransactionError",
    "encode_frame",
]
