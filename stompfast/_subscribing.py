"""Subscriptions: a client's subscriptions by id, and the frames that open, close and settle them.

One object owns the table of subscriptions (each an :class:`~._subscription.Inlet`,
which outlives a connection) and writes SUBSCRIBE, UNSUBSCRIBE, ACK and NACK on
the client's current link. The client decides when a connection is up or gone
and tells this table (:meth:`Subscriptions.resubscribe`, :meth:`Subscriptions.end`);
the table asks the client only through its :class:`~._gate.ClientGate`. The
reader (:mod:`._inbox`) looks subscriptions up in :attr:`Subscriptions.by_id`
and never changes it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

import anyio

from ._brokers import check_selector
from ._common import log
from ._gate import ClientGate
from ._link import Link
from ._protocol import Message, SessionState, check_destination
from ._receipt import Receipt
from ._stats import Counters
from ._subscription import AsyncSubscription, Inlet, LiveSession, SubscriptionOps, drop_unacked
from .errors import ClientClosedError, ConfigurationError, StaleMessageError, StompError

__all__ = ["Subscriptions", "with_selector"]


def with_selector(headers: Optional[Dict[str, Any]], selector: Any) -> Dict[str, Any]:
    """``headers`` with ``selector`` as its ``selector`` header; ConfigurationError for a bad or second one."""
    if not isinstance(selector, str) or not selector.strip():
        raise ConfigurationError(f"selector must be a non-empty str (a JMS selector), not {selector!r}")
    headers = headers if headers is not None else {}
    if "selector" in headers:
        raise ConfigurationError("selector= and a 'selector' header both given: give one")
    headers["selector"] = selector
    return headers


class Subscriptions:
    """A client's subscriptions and their session frames (SUBSCRIBE, UNSUBSCRIBE, ACK, NACK).

    ``queue_ack`` is the client's hot ACK path (the common ACK queued at once),
    handed to subscriptions as it is; ``unsubscribe_timeout`` reads the client's
    ``disconnect_timeout``, which bounds an UNSUBSCRIBE's wait for room.
    """

    def __init__(
        self, gate: ClientGate, counts: Counters, live: LiveSession, queue_ack: Callable[[Message], bool],
        unsubscribe_timeout: Callable[[], float],
    ) -> None:
        #: the open subscriptions by id (the reader delivers through it; re-subscribed after a reconnect)
        self.by_id: Dict[str, Inlet] = {}
        self._gate = gate
        self._counts = counts
        self._live = live
        self._queue_ack = queue_ack
        self._unsubscribe_timeout = unsubscribe_timeout
        # Made at the first subscription: a client that is never used holds no reference to itself.
        self._ops: Optional[SubscriptionOps] = None

    def ops(self) -> SubscriptionOps:
        """The narrow interface handed to each subscription (its bound methods)."""
        ops = self._ops
        if ops is None:
            ops = self._ops = SubscriptionOps(
                self.subscribe, self.unsubscribe, self.ack, self._queue_ack, self.check_ack, self._live
            )
        return ops

    def new(
        self, destination: str, ack: str, headers: Optional[Mapping[str, Any]], buffer_size: int, receipt: bool,
        id: Optional[str], durable: Optional[str], selector: Optional[str],
    ) -> AsyncSubscription:
        """The subscription ``AsyncClient.subscribe`` returns, its arguments checked now (not on entry)."""
        check_destination(destination)
        protocol = self._gate.link().protocol
        if durable is not None:
            # the name and id now; the client identity too once the broker is known (else on entry)
            protocol.check_durable(durable, id)
        own = dict(headers) if headers else None
        if selector is not None:
            own = with_selector(own, selector)
        # Known once connected (else the SUBSCRIBE itself refuses it, on entry)
        check_selector(protocol.broker, protocol.server, own)
        return AsyncSubscription(self.ops(), destination, ack, own, buffer_size, receipt, id, durable)

    def for_replies(self, destination: str, implicit: bool, buffer_size: int) -> AsyncSubscription:
        """An auto-ack subscription to a reply destination (``implicit``: the broker subscribes it itself)."""
        return AsyncSubscription(self.ops(), destination, "auto", None, buffer_size, True, None, implicit=implicit)

    async def subscribe(self, sub: Inlet) -> None:
        """SUBSCRIBE ``sub`` on the current link and wait for its receipt if it wants one."""
        gate = self._gate
        await gate.ensure_open()
        if sub.implicit:
            # The broker subscribed it itself: its deliveries carry the destination as their id.
            sub.subscribed_as(sub.destination)
            self.by_id[sub.destination] = sub
            return
        link = gate.link()
        data, sub_id, receipt_id = link.protocol.subscribe(
            sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=sub.wants_receipt,
            prefetch=sub.prefetch, durable=sub.durable, message_classes=sub.message_classes,
        )
        sub.subscribed_as(sub_id)
        self.by_id[sub_id] = sub
        try:
            pending = link.expect(receipt_id)
            # Its first MESSAGE confirms it as well as the RECEIPT does: the reader may stop
            # on this subscription's full buffer before the RECEIPT behind it is read.
            sub.confirm_with(receipt_id)
            await gate.queue(data)
            self._counts.control += 1
            if pending is not None:
                await pending.wait()
        except BaseException:
            sub.confirm_with(None)
            # Refused or interrupted (a timeout): withdraw it, so that it is neither
            # left running on the broker nor re-established after a reconnect.
            if self.by_id.get(sub_id) is sub:
                self._forget_locally(sub)
                link = gate.link()
                if link.alive and not gate.failed() and link.protocol.state is SessionState.CONNECTED:
                    try:
                        data, _ = link.protocol.unsubscribe(sub_id)
                        link.queue(data)
                        self._counts.control += 1
                    except StompError:
                        pass
            raise
        sub.confirm_with(None)

    def _forget_locally(self, sub: Inlet) -> None:
        """Take ``sub`` out of the table; its deliveries join the client's total of messages received."""
        assert sub.id is not None
        del self.by_id[sub.id]
        self._counts.received_gone += sub.seq

    async def unsubscribe(self, sub: Inlet, forget: bool = False) -> None:
        """UNSUBSCRIBE ``sub`` (bounded by the client's ``disconnect_timeout``); ``forget`` deletes a durable one."""
        if sub.id is None or self.by_id.get(sub.id) is not sub:
            if forget:
                raise ClientClosedError(
                    f"subscription {sub.id!r} is not open: its durable subscription was not deleted"
                )
            return
        if forget:
            await self._forget(sub)
            return
        self._forget_locally(sub)
        gate = self._gate
        link = gate.link()
        if gate.is_open() and link.protocol.state is SessionState.CONNECTED and not sub.implicit:
            data, _ = link.protocol.unsubscribe(sub.id)
            timeout = self._unsubscribe_timeout()
            # Bounded like DISCONNECT: a broker that stops reading (TCP flow control)
            # must not hold the caller here; the subscription is gone locally anyway.
            with anyio.move_on_after(timeout):
                await gate.queue(data)
                self._counts.control += 1
                return
            log.debug("stompfast: UNSUBSCRIBE %r not queued within %g s", sub.id, timeout)

    async def _forget(self, sub: Inlet) -> None:
        """UNSUBSCRIBE that deletes the durable subscription ``sub``, confirmed by the broker's receipt."""
        assert sub.id is not None
        gate = self._gate
        try:
            gate.check_open()
        except BaseException:
            # Deleting needs the broker: on a connection that is down it fails, the
            # subscription is withdrawn here as by a plain close (never re-established by a
            # reconnect), and it stays on the broker.
            await self.unsubscribe(sub)
            raise
        self._forget_locally(sub)
        link = gate.link()
        data, receipt_id = link.protocol.unsubscribe(sub.id, receipt=True, forget=True)
        pending = link.expect(receipt_id)
        await gate.queue(data)
        self._counts.control += 1
        if pending is not None:
            gate.link().write_now()
            await pending.wait()

    def check_stale(self, command: str, message: Message) -> None:
        """Refuse an ACK/NACK of a message delivered on a connection that is gone (or going).

        During a reconnect the failed connection's protocol is still the current
        one, so the session test alone would let the ack through to
        ``check_open`` and a ConnectionLostError; the broker redelivers the
        message, so it is stale either way and never sent on another connection.
        """
        link = self._gate.link()
        if (message.session is not link.protocol or not link.alive) and not self._gate.failed():
            raise StaleMessageError(
                f"message {message.message_id!r} was delivered on a connection that was lost; the broker"
                f" redelivers unacknowledged messages, so this {command} was not sent"
            )

    def check_ack(self, message: Message, inlet: Inlet) -> None:
        """Raise what an ACK of ``message`` would be refused with; send nothing.

        A blocking client's thread calls this once per message: a message of the live
        session (the common case) is checked by that session without asking the gate.
        """
        live = self._live.protocol
        if live is not None and message.session is live:
            live.check_ack(message)
            return
        self.check_stale("ACK", message)
        self._gate.link().protocol.check_ack(message)

    async def ack(
        self, command: str, message: Message, transaction: Optional[str], receipt: bool,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """ACK or NACK ``message`` (``command``) on the current link, waiting for room and a receipt as asked."""
        gate = self._gate
        self.check_stale(command, message)
        if not gate.reconnecting():
            gate.check_open()
        # else: the message came on the new connection while it confirms the
        # re-established subscriptions (a broker may deliver first): it is live, so
        # the ACK goes out on it; only a lost connection's messages are stale.
        link = gate.link()
        if command == "ACK":
            data, receipt_id = link.protocol.ack(message, transaction=transaction, receipt=receipt, headers=headers)
        else:
            data, receipt_id = link.protocol.nack(message, transaction=transaction, receipt=receipt, headers=headers)
        pending = link.expect(receipt_id)
        await gate.queue(data)
        if command == "ACK":
            self._counts.acks += 1
        else:
            self._counts.nacks += 1
        if pending is not None:
            gate.link().write_now()
            await pending.wait()

    async def resubscribe(self, link: Link, timeout: float) -> None:
        """Re-send every subscription's SUBSCRIBE on a new ``link``; return once the broker confirmed them all.

        Raises TimeoutError after ``timeout`` seconds, or what a receipt failed
        with; the client then takes the link down again.
        """
        try:
            pending: List[Receipt] = []
            for sub in list(self.by_id.values()):
                # The broker makes an implicit one again when it is next named (a reply-to).
                if sub.implicit:
                    continue
                data, _, receipt_id = link.protocol.subscribe(
                    sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=True,
                    prefetch=sub.prefetch, durable=sub.durable, message_classes=sub.message_classes,
                )
                pending.append(link.register(receipt_id))
                # As on a first SUBSCRIBE: its first MESSAGE confirms it too.
                sub.confirm_with(receipt_id)
                link.queue(data)
                self._counts.control += 1
            link.write_now()
            with anyio.fail_after(timeout):
                for receipt in pending:
                    await receipt.wait()
        finally:
            for sub in self.by_id.values():
                sub.confirm_with(None)

    def end(self, how: str, error: Optional[BaseException]) -> int:
        """The connection or the client ended: what ``how`` (a row of ``_ending.ENDINGS``) says.

        ``"drop-unacked"``: the client goes on; drop what client-ack subscriptions
        buffered (the broker redelivers it) and return how many messages that was.
        ``"close"``: close every subscription with ``error``. ``"close-and-forget"``:
        close them and forget them. ``"keep"``: nothing.
        """
        if how == "drop-unacked":
            return drop_unacked(self.by_id.values())
        if how == "keep":
            return 0
        forget = how == "close-and-forget"
        for sub in list(self.by_id.values()):
            sub.close(error)
            if forget:
                self._counts.received_gone += sub.seq
        if forget:
            self.by_id.clear()
        return 0

    def inlets(self) -> Iterable[Inlet]:
        """The open subscriptions (for a stats snapshot)."""
        return self.by_id.values()

