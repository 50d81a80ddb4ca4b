"""stompfast: a fast, dependable STOMP 1.0/1.1/1.2 client for Python."""

from ._scanner import FrameScanner, encode_frame
from .errors import (
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
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
    TransactionError,
)
from .frames import Frame

__version__ = "0.1.0.dev0"

__all__ = [
    "AuthenticationError",
    "ClientClosedError",
    "ConfigurationError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionLostError",
    "Frame",
    "FrameScanner",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "ProtocolError",
    "ReceiptTimeout",
    "ReceiveTimeout",
    "RemoteProtocolError",
    "ServerError",
    "StaleMessageError",
    "StompConnectionError",
    "StompError",
    "StompTimeout",
    "TransactionError",
    "encode_frame",
]
