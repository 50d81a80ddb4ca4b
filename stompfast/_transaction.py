"""AsyncTransaction: BEGIN ... COMMIT/ABORT, with the sends and acks that carry its id.

The transaction does not know the client: it is given a :class:`TransactionOps`
(the bound methods of the client's :class:`Transactions`), which write its frames on
the current session. :class:`Transactions` keeps the transactions the client began and
tells each when the connection ends (:meth:`SessionTransaction.connection_lost`).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, Set, Union

import anyio

from ._common import body_bytes
from ._gate import ClientGate
from ._protocol import Message
from ._stats import Counters
from .errors import TransactionError

__all__ = ["AsyncTransaction", "SessionTransaction", "TransactionOps", "Transactions"]


class TransactionOps:
    """What a transaction asks of the client: four frames, written on the session of the moment."""

    __slots__ = ("begin", "send", "commit", "abort")

    def __init__(
        self,
        begin: Callable[["AsyncTransaction"], Awaitable[str]],
        send: Callable[[str, str, Union[bytes, str], Any, Optional[str]], Awaitable[None]],
        commit: Callable[["AsyncTransaction", str, bool], Awaitable[None]],
        abort: Callable[["AsyncTransaction", str, bool], Awaitable[None]],
    ) -> None:
        #: BEGIN; registers the transaction with the session; returns its id
        self.begin = begin
        #: SEND with ``transaction:<id>``
        self.send = send
        #: forget the transaction, COMMIT (with a receipt, awaited, if asked)
        self.commit = commit
        #: forget the transaction; ABORT unless the session is gone (the flag: it was lost)
        self.abort = abort


class AsyncTransaction:
    """An open transaction; its ``send``, ``ack`` and ``nack`` carry its id.

    If the connection is lost while it is open, the broker aborts it; the
    transaction then refuses further use with :class:`TransactionError` (its
    ``__cause__`` is what ended the connection), and leaving the block normally
    raises that error instead of committing.
    """

    def __init__(self, ops: TransactionOps, receipt: bool) -> None:
        self._ops = ops
        self._receipt = receipt
        self.id: Optional[str] = None
        self._done = False
        self._lost: Optional[BaseException] = None

    async def __aenter__(self) -> "AsyncTransaction":
        self.id = await self._ops.begin(self)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.commit()
        else:
            with anyio.CancelScope(shield=True):
                await self.abort()

    def _check(self) -> str:
        if self._lost is not None:
            raise TransactionError(
                f"transaction {self.id!r} was aborted: the connection ended while it was open ({self._lost})"
            ) from self._lost
        if self._done or self.id is None:
            raise TransactionError(f"transaction {self.id!r} is not open")
        return self.id

    async def send(self, destination: str, body: Union[bytes, str] = b"", **kwargs: Any) -> None:
        """Send within the transaction: the broker delivers it on COMMIT."""
        tx = self._check()
        content_type = kwargs.pop("content_type", None)
        headers = kwargs.pop("headers", None)
        if kwargs:
            raise TypeError(f"unexpected arguments: {', '.join(kwargs)}")
        await self._ops.send(tx, destination, body, headers, content_type)

    async def ack(self, message: Message) -> None:
        """Acknowledge ``message`` within the transaction (takes effect on COMMIT)."""
        # The async ack, whatever the subclass
        await Message.ack(message, transaction=self._check())

    async def nack(self, message: Message) -> None:
        """Refuse ``message`` within the transaction (takes effect on COMMIT)."""
        await Message.nack(message, transaction=self._check())

    async def commit(self) -> None:
        """COMMIT (confirmed by a receipt unless the transaction was made with ``receipt=False``)."""
        tx = self._check()
        self._done = True
        await self._ops.commit(self, tx, self._receipt)

    async def abort(self) -> None:
        """ABORT: the broker drops the transaction's sends and acks."""
        if self._done or self.id is None:
            return
        self._done = True
        await self._ops.abort(self, self.id, self._lost is not None)


class SessionTransaction(AsyncTransaction):
    """The client's handle on a transaction it began: it tells it when the connection ends.

    (Users only ever see the :class:`AsyncTransaction` interface.)
    """

    def began(self, tx_id: str) -> None:
        """(Called by :class:`Transactions`.) BEGIN was encoded with ``tx_id``: the id from now on, before the write."""
        self.id = tx_id

    def connection_lost(self, error: BaseException) -> None:
        """(Called by the client.) The connection ended while the transaction was open: the broker aborted it."""
        if not self._done and self._lost is None:
            self._lost = error


class Transactions:
    """The transactions a client began, and their frames (BEGIN, SEND in one, COMMIT, ABORT) on its current link."""

    def __init__(self, gate: ClientGate, counts: Counters) -> None:
        self._gate = gate
        self._counts = counts
        # Open transactions this client began: told when the session ends (the broker aborted them).
        self._open: Set[SessionTransaction] = set()

    def new(self, receipt: bool) -> SessionTransaction:
        """A transaction, begun on entry (``async with``)."""
        return SessionTransaction(TransactionOps(self._begin, self._send, self._commit, self._abort), receipt)

    def lose(self, error: BaseException) -> int:
        """The session ended: every open transaction was aborted by the broker; tell them; return how many."""
        transactions = list(self._open)
        self._open.clear()
        for tx in transactions:
            tx.connection_lost(error)
        return len(transactions)

    async def _begin(self, tx: AsyncTransaction) -> str:
        gate = self._gate
        await gate.ensure_open()
        data, tx_id, _ = gate.link().protocol.begin()
        # Always: this table made it
        assert isinstance(tx, SessionTransaction)
        # Told before the write, which may raise
        tx.began(tx_id)
        await gate.queue(data)
        self._counts.control += 1
        self._open.add(tx)
        return tx_id

    async def _send(self, tx_id: str, destination: str, body: Union[bytes, str], headers: Any,
                    content_type: Optional[str]) -> None:
        gate = self._gate
        gate.check_open()
        body, content_type = body_bytes(body, content_type)
        data, _ = gate.link().protocol.send(destination, body, headers, content_type=content_type, transaction=tx_id)
        await gate.queue(data)

    async def _commit(self, tx: AsyncTransaction, tx_id: str, receipt: bool) -> None:
        self._open.discard(tx)
        gate = self._gate
        gate.check_open()
        link = gate.link()
        data, receipt_id = link.protocol.commit(tx_id, receipt=receipt)
        pending = link.expect(receipt_id)
        await gate.queue(data)
        self._counts.control += 1
        if pending is not None:
            await pending.wait()

    async def _abort(self, tx: AsyncTransaction, tx_id: str, lost: bool) -> None:
        self._open.discard(tx)
        gate = self._gate
        if lost or not gate.is_open():
            # The session is gone: the broker aborted it already
            return
        data, _ = gate.link().protocol.abort(tx_id)
        await gate.queue(data)
        self._counts.control += 1
