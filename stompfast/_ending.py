"""How an :class:`~stompfast.AsyncClient` or one of its connections ends: one teardown, one table.

Five things end a connection or the client, and each used to be its own code path doing
its own subset of the steps. They are now rows of :data:`ENDINGS`, and the client's one
teardown (``AsyncClient._end``) runs the steps a row asks for, always in the same order:

1. the error is recorded (the client is done for: every call raises it);
2. the state moves, from the states the row names (from any other it stays: the table of
   :mod:`._lifecycle` still has the last word);
3. a live connection's end counts as a loss;
4. acks may no longer go to the connection's session;
5. the receipts awaited fail;
6. the link closes (releasing the socket to the reader on trio when nothing reconnects);
7. the requests awaiting replies fail (their replies would go to the lost connection);
8. the subscriptions close, or lose only their unacknowledged buffers (the broker
   redelivers those) when the client reconnects;
9. the open transactions are told they were aborted;
10. the supervisor stops, or is handed the loss to repair.

``tests/test_ending.py`` holds the table to what each ending must do, as
``tests/test_lifecycle.py`` holds the states' table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Mapping

from ._lifecycle import CLOSED, CLOSING, CONNECTING, FAILED, OPEN, RECONNECTING, ClientState

__all__ = ["ENDINGS", "Ending", "Steps"]


class Ending(enum.Enum):
    """What ended the connection or the client."""

    #: the first connect failed (``connect()`` raises)
    CONNECT_FAILED = "connect failed"
    #: ``aclose()``, or leaving ``async with``: our own close, after DISCONNECT
    CLOSED = "closed"
    #: a failure the client does not retry (reconnecting off, or not retryable)
    FAILED = "failed"
    #: the connection was lost and the supervisor re-establishes it
    LOST = "lost"
    #: the supervisor has no attempt left
    GAVE_UP = "gave up"


@dataclass(frozen=True)
class Steps:
    """What one ending does (the numbered steps of the module docstring)."""

    #: 1. the client's error becomes this one
    record_error: bool
    #: 2. from each of these states, the state to move to
    moves: Mapping[ClientState, ClientState]
    #: 3. a live link's end counts in ``stats().losses``
    count_loss: bool
    #: 4. acks may no longer go to the link's session
    forget_session: bool
    #: 5. the receipts awaited fail
    fail_receipts: bool
    #: 6. the link closes; ``release``: on trio its reader frees the socket (nothing reconnects)
    close_link: bool
    release: bool
    #: 7. the requests awaiting replies fail now
    fail_requests: bool
    #: 8. "close" (with the ending's error), "close-and-forget" (with the client's earlier
    #: error, None after a clean run; the inlets are forgotten), "drop-unacked" or "keep"
    subscriptions: str
    #: 9. the open transactions are told the broker aborted them
    lose_transactions: bool
    #: 10. "stop", "hand-over" (``Supervisor.link_lost``) or "keep"
    supervisor: str


#: Every ending and what it does.
ENDINGS: Dict[Ending, Steps] = {
    # connect() raises: nothing was handed out yet but the link it opened
    Ending.CONNECT_FAILED: Steps(
        record_error=False, moves={CONNECTING: CLOSED}, count_loss=False, forget_session=True,
        fail_receipts=True, close_link=True, release=False, fail_requests=False, subscriptions="keep",
        lose_transactions=False, supervisor="keep",
    ),
    Ending.CLOSED: Steps(
        record_error=True, moves={CLOSING: CLOSED}, count_loss=False, forget_session=True,
        fail_receipts=True, close_link=True, release=True, fail_requests=False,
        subscriptions="close-and-forget", lose_transactions=True, supervisor="stop",
    ),
    Ending.FAILED: Steps(
        record_error=True, moves={OPEN: FAILED, RECONNECTING: FAILED}, count_loss=True, forget_session=True,
        fail_receipts=True, close_link=True, release=True, fail_requests=False, subscriptions="close",
        lose_transactions=True, supervisor="stop",
    ),
    # The subscriptions stay (they are re-established); a reply would go to a destination of the lost link.
    Ending.LOST: Steps(
        record_error=False, moves={OPEN: RECONNECTING}, count_loss=True, forget_session=True,
        fail_receipts=True, close_link=True, release=False, fail_requests=True, subscriptions="drop-unacked",
        lose_transactions=True, supervisor="hand-over",
    ),
    # After LOST: the link is closed already and the transactions were told then.
    Ending.GAVE_UP: Steps(
        record_error=True, moves={RECONNECTING: FAILED}, count_loss=False, forget_session=False,
        fail_receipts=True, close_link=False, release=False, fail_requests=False, subscriptions="close",
        lose_transactions=False, supervisor="keep",
    ),
}
