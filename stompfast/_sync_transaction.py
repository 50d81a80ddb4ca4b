"""Transactions of the sync client: :class:`Transaction`, the blocking twin of AsyncTransaction."""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

from ._protocol import Message
from ._sync_loop import SyncLoop, check_timeout, timeout_error
from ._sync_outbox import ThreadOutbox
from ._transaction import AsyncTransaction
from .errors import ReceiptTimeout, StompTimeout


class Transaction:
    """An open transaction of a sync :class:`Client`; its ``send``, ``ack`` and ``nack`` carry its id.

    ``with client.transaction() as tx:`` sends BEGIN, then COMMIT when the
    block ends normally or ABORT when it raises.
    """

    def __init__(self, loop: SyncLoop, outbox: ThreadOutbox, tx: AsyncTransaction, timeout: Optional[float]) -> None:
        self._loop = loop
        # The client's receipt-less sends, written before this transaction's
        self._outbox = outbox
        self._async = tx
        self._timeout = timeout

    @property
    def id(self) -> Optional[str]:
        """The transaction id (known once BEGIN was sent)."""
        return self._async.id

    def __enter__(self) -> "Transaction":
        timeout = self._timeout
        self._loop.call(
            self._async.__aenter__, timeout, timeout_error(StompTimeout, "BEGIN not sent", timeout)
        )
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        timeout = self._timeout
        self._loop.call(
            functools.partial(self._async.__aexit__, exc_type, exc, tb),
            timeout,
            timeout_error(ReceiptTimeout, f"COMMIT of transaction {self.id!r} not confirmed", timeout),
        )

    def send(
        self,
        destination: str,
        body: Union[bytes, str] = b"",
        *,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        """Send within the transaction (``headers``, ``content_type``): the broker delivers it on COMMIT."""
        self._outbox.wait_written(check_timeout(timeout))
        self._loop.call(
            functools.partial(self._async.send, destination, body, **kwargs),
            check_timeout(timeout),
            timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def ack(self, message: Message, *, timeout: Optional[float] = None) -> None:
        """Acknowledge ``message`` within the transaction (takes effect on COMMIT)."""
        self._loop.call(
            functools.partial(self._async.ack, message),
            check_timeout(timeout),
            timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def nack(self, message: Message, *, timeout: Optional[float] = None) -> None:
        """Refuse ``message`` within the transaction (takes effect on COMMIT)."""
        self._loop.call(
            functools.partial(self._async.nack, message),
            check_timeout(timeout),
            timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def commit(self, *, timeout: Optional[float] = None) -> None:
        """COMMIT, confirmed by a receipt unless the transaction was made with ``receipt=False``.

        Raises:
            ReceiptTimeout: not confirmed within ``timeout``.
            ServerError: the broker refused it.
        """
        self._loop.call(
            self._async.commit,
            check_timeout(timeout),
            timeout_error(ReceiptTimeout, f"COMMIT of transaction {self.id!r} not confirmed", timeout),
        )

    def abort(self, *, timeout: Optional[float] = None) -> None:
        """ABORT: the broker drops the transaction's sends and acks."""
        self._loop.call(
            self._async.abort,
            check_timeout(timeout),
            timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def __repr__(self) -> str:
        return f"<Transaction {self.id!r}>"
