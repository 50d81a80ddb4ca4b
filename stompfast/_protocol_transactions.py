"""The transactions open on one session.

:class:`Transactions` gives out the ids of the transactions the caller does not
name, knows which are open, and refuses what names one that is not (a COMMIT,
an ABORT, or a SEND, ACK or NACK inside it) or opens one twice. The session
(:class:`~stompfast._protocol.StompProtocol`) owns one ``Transactions``, checks
its state, encodes the frames and tells it what it opened and ended. Like the
protocol core, nothing here imports anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import Optional, Set

from .errors import LocalProtocolError

__all__ = ["Transactions"]


class Transactions:
    """The transactions open on one session, by id."""

    __slots__ = ("_open", "_next")

    def __init__(self) -> None:
        self._open: Set[str] = set()
        self._next = 0

    def new_id(self, transaction: Optional[str]) -> str:
        """``transaction``, or ``tx<n>`` when None; LocalProtocolError for one already open."""
        if transaction is None:
            self._next += 1
            return f"tx{self._next}"
        if transaction in self._open:
            raise LocalProtocolError(f"transaction {transaction!r} is already open")
        return transaction

    def check(self, transaction: str) -> None:
        """LocalProtocolError unless ``transaction`` is open."""
        if transaction not in self._open:
            raise LocalProtocolError(f"no open transaction {transaction!r} on this connection")

    def opened(self, transaction: str) -> None:
        """Record ``transaction``, whose BEGIN was encoded."""
        self._open.add(transaction)

    def ended(self, transaction: str) -> None:
        """Forget ``transaction``, whose COMMIT or ABORT was encoded."""
        self._open.discard(transaction)
