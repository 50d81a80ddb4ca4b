"""The bytes of a session's outgoing frames, once the session has said what to send.

:class:`~stompfast._protocol.StompProtocol` checks every call against its state,
its subscriptions and its transactions and picks the ids; :class:`FrameEncoder`
then adds the headers this session's broker reads (Artemis's routing types,
``persistent``, prefetch, durable subscriptions) and encodes the frame with the
escaping negotiated at CONNECTED. The per-message paths (the common SEND and
ACK) stay in the session, which caches what this module builds for them.
Like the protocol core, nothing here imports anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from ._brokers import (
    PREFETCH_HEADERS,
    default_persistent,
    durable_headers,
    forget_headers,
    prefetch_headers,
    routing_type,
)
from ._protocol_rules import check_destination
from ._scanner import encode_frame
from .errors import LocalProtocolError

__all__ = ["FrameEncoder", "check_without_length", "send_headers"]


def send_headers(
    destination: str, content_type: Optional[str], transaction: Optional[str], receipt_id: Optional[str],
    extra: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    """The session's headers of a SEND, in wire order, then the caller's ``extra`` where they name none of ours."""
    h: Dict[str, Any] = {"destination": destination}
    if content_type is not None:
        h["content-type"] = content_type
    if transaction is not None:
        h["transaction"] = transaction
    if receipt_id is not None:
        h["receipt"] = receipt_id
    if extra:
        for name, value in extra.items():
            if name not in h:
                h[name] = value
    return h


def check_without_length(body: bytes, headers: Optional[Mapping[str, Any]]) -> None:
    """Refuse what a SEND without ``content-length`` cannot carry: a NUL in the body, or a content-length header."""
    nul = body.find(b"\0")
    if nul >= 0:
        raise LocalProtocolError(
            f"the body holds a NUL byte (at offset {nul}): without content-length the frame would end"
            " there; send it with content_length=True (a BytesMessage on ActiveMQ and Artemis)"
        )
    if headers and any(name.lower() == "content-length" for name in headers if isinstance(name, str)):
        raise LocalProtocolError("content_length=False and a content-length header contradict each other")


class FrameEncoder:
    """How one session writes its frames: the negotiated escaping and the headers of its broker.

    Args:
        persistent: the client's ``persistent=`` option (:func:`default_persistent`).
        routing_headers: on Artemis, /queue/ and /topic/ get their routing-type headers.

    Until :meth:`negotiated` the broker is unknown and frames are written with
    STOMP 1.0's rules (no escaping). Its fields change only there, at CONNECTED,
    so a thread may encode a SEND while the session is used elsewhere.
    """

    __slots__ = ("wire_version", "broker", "persistent", "routing_headers", "routing")

    def __init__(self, *, persistent: Optional[bool], routing_headers: bool) -> None:
        #: the escaping rules of what we send (ESCAPING_ON_1_0 may differ from the version)
        self.wire_version = "1.0"
        self.broker: Optional[str] = None
        self.persistent = persistent
        self.routing_headers = routing_headers
        # routing_headers, and the broker is Artemis
        self.routing = False

    def negotiated(self, wire_version: str, broker: Optional[str]) -> None:
        """The session settled: write with ``wire_version``'s escaping for ``broker`` from now on."""
        self.wire_version = wire_version
        self.broker = broker
        self.routing = self.routing_headers and broker == "artemis"

    def encode(self, command: str, headers: Any, body: bytes = b"") -> bytes:
        """The frame ``command`` with ``headers`` and ``body``, escaped by the negotiated rules."""
        return encode_frame(command, headers, body, self.wire_version)

    def add_routing(self, h: Dict[str, Any], name: str, destination: str) -> None:
        """On Artemis, ``name`` (destination-type or subscription-type) for a /queue/ or /topic/ destination.

        A stock Artemis makes new addresses MULTICAST: without it a ``/queue/``
        behaves as a topic (what is sent before a consumer exists is dropped).
        A header the caller set wins.
        """
        if self.routing and name not in h:
            kind = routing_type(destination)
            if kind is not None:
                h[name] = kind

    def send(self, h: Dict[str, Any], destination: str, body: bytes = b"") -> bytes:
        """A SEND of the session's headers ``h``, with the broker's routing and persistence headers after them."""
        # add_routing's check is inlined because a thread's receipted send runs this once per message.
        if self.routing and "destination-type" not in h:
            kind = routing_type(destination)
            if kind is not None:
                h["destination-type"] = kind
        # Every broker keeps a STOMP message that does not ask to be persistent in memory only,
        # where a broker restart loses it: default_persistent says which SENDs ask, unless h says.
        if "persistent" not in h and default_persistent(self.broker, destination, self.persistent):
            h["persistent"] = "true"
        return encode_frame("SEND", h, body, self.wire_version)

    def send_without_length(self, h: Dict[str, Any], destination: str, body: bytes) -> bytes:
        """The SEND of :meth:`send` without ``content-length`` (:func:`check_without_length` has passed)."""
        # An empty body gets no content-length from the encoder: its head is ours.
        head = self.send(h, destination)
        return b"".join((head[:-1], body, b"\0"))

    def send_head(self, destination: str, content_type: Optional[str]) -> bytes:
        """``"SEND\\n...\\n"`` for this destination and content type, without the blank line and NUL."""
        check_destination(destination)
        h = {"destination": destination}
        if content_type is not None:
            h["content-type"] = content_type
        return self.send(h, destination)[:-2]

    def subscribe(self, h: Dict[str, Any], destination: str, prefetch: Optional[int], durable: Optional[str]) -> bytes:
        """A SUBSCRIBE of the session's headers ``h`` with the broker's prefetch, durable and routing headers.

        A prefetch header already in ``h`` (any of PREFETCH_HEADERS) wins over
        ``prefetch``, as the caller's durable headers win over ours.
        """
        if prefetch is not None and not any(name in h for name in PREFETCH_HEADERS):
            h.update(prefetch_headers(self.broker, prefetch))
        if durable is not None:
            for name, value in durable_headers(self.broker, durable).items():
                h.setdefault(name, value)
        self.add_routing(h, "subscription-type", destination)
        return self.encode("SUBSCRIBE", h)

    def unsubscribe(self, subscription: str, forget: Optional[str], receipt_id: Optional[str]) -> bytes:
        """An UNSUBSCRIBE of ``subscription``; with ``forget`` (its durable name) one that deletes it too.

        ActiveMQ Classic refuses to delete a durable subscription that still has
        a consumer ("Durable consumer is in use"), so there the bytes are two
        frames: a plain UNSUBSCRIBE, then the one that deletes (with the receipt).
        """
        # STOMP 1.0 names the subscription by destination or id; id works on every broker.
        h: Dict[str, Any] = {"id": subscription}
        first = b""
        if forget is not None:
            if self.broker == "activemq":
                first = self.encode("UNSUBSCRIBE", {"id": subscription})
            h.update(forget_headers(self.broker, forget))
        if receipt_id is not None:
            h["receipt"] = receipt_id
        return first + self.encode("UNSUBSCRIBE", h)
