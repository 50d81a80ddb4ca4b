"""stompfast: a fast, dependable STOMP 1.0/1.1/1.2 client for Python."""

from ._client import AsyncClient, AsyncTransaction, Receipt
from ._config import Endpoint
from ._consumer import AsyncConsumer, ConsumerStats, Nack
from ._health import DrainReport, Health
from ._protocol import Message, OversizedMessage
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._retry import RetryPolicy
from ._scanner import IMPLEMENTATION as _IMPLEMENTATION, FrameScanner, encode_frame
from ._stats import ClientStats, RttSummary
from ._subscription import AsyncSubscription
from ._sync import Client, Portal, ReceiptFuture, Subscription, SyncMessage, Transaction
from ._sync_consumer import Consumer
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
    RequestTimeout,
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

import logging as _logging
import types as _types

# A library adds no handler of its own: without logging configured, nothing is printed
# (not even WARNINGs through logging's last resort); configure logging to see the
# records of "stompfast.client" and "stompfast.reconnect" (docs/client.md, Logging).
_logging.getLogger("stompfast").addHandler(_logging.NullHandler())

SCANNER_IMPLEMENTATION: str = _IMPLEMENTATION
"""The frame scanner this process loaded: ``"c"`` (the compiled one, the default) or ``"python"``
(its pure-Python twin: ``STOMPFAST_NO_EXTENSIONS=1``, or an install without a C compiler)."""

__all__ = [
    "AlreadySettledError",
    "AsyncClient",
    "AsyncConsumer",
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
    "Consumer",
    "ConsumerStats",
    "DrainReport",
    "Endpoint",
    "FlowControlError",
    "Frame",
    "FrameScanner",
    "Health",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "Message",
    "MessageTooLargeError",
    "Nack",
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
    "RequestTimeout",
    "RetryPolicy",
    "RttSummary",
    "SCANNER_IMPLEMENTATION",
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

# Each public class and function shows as stompfast.X, the name users import, rather than as
# the private module that defines it: in reprs, help() and pickles (pickle finds stompfast.X
# by that name, the same object). httpx does the same. Left alone: the names of the
# public modules errors and frames (stompfast.errors.ConnectError is a name users import
# too), and the scanner pair, whose module says which implementation was loaded (_scanner_c
# or _scanner_py; the Cython type's __module__ cannot be set). Constants and other values keep
# theirs. The cost, for the classes changed: inspect.getsource() cannot find them (it reads
# __module__'s file), and typing.get_type_hints() evaluates their annotations in this module.
for _name in __all__:
    _obj = globals()[_name]
    if (
        isinstance(_obj, (type, _types.FunctionType))
        and _obj.__module__.startswith("stompfast._")
        and _name not in ("FrameScanner", "encode_frame")
    ):
        _obj.__module__ = "stompfast"
del _name, _obj
