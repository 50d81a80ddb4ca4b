"""ClientGate: what the client's session services ask of it, as bound methods (they never see the client).

The subscriptions' and the transactions' frames (:mod:`._subscribing`,
:mod:`._transaction`) go out on whichever connection is current, and only
while the client is open. Which link is current, and whether the client is
open, reconnecting or failed, are the client's to decide
(:mod:`._lifecycle`); a service reads them through this gate and never
writes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ._link import Link

__all__ = ["ClientGate"]


class ClientGate:
    """The client's answers to a session service: the current link, its state, a wait for room."""

    __slots__ = ("link", "is_open", "reconnecting", "failed", "ensure_open", "check_open", "queue")

    def __init__(
        self,
        link: Callable[[], "Link"],
        is_open: Callable[[], bool],
        reconnecting: Callable[[], bool],
        failed: Callable[[], bool],
        ensure_open: Callable[[], Awaitable[None]],
        check_open: Callable[[], None],
        queue: Callable[[bytes], Awaitable[None]],
    ) -> None:
        #: the current link (a reconnect replaces it)
        self.link = link
        #: the client is open: a session is up and the client is not closing
        self.is_open = is_open
        #: a lost session is being re-established
        self.reconnecting = reconnecting
        #: the client failed for good (its error is what every later call raises)
        self.failed = failed
        #: return once a session is up (waiting out a reconnect); raise why not
        self.ensure_open = ensure_open
        #: raise why the client cannot send now (closed, failed, reconnecting)
        self.check_open = check_open
        #: queue encoded frames on the current link, waiting while its send buffer is full
        self.queue = queue
