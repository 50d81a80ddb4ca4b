"""The lifecycle of an :class:`~stompfast.AsyncClient`: its states and the moves between them, in one table.

A client is used once: it connects, runs (losing and re-establishing its connection
any number of times when reconnecting is on), and ends either by being closed or by
failing for good. The states are an ``IntEnum`` and every allowed move is listed in
:data:`TRANSITIONS`, so the client's code asks :func:`advance` for a move instead of
assigning a state, and a move the table does not hold is a bug caught where it
happens (the model is h11's ``_state.py``). Each connection's own STOMP session
(CONNECTING, CONNECTED, DISCONNECTING, CLOSED) is a different machine, kept by
:class:`~stompfast._protocol.StompProtocol`.

The states:

``NEW``
    made, never connected.
``CONNECTING``
    ``connect()`` is opening the first connection.
``OPEN``
    a connection is up; calls go to the broker.
``RECONNECTING``
    the connection was lost and the supervisor is establishing the next one; calls
    wait for it (or fail with ``ConnectionLostError`` when they cannot wait).
``FAILED``
    the client failed for good (a failure it does not retry, or no reconnect
    attempt left); ``client.error`` says why and every call raises it.
``CLOSING``
    ``aclose()`` (or leaving ``async with``) is sending DISCONNECT and tearing down.
``CLOSED``
    the end: nothing runs, every call raises.
"""

from __future__ import annotations

import enum
from typing import Dict, FrozenSet

__all__ = ["ClientState", "TRANSITIONS", "advance", "describe"]


class ClientState(enum.IntEnum):
    NEW = 0
    CONNECTING = 1
    OPEN = 2
    RECONNECTING = 3
    FAILED = 4
    CLOSING = 5
    CLOSED = 6


NEW, CONNECTING, OPEN, RECONNECTING, FAILED, CLOSING, CLOSED = ClientState

#: Every move a client may make, from each state; the comment says which call makes it.
TRANSITIONS: Dict[ClientState, FrozenSet[ClientState]] = {
    # connect(); aclose() of a client never connected
    NEW: frozenset({CONNECTING, CLOSED}),
    # the first CONNECTED; aclose() from another task; a first connect that failed (connect() raises)
    CONNECTING: frozenset({OPEN, CLOSING, CLOSED}),
    # the connection was lost and reconnecting is on; a failure not retried; aclose()
    OPEN: frozenset({RECONNECTING, FAILED, CLOSING}),
    # the next connection is up; no attempt left; aclose()
    RECONNECTING: frozenset({OPEN, FAILED, CLOSING}),
    # aclose() after a failure (it tears down what is left)
    FAILED: frozenset({CLOSING}),
    # the teardown is done
    CLOSING: frozenset({CLOSED}),
    CLOSED: frozenset(),
}

#: How a person would say each state (the client's repr); FAILED is followed by the error's name.
_WORDS = {
    NEW: "not connected", CONNECTING: "connecting", OPEN: "connected", RECONNECTING: "reconnecting",
    FAILED: "failed", CLOSING: "closing", CLOSED: "closed",
}


def advance(current: ClientState, target: ClientState) -> ClientState:
    """Return ``target`` if the table allows the move from ``current``; raise ``RuntimeError`` if not.

    An illegal move is a defect of stompfast, never of the caller, so it is a
    ``RuntimeError`` with both states named rather than one of stompfast's errors.
    """
    if target not in TRANSITIONS[current]:
        raise RuntimeError(f"stompfast bug: the client cannot go from {current.name} to {target.name}")
    return target


def describe(state: ClientState, error: object = None) -> str:
    """The state in words, e.g. ``connected`` or ``failed: HeartbeatTimeout``."""
    if state is FAILED and error is not None:
        return f"failed: {type(error).__name__}"
    return _WORDS[state]
