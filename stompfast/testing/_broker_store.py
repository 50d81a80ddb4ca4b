"""The test broker's destinations: queues and topics, routing and delivery, the memory limit.

One :class:`Store` per broker holds everything that outlives a connection: the queues by
name, the subscriptions of each topic, what the stored messages count against
``max_bytes`` and the producers held until there is room. The connections route, deliver,
settle and unsubscribe through it; it writes the frames a delivery makes through the
connection's own methods. See the theory of operation in :mod:`stompfast.testing._broker`.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

import anyio

from ._broker_model import NOT_COPIED, Delivery, Faults, Message, Queue, Subscription, Tally, Violation, canonical

if TYPE_CHECKING:
    from ._broker_conn import Connection

__all__ = ["Store"]


class Store:
    """The broker's queues, topics and stored messages, and the signal that broker state changed."""

    def __init__(self, tally: Tally, faults: Faults, nack: str, max_bytes: Optional[int]) -> None:
        self.tally = tally
        self.faults = faults
        self.nack = nack
        self.max_bytes = max_bytes
        self.queues: Dict[str, Queue] = {}
        self.topics: Dict[str, List[Subscription]] = {}
        # What the stored messages count against max_bytes, and how many they are.
        self.stored = 0
        self.stored_messages = 0
        # Connections waiting for room (flow control).
        self.blocked = 0
        # Set when the total drops below max_bytes, waking the held producers.
        self._space: Optional[anyio.Event] = None
        # Set after every change of broker state, waking Broker.wait_for.
        self._changed: Optional[anyio.Event] = None
        # Message ids and ack ids share one counter, so that a test can predict both.
        self._counter = itertools.count(1)

    # ------------------------------------------------------------------ changes

    def touch(self) -> None:
        """Say that broker state changed (a wait_for re-evaluates its predicate)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self) -> None:
        """Return at the next :meth:`touch`."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    # ------------------------------------------------------------------ introspection

    def queues_of(self, destination: str) -> List[Queue]:
        """The queues holding a destination's messages (a topic's are its subscriptions' private ones)."""
        try:
            kind, key = canonical(destination)
        except Violation:
            raise ValueError(f"not a destination this broker serves: {destination!r}") from None
        if kind == "queue":
            q = self.queues.get(key)
            return [q] if q is not None else []
        return [s.queue for s in self.topics.get(key, ())]

    def queue_depth(self, destination: str) -> int:
        return sum(len(q.ready) for q in self.queues_of(destination))

    def unacked(self, destination: str) -> int:
        return sum(len(s.unacked) for q in self.queues_of(destination) for s in q.consumers)

    def consumers(self, destination: str) -> int:
        return sum(len(q.consumers) for q in self.queues_of(destination))

    # ------------------------------------------------------------------ server-side actions

    def publish(self, destination: str, body: bytes, headers: Mapping[str, str]) -> None:
        """Route a message as a SEND would; ``RuntimeError`` when full, ``ValueError`` for a bad destination."""
        if self.full():
            raise RuntimeError(
                f"Memory limit reached: the broker holds {self.stored} bytes of messages, its limit is"
                f" {self.max_bytes} (max_bytes): consume messages, then publish again"
            )
        try:
            self.route(destination, [(k, v) for k, v in headers.items() if k not in NOT_COPIED], body)
        except Violation:
            raise ValueError(f"not a destination this broker serves: {destination!r}") from None
        self.touch()

    def purge(self, destination: str) -> int:
        """Discard the ready messages of a destination; return how many there were."""
        n = 0
        for q in self.queues_of(destination):
            for message in q.take_ready():
                n += 1
                self.release(message)
        self.touch()
        return n

    # ------------------------------------------------------------------ memory limit

    def full(self) -> bool:
        return self.max_bytes is not None and self.stored >= self.max_bytes

    async def wait_for_space(self, conn: Connection) -> None:
        """Return once the stored messages count below ``max_bytes``, or ``conn`` is closing."""
        self.blocked += 1
        self.touch()
        try:
            while self.full() and conn.closing is None:
                if self._space is None:
                    self._space = anyio.Event()
                await self._space.wait()
        finally:
            self.blocked -= 1
            self.touch()

    def check_space(self) -> None:
        """``when_full="error"``: refuse a frame that would store messages while the broker is full."""
        if self.full():
            self.tally.count("sends_refused")
            raise Violation(
                "Memory limit reached",
                f"The broker holds {self.stored} bytes of messages, its limit is {self.max_bytes} "
                "(max_bytes): consume messages, then send again.\n",
            )

    def wake_producers(self) -> None:
        """Let every held producer look again (there may be room, or its connection is closing)."""
        if self._space is not None:
            self._space.set()
            self._space = None

    def release(self, message: Message) -> None:
        """Forget a stored message (consumed or discarded); wake held producers once there is room."""
        self.stored -= message.size
        self.stored_messages -= 1
        if self._space is not None and not self.full():
            self.wake_producers()

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, conn: Connection, sub_id: Optional[str], destination: str, ack: str,
                  prefetch: int) -> Subscription:
        """A new subscription, consuming from its queue (a private one on a topic); nothing delivered yet.

        The connection files the subscription under its id first, then calls
        :meth:`dispatch`, so that the first MESSAGE finds it there.
        """
        kind, key = canonical(destination)
        if kind == "queue":
            queue = self.queues.get(key)
            if queue is None:
                queue = self.queues[key] = Queue(key)
            topic = None
        else:
            queue = Queue(key, private=True)
            topic = key
        sub = Subscription(conn, sub_id, destination, key, ack, prefetch, queue, topic)
        queue.add_consumer(sub)
        if topic is not None:
            self.topics.setdefault(topic, []).append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """End a subscription its connection let go of: requeue its unacked queue messages, or drop topic copies."""
        queue = sub.queue
        queue.remove_consumer(sub)
        pending = [d.message for d in sub.forget_all()]
        if sub.topic is not None:
            subs = self.topics.get(sub.topic, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self.topics.pop(sub.topic, None)
            self.tally.count("discarded", len(pending))
            # The private queue goes with the subscription, and with it what it still held.
            for message in itertools.chain(pending, queue.take_ready()):
                self.release(message)
            return
        # Unacked messages go back to the front of the queue, in delivery order, for redelivery.
        queue.requeue(pending)
        self.dispatch(queue)

    # ------------------------------------------------------------------ routing and delivery

    def _new_message(self, destination: str, headers: List[Tuple[str, str]], body: bytes) -> Message:
        message = Message(f"msg-{next(self._counter)}", destination, headers, body)
        self.stored += message.size
        self.stored_messages += 1
        return message

    def route(self, destination: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        """Store a message at its destination (a copy per subscription of a topic) and deliver what can be."""
        kind, key = canonical(destination)
        if kind == "queue":
            queue = self.queues.get(key)
            if queue is None:
                queue = self.queues[key] = Queue(key)
            queue.put(self._new_message(destination, headers, body))
            self.dispatch(queue)
            return
        subs = self.topics.get(key)
        if not subs:
            # A topic keeps nothing for absent subscribers.
            self.tally.count("discarded")
            return
        for sub in list(subs):
            sub.queue.put(self._new_message(destination, headers, body))
            self.dispatch(sub.queue)

    def dispatch(self, queue: Queue) -> None:
        """Deliver ready messages round robin to the consumers that can take one."""
        while queue.ready:
            sub = queue.next_taker()
            if sub is None:
                return
            self._deliver(sub, queue.pop())

    def _deliver(self, sub: Subscription, message: Message) -> None:
        conn = sub.conn
        headers = [("destination", message.destination), ("message-id", message.id)]
        if sub.id is not None:
            headers.append(("subscription", sub.id))
        delivery = None
        if sub.ack != "auto":
            # Like ActiveMQ's, the ack id has colons (unlike the message id), so a client's escaping is exercised.
            ack_id = f"{conn.session}:{next(self._counter)}"
            delivery = Delivery(message, ack_id, sub)
            sub.track(delivery)
            if conn.version == "1.2":
                headers.append(("ack", ack_id))
        if message.redelivered:
            headers.append(("redelivered", "true"))
        headers.extend(message.headers)
        if self.faults.take_cut():
            conn.send_half("MESSAGE", headers, message.body)
            if delivery is None:
                self.tally.count("discarded")
                self.release(message)
            conn.close("abort-after-flush")
            return
        conn.send("MESSAGE", headers, message.body)
        # An auto-acked message is consumed once sent.
        if delivery is None:
            self.release(message)

    def settle(self, command: str, delivery: Delivery) -> None:
        """ACK or NACK a delivery (``client`` mode: and every earlier unacked one of its subscription)."""
        sub = delivery.sub
        if sub.ack == "client":
            # STOMP 1.2: client-mode ACK "operates on the message specified in the ACK frame and all
            # messages sent to the subscription before the ACK'ed message" (NACK likewise)
            batch = sub.unacked_through(delivery)
        else:
            batch = [delivery]
        for d in batch:
            sub.forget(d)
        if command == "NACK" and self.nack == "requeue":
            sub.queue.requeue([d.message for d in batch])
        else:
            if command == "NACK":
                self.tally.count("discarded", len(batch))
            for d in batch:
                self.release(d.message)
        self.dispatch(sub.queue)
