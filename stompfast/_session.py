"""Session operations of :class:`~stompfast.AsyncClient`: subscribe, unsubscribe, ACK/NACK, transactions.

These are what a subscription and a transaction ask of the client. They reach
the client only through :class:`~stompfast._subscription.SubscriptionOps` and
:class:`~stompfast._transaction.TransactionOps`, made of these methods bound:
neither object imports or touches the client.

A mixin of the client (see docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Set, Union

import anyio

from ._common import body_bytes, log
from ._lifecycle import OPEN, RECONNECTING, ClientState
from ._outbox import Outbox
from ._protocol import Message, SessionState, StompProtocol, check_destination
from ._receipt import PendingReceipt
from ._stats import Counters
from ._subscription import DEFAULT_BUFFER_SIZE, AsyncSubscription, Inlet, LiveSession, SubscriptionOps
from ._transaction import AsyncTransaction, SessionTransaction, TransactionOps
from .errors import ClientClosedError, StaleMessageError, StompError

__all__ = ["Session"]


class Session(Counters):
    """Subscriptions, acknowledgements and transactions on the current session (a part of AsyncClient)."""

    # owns
    _subs: Dict[str, Inlet]
    _transactions: Set[SessionTransaction]
    _sub_ops: Optional[SubscriptionOps]
    _live: LiveSession
    # reads
    _outbox: Outbox
    _protocol: StompProtocol
    _error: Optional[BaseException]
    _state: ClientState
    _link_alive: bool
    _disconnect_timeout: float

    if TYPE_CHECKING:  # provided by the client's other parts

        async def _ensure_open(self) -> None:
            raise NotImplementedError

        def _check_open(self) -> None:
            raise NotImplementedError

        def _register(self, receipt_id: Optional[str]) -> PendingReceipt:
            raise NotImplementedError

        async def _queue_when_room(self, data: bytes) -> None:
            raise NotImplementedError

        def _queue_ack(self, message: Message) -> bool:
            raise NotImplementedError

    def _ops(self) -> SubscriptionOps:
        """The narrow interface handed to subscriptions (made at the first one: a client that is never
        used holds no reference to itself)."""
        ops = self._sub_ops
        if ops is None:
            ops = self._sub_ops = SubscriptionOps(self._subscribe, self._unsubscribe, self._ack, self._queue_ack,
                                                  self._check_ack, self._live)
        return ops

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: Optional[Mapping[str, Any]] = None,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        receipt: bool = True,
        id: Optional[str] = None,
        durable: Optional[str] = None,
    ) -> AsyncSubscription:
        """A subscription to ``destination``, used as ``async with client.subscribe(...) as sub:``.

        Args:
            ack: ``"auto"``, ``"client"`` (cumulative acks) or ``"client-individual"``.
            headers: extra SUBSCRIBE headers, passed through (``selector``,
                ``prefetch-count``, ``activemq.prefetchSize``, ``durable``, ...).
            buffer_size: messages buffered before the reader stops reading; in the
                client modes also the broker prefetch asked for, unless ``headers``
                set one.
            receipt: wait for the broker to confirm the subscription on entry
                (errors such as a refused destination surface there).
            id: the subscription id (default: a counter; a durable subscription's is its name).
            durable: a durable subscription of this name (for a ``/topic/``): the
                broker keeps it, and the messages sent while nobody is subscribed,
                when the subscriber leaves or loses its connection; subscribing
                again with the same name (and the same ``client_id``) gets them.
                The client writes the headers the broker reads (docs/brokers.md).
                ActiveMQ Classic and Artemis need the client's ``client_id``:
                without one it is refused (ConfigurationError) once the broker is
                known. Leaving the block keeps it; ``aclose(forget=True)`` deletes it.
        """
        check_destination(destination)  # refused by this call, not when the block is entered
        if durable is not None:
            # the name and id now; the client identity too once the broker is known (else on entry)
            self._protocol.check_durable(durable, id)
        headers = dict(headers) if headers else None
        return AsyncSubscription(self._ops(), destination, ack, headers, buffer_size, receipt, id, durable)

    async def _subscribe(self, sub: Inlet) -> None:
        await self._ensure_open()
        data, sub_id, receipt_id = self._protocol.subscribe(
            sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=sub.wants_receipt,
            prefetch=sub.prefetch, durable=sub.durable,
        )
        sub.id = sub_id
        self._subs[sub_id] = sub
        try:
            pending = self._register(receipt_id) if receipt_id is not None else None
            # Its first MESSAGE confirms it as well as the RECEIPT does: the reader may stop
            # on this subscription's full buffer before the RECEIPT behind it is read.
            sub.confirming = receipt_id
            await self._queue_when_room(data)
            self._n_control += 1
            if pending is not None:
                await pending.wait()
        except BaseException:
            sub.confirming = None
            # Refused or interrupted (a timeout): withdraw it, so that it is neither
            # left running on the broker nor re-established after a reconnect.
            if self._subs.get(sub_id) is sub:
                del self._subs[sub_id]
                self._n_received_gone += sub.seq
                if self._link_alive and self._error is None and self._protocol.state is SessionState.CONNECTED:
                    try:
                        data, _ = self._protocol.unsubscribe(sub_id)
                        self._outbox.queue(data)
                        self._n_control += 1
                    except StompError:
                        pass
            raise
        sub.confirming = None

    async def _unsubscribe(self, sub: Inlet, forget: bool = False) -> None:
        if sub.id is None or self._subs.get(sub.id) is not sub:
            if forget:
                raise ClientClosedError(
                    f"subscription {sub.id!r} is not open: its durable subscription was not deleted"
                )
            return
        if forget:
            await self._forget(sub)
            return
        del self._subs[sub.id]
        self._n_received_gone += sub.seq
        if self._state is OPEN and self._protocol.state is SessionState.CONNECTED:
            data, _ = self._protocol.unsubscribe(sub.id)
            # Bounded like DISCONNECT: a broker that stops reading (TCP flow control)
            # must not hold the caller here; the subscription is gone locally anyway.
            with anyio.move_on_after(self._disconnect_timeout):
                await self._queue_when_room(data)
                self._n_control += 1
                return
            log.debug("stompfast: UNSUBSCRIBE %r not queued within %g s", sub.id, self._disconnect_timeout)

    async def _forget(self, sub: Inlet) -> None:
        """UNSUBSCRIBE that deletes the durable subscription ``sub``, confirmed by the broker's receipt."""
        assert sub.id is not None
        try:
            self._check_open()
        except BaseException:
            # Deleting needs the broker: on a connection that is down it fails, the
            # subscription is withdrawn here as by a plain close (never re-established by a
            # reconnect), and it stays on the broker.
            await self._unsubscribe(sub)
            raise
        del self._subs[sub.id]
        self._n_received_gone += sub.seq
        data, receipt_id = self._protocol.unsubscribe(sub.id, receipt=True, forget=True)
        pending = self._register(receipt_id) if receipt_id is not None else None
        await self._queue_when_room(data)
        self._n_control += 1
        if pending is not None:
            self._outbox.write_queued_now()
            await pending.wait()

    def _check_stale(self, command: str, message: Message) -> None:
        """Refuse an ACK/NACK of a message delivered on a connection that is gone (or going).

        During a reconnect the failed connection's protocol is still the current
        one, so the session test alone would let the ack through to
        ``_check_open`` and a ConnectionLostError; the broker redelivers the
        message, so it is stale either way and never sent on another connection.
        """
        if (message.session is not self._protocol or not self._link_alive) and self._error is None:
            raise StaleMessageError(
                f"message {message.message_id!r} was delivered on a connection that was lost; the broker"
                f" redelivers unacknowledged messages, so this {command} was not sent"
            )

    async def _ack(self, command: str, message: Message, transaction: Optional[str], receipt: bool) -> None:
        self._check_stale(command, message)
        if self._state is not RECONNECTING:
            self._check_open()
        # else: the message came on the new connection while it confirms the
        # re-established subscriptions (a broker may deliver first): it is live, so
        # the ACK goes out on it; only a lost connection's messages are stale.
        if command == "ACK":
            data, receipt_id = self._protocol.ack(message, transaction=transaction, receipt=receipt)
        else:
            data, receipt_id = self._protocol.nack(message, transaction=transaction, receipt=receipt)
        pending = self._register(receipt_id) if receipt_id is not None else None
        await self._queue_when_room(data)
        if command == "ACK":
            self._n_acks += 1
        else:
            self._n_nacks += 1
        if pending is not None:
            self._outbox.write_queued_now()
            await pending.wait()

    async def ack(self, message: Message, *, receipt: bool = False) -> None:
        """Acknowledge ``message`` (same as ``await message.ack()``)."""
        await Message.ack(message, receipt=receipt)  # (the async ack, whatever subclass the message is)

    async def nack(self, message: Message, *, receipt: bool = False) -> None:
        """Refuse ``message`` (same as ``await message.nack()``; STOMP 1.1+)."""
        await Message.nack(message, receipt=receipt)

    def transaction(self, *, receipt: bool = True) -> "AsyncTransaction":
        """A transaction: ``async with client.transaction() as tx:``.

        BEGIN on entry; COMMIT on normal exit (confirmed by a receipt unless
        ``receipt=False``); ABORT on an exception or cancellation.
        """
        ops = TransactionOps(self._tx_begin, self._tx_send, self._tx_commit, self._tx_abort)
        return SessionTransaction(ops, receipt)

    def _check_ack(self, message: Message, inlet: Inlet) -> None:
        self._check_stale("ACK", message)
        self._protocol.check_ack(message)

    # -- transactions (TransactionOps) ----------------------------------------------

    def _lose_transactions(self, error: BaseException) -> int:
        """The session ended: every open transaction was aborted by the broker; tell them; return how many."""
        transactions = list(self._transactions)
        self._transactions.clear()
        for tx in transactions:
            tx.connection_lost(error)
        return len(transactions)

    async def _tx_begin(self, tx: AsyncTransaction) -> str:
        await self._ensure_open()
        data, tx_id, _ = self._protocol.begin()
        tx.id = tx_id  # (set before the write, which may raise)
        await self._queue_when_room(data)
        self._n_control += 1
        if isinstance(tx, SessionTransaction):  # (always: this client made it)
            self._transactions.add(tx)
        return tx_id

    async def _tx_send(self, tx_id: str, destination: str, body: Union[bytes, str], headers: Any,
                       content_type: Optional[str]) -> None:
        self._check_open()
        body, content_type = body_bytes(body, content_type)
        data, _ = self._protocol.send(destination, body, headers, content_type=content_type, transaction=tx_id)
        await self._queue_when_room(data)

    async def _tx_commit(self, tx: AsyncTransaction, tx_id: str, receipt: bool) -> None:
        self._transactions.discard(tx)
        self._check_open()
        data, receipt_id = self._protocol.commit(tx_id, receipt=receipt)
        pending = self._register(receipt_id) if receipt_id is not None else None
        await self._queue_when_room(data)
        self._n_control += 1
        if pending is not None:
            await pending.wait()

    async def _tx_abort(self, tx: AsyncTransaction, tx_id: str, lost: bool) -> None:
        self._transactions.discard(tx)
        if lost or self._state is not OPEN:
            return  # the session is gone: the broker aborted it already
        data, _ = self._protocol.abort(tx_id)
        await self._queue_when_room(data)
        self._n_control += 1
