"""The states of a STOMP session and the moves between them, in one table.

A session is one connection's STOMP conversation: CONNECT sent (CONNECTING), the
broker's CONNECTED (CONNECTED), DISCONNECT sent (DISCONNECTING), its receipt or
the end of the connection (CLOSED), or an ERROR or a protocol fault (FAILED).
Every move is a row of :data:`TRANSITIONS`, keyed by what happens: an outbound
command (``"SEND"``), an inbound one (``"<MESSAGE"``) or ``"lost"``; a frame or
call with no row for the current state is refused. :data:`ALLOWED` is the same
table by state, for the one set lookup a call's check costs. The state itself
is kept by :class:`~stompfast._protocol.StompProtocol`, the one object that moves
it (the model is h11's ``_state.py``; the client's own lifecycle is
``_lifecycle.py``). Like the protocol core, nothing here imports anyio, asyncio,
socket or time.
"""

from __future__ import annotations

import enum
from typing import Dict, FrozenSet, Tuple

__all__ = ["ALLOWED", "TRANSITIONS", "SessionState"]


class SessionState(enum.Enum):
    # Nothing sent yet
    IDLE = "idle"
    # CONNECT (or STOMP) sent, waiting for CONNECTED
    CONNECTING = "connecting"
    # The session is up
    CONNECTED = "connected"
    # DISCONNECT sent, waiting for its RECEIPT
    DISCONNECTING = "disconnecting"
    # DISCONNECT confirmed, or the connection ended
    CLOSED = "closed"
    # ERROR received or a protocol fault: the connection is unusable
    FAILED = "failed"

    # Enum's own __hash__ is a Python function (hash of the name); members are
    # singletons compared by identity, so the C identity hash is equivalent and
    # keeps the TRANSITIONS lookups off the per-frame path's profile.
    __hash__ = object.__hash__


S = SessionState
#: (state, what happens) -> next state. "what happens" is an outbound command
#: (``"SEND"``), an inbound one (``"<MESSAGE"``), or ``"lost"`` (the transport ended).
TRANSITIONS: Dict[Tuple[SessionState, str], SessionState] = {
    (S.IDLE, "CONNECT"): S.CONNECTING,
    (S.CONNECTING, "<CONNECTED"): S.CONNECTED,
    (S.CONNECTING, "<ERROR"): S.FAILED,
    **{
        (S.CONNECTED, c): S.CONNECTED
        for c in ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT")
    },
    (S.CONNECTED, "<MESSAGE"): S.CONNECTED,
    (S.CONNECTED, "<RECEIPT"): S.CONNECTED,
    (S.CONNECTED, "<ERROR"): S.FAILED,
    # An ERROR the broker is known to send without ending the connection (see
    # ERRORS_THAT_KEEP_THE_SESSION): the session goes on.
    (S.CONNECTED, "<ERROR kept"): S.CONNECTED,
    (S.DISCONNECTING, "<ERROR kept"): S.DISCONNECTING,
    (S.CONNECTED, "DISCONNECT"): S.DISCONNECTING,
    # After DISCONNECT the broker may still deliver what it had in flight, and
    # receipts for earlier frames; the DISCONNECT receipt closes the session.
    (S.DISCONNECTING, "<MESSAGE"): S.DISCONNECTING,
    (S.DISCONNECTING, "<RECEIPT"): S.DISCONNECTING,
    (S.DISCONNECTING, "<ERROR"): S.FAILED,
    **{(state, "lost"): S.CLOSED for state in (S.IDLE, S.CONNECTING, S.CONNECTED, S.DISCONNECTING)},
    (S.CLOSED, "lost"): S.CLOSED,
    (S.FAILED, "lost"): S.FAILED,
}
del S

#: what may happen in each state: the session's check of a call is one set lookup on the hot path
ALLOWED: Dict[SessionState, FrozenSet[str]] = {
    state: frozenset(what for (s, what) in TRANSITIONS if s is state) for state in SessionState
}
