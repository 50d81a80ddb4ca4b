"""The test broker's data model: messages, queues, deliveries, subscriptions, its counters and faults.

These are the values the broker's parts pass each other (see the theory of operation in
:mod:`stompfast.testing._broker`). Each class changes only its own fields; another part
that needs one changed calls a method of the owner, so that a rule such as "a requeued
message is marked redelivered" or "the round-robin turn moves past the consumer served"
is kept in one place.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Deque, List, Mapping, Optional, Sequence, Tuple, Union

from ..frames import Frame

if TYPE_CHECKING:
    from ._broker_conn import Connection

__all__ = [
    "ACK_MODES", "MESSAGE_OVERHEAD", "NOT_COPIED", "VERSIONS", "BrokerStats", "Delivery", "Faults", "Message",
    "Queue", "Subscription", "Tally", "Violation", "canonical",
]

VERSIONS = ("1.0", "1.1", "1.2")
ACK_MODES = ("auto", "client", "client-individual")
#: Headers of a SEND that are not copied into the MESSAGE frames it produces.
NOT_COPIED = frozenset(
    {"receipt", "transaction", "content-length", "destination", "message-id", "subscription", "ack",
     "redelivered"}
)
#: Bytes a stored message counts on top of its body, destination and headers: the Python objects
#: holding it (measured with tracemalloc: about 280 bytes for a small message with one header).
MESSAGE_OVERHEAD = 256


class Violation(Exception):
    """A client broke a rule: answered with ERROR (and ``receipt-id``), then the close."""

    def __init__(self, message: str, body: str = "", headers: Sequence[Tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        self.headers = list(headers)


def canonical(destination: str) -> Tuple[str, str]:
    """``(kind, key)`` for a destination: kind ``"queue"`` or ``"topic"``; raises :class:`Violation`."""
    for prefix, kind, canon in (
        ("/queue/", "queue", "/queue/"),
        ("/amq/queue/", "queue", "/queue/"),
        ("/topic/", "topic", "/topic/"),
        ("/exchange/", "topic", "/exchange/"),
    ):
        if destination.startswith(prefix) and len(destination) > len(prefix):
            return kind, canon + destination[len(prefix):]
    raise Violation(
        "Unknown destination",
        f"'{destination}' is not a valid destination.\n"
        "Valid destination types are: /queue/, /amq/queue/, /topic/, /exchange/.\n",
    )


@dataclass(frozen=True)
class BrokerStats:
    """A snapshot of the broker's counters (:attr:`Broker.stats`).

    Attributes:
        frames_in: client frames received, by command (heart-beats excluded).
        frames_out: frames the broker sent, by command (a MESSAGE cut by
            :meth:`Broker.drop_mid_frame` counts; withheld receipts do not).
        heartbeats_in: reads that held only EOLs between frames.
        heartbeats_out: heart-beat EOLs sent.
        connections_accepted: TCP connections accepted (refused ones included).
        connections_refused: connections closed at once by :meth:`Broker.refuse_connections`.
        messages_discarded: messages thrown away: NACKed with ``nack="drop"``, sent to a
            topic without subscribers, unacked topic copies of an ended subscription,
            auto-acked messages cut by :meth:`Broker.drop_mid_frame`.
        receipts_withheld: receipts not sent because of :meth:`Broker.withhold_receipts`.
        tls_handshakes_failed: TLS handshakes that failed (``ssl_context`` brokers); such
            connections never count as accepted.
        stored_bytes: what the messages the broker holds now (ready, or delivered and
            unacked) count against ``max_bytes`` (see :class:`Broker`).
        stored_messages: how many messages those are (each topic copy counts).
        producers_blocked: connections held now by flow control (a SEND waits for room).
        sends_refused: SEND and COMMIT frames refused with ERROR because the broker was
            full (``when_full="error"``).
    """

    frames_in: Mapping[str, int] = field(default_factory=dict)
    frames_out: Mapping[str, int] = field(default_factory=dict)
    heartbeats_in: int = 0
    heartbeats_out: int = 0
    connections_accepted: int = 0
    connections_refused: int = 0
    messages_discarded: int = 0
    receipts_withheld: int = 0
    tls_handshakes_failed: int = 0
    stored_bytes: int = 0
    stored_messages: int = 0
    producers_blocked: int = 0
    sends_refused: int = 0


class Message:
    """One stored message: a SEND routed to a queue, or one topic subscription's copy of it."""

    __slots__ = ("id", "destination", "headers", "body", "redelivered", "size")

    def __init__(self, id: str, destination: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        self.id = id
        self.destination = destination
        self.headers = headers
        self.body = body
        self.redelivered = False
        #: What it counts against ``max_bytes`` (characters of header text count as bytes).
        self.size = (len(body) + len(destination) + sum(len(k) + len(v) for k, v in headers)
                     + MESSAGE_OVERHEAD)

    def mark_redelivered(self) -> None:
        """Note that it was delivered once and came back, so that its next MESSAGE says ``redelivered:true``."""
        self.redelivered = True


class Queue:
    """Ready messages and the subscriptions consuming them (a topic subscription has a private one)."""

    __slots__ = ("name", "ready", "consumers", "next", "private")

    def __init__(self, name: str, private: bool = False) -> None:
        self.name = name
        self.ready: Deque[Message] = deque()
        self.consumers: List[Subscription] = []
        # The index in consumers whose turn it is, so that deliveries go round robin.
        self.next = 0
        self.private = private

    def put(self, message: Message) -> None:
        """Append a new message at the back."""
        self.ready.append(message)

    def pop(self) -> Message:
        """Take the message at the front (the next to deliver)."""
        return self.ready.popleft()

    def requeue(self, messages: Sequence[Message]) -> None:
        """Put messages that came back at the front, in the order given, marked redelivered."""
        for message in reversed(messages):
            message.mark_redelivered()
            self.ready.appendleft(message)

    def take_ready(self) -> List[Message]:
        """Remove every ready message and return them, oldest first."""
        messages = list(self.ready)
        self.ready.clear()
        return messages

    def add_consumer(self, sub: Subscription) -> None:
        self.consumers.append(sub)

    def remove_consumer(self, sub: Subscription) -> None:
        """Remove a consumer, keeping the turn on the consumer that had it."""
        index = self.consumers.index(sub)
        del self.consumers[index]
        if index < self.next:
            self.next -= 1

    def next_taker(self) -> Optional[Subscription]:
        """The next consumer, round robin, that can take a message now (the turn moves past it); or None."""
        consumers = self.consumers
        n = len(consumers)
        if not n:
            return None
        start = self.next % n
        for i in range(n):
            sub = consumers[(start + i) % n]
            if sub.can_take():
                self.next = (start + i + 1) % n
                return sub
        return None


class Delivery:
    """A message sent to a ``client`` or ``client-individual`` subscription and not yet acked or nacked."""

    __slots__ = ("message", "ack_id", "sub")

    def __init__(self, message: Message, ack_id: str, sub: Subscription) -> None:
        self.message = message
        self.ack_id = ack_id
        self.sub = sub


class Subscription:
    """One SUBSCRIBE of one connection: where it reads from, its ack mode and prefetch, its unacked deliveries."""

    __slots__ = ("conn", "id", "destination", "key", "ack", "prefetch", "queue", "topic", "unacked")

    def __init__(self, conn: Connection, id: Optional[str], destination: str, key: str, ack: str,
                 prefetch: int, queue: Queue, topic: Optional[str]) -> None:
        self.conn = conn
        self.id = id
        self.destination = destination
        # The canonical destination, under which the broker finds the queue or topic.
        self.key = key
        self.ack = ack
        # Zero means unlimited, as a missing prefetch header does.
        self.prefetch = prefetch
        self.queue = queue
        # The canonical topic name, or None for a queue subscription (which has no private queue).
        self.topic = topic
        self.unacked: OrderedDict[str, Delivery] = OrderedDict()

    def can_take(self) -> bool:
        """Whether a message can be delivered to it now: its connection takes frames and prefetch allows."""
        if not self.conn.can_take():
            return False
        return not (self.ack != "auto" and self.prefetch and len(self.unacked) >= self.prefetch)

    def track(self, delivery: Delivery) -> None:
        """Keep a delivery unacked, here and in its connection's indexes (ACK frames name it by either id)."""
        self.unacked[delivery.ack_id] = delivery
        self.conn.track(delivery)

    def forget(self, delivery: Delivery) -> None:
        """Stop keeping a delivery unacked (acked, nacked, or the subscription ended)."""
        self.unacked.pop(delivery.ack_id, None)
        self.conn.untrack(delivery)

    def holds(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` is still unacked here (a transaction's ACK may name one settled since)."""
        return self.unacked.get(delivery.ack_id) is delivery

    def unacked_through(self, delivery: Delivery) -> List[Delivery]:
        """The unacked deliveries up to ``delivery`` included, oldest first: what a ``client``-mode ACK covers."""
        batch = []
        for d in self.unacked.values():
            batch.append(d)
            if d is delivery:
                break
        return batch

    def forget_all(self) -> List[Delivery]:
        """Stop keeping every unacked delivery; return them in delivery order."""
        pending = list(self.unacked.values())
        for d in pending:
            self.forget(d)
        return pending


class Tally:
    """What the broker counts and records: frames in and out by command, events, the frames received."""

    def __init__(self, record: bool, record_limit: int) -> None:
        self.frames_in: Counter[str] = Counter()
        self.frames_out: Counter[str] = Counter()
        # Heart-beats, accepted and refused connections, discarded messages, withheld receipts...
        self.events: Counter[str] = Counter()
        self.recording = record
        self.received: Deque[Frame] = deque(maxlen=record_limit)

    def frame_in(self, frame: Frame) -> None:
        self.frames_in[frame.command] += 1
        if self.recording:
            self.received.append(frame)

    def frame_out(self, command: str) -> None:
        self.frames_out[command] += 1

    def count(self, event: str, n: int = 1) -> None:
        self.events[event] += n

    def clear_received(self) -> None:
        self.received.clear()


class Faults:
    """The faults the broker is asked to inject; the parts that inject one read it or take it from here."""

    def __init__(self) -> None:
        self.withhold = False
        self.receipt_delay = 0.0
        self.stopped_heartbeats = False
        self.cut_next_message = False
        # Connections still to refuse; math.inf means until cleared.
        self.refuse: Union[int, float] = 0
        self.connect_errors: Union[int, float] = 0
        self.connect_error_message = ""
        self.connect_error_body = ""

    def withhold_receipts(self, on: bool) -> None:
        self.withhold = on

    def delay_receipts(self, seconds: float) -> None:
        self.receipt_delay = seconds

    def stop_heartbeats(self, stopped: bool) -> None:
        self.stopped_heartbeats = stopped

    def arm_cut(self) -> None:
        self.cut_next_message = True

    def refuse_connections(self, n: Union[int, float]) -> None:
        self.refuse = n

    def error_on_connect(self, message: str, n: Union[int, float], body: str) -> None:
        self.connect_errors = n
        self.connect_error_message = message
        self.connect_error_body = body

    def take_refusal(self) -> bool:
        """Whether to refuse the connection just accepted (one of the ``n`` asked for is used up)."""
        if self.refuse > 0:
            self.refuse -= 1
            return True
        return False

    def take_connect_error(self) -> Optional[Tuple[str, str]]:
        """``(message, body)`` of the ERROR to answer the CONNECT just received with, or None."""
        if self.connect_errors > 0:
            self.connect_errors -= 1
            return self.connect_error_message, self.connect_error_body
        return None

    def take_cut(self) -> bool:
        """Whether to cut the MESSAGE about to be sent (the fault is armed for one frame only)."""
        if self.cut_next_message:
            self.cut_next_message = False
            return True
        return False

    def clear(self) -> None:
        self.withhold = False
        self.receipt_delay = 0.0
        self.cut_next_message = False
        self.refuse = 0
        self.connect_errors = 0
        self.stopped_heartbeats = False


# Shown as stompfast.testing.BrokerStats, the name users import (reprs, help(), pickles),
# as stompfast/__init__.py does for its names; set here because stompfast.testing imports
# this module only on first use.
BrokerStats.__module__ = "stompfast.testing"
