"""The subscriptions open on one session, and what an ACK or NACK of their messages names.

:class:`Subscriptions` keeps, by subscription id, the ack mode, the durable
name and the classes of the events its MESSAGEs become, and gives out the ids
the caller did not choose. It knows which messages can be settled (not those of
an ``auto`` subscription, nor of one that is gone) and, by STOMP version, which
headers an ACK or NACK must carry to name one. The session
(:class:`~stompfast._protocol.StompProtocol`) owns one ``Subscriptions``, checks
its state and encodes the frames; it reads :attr:`Subscriptions.modes` and
:attr:`Subscriptions.classes` on its per-message paths (the 1.2 ACK, a MESSAGE
in) without a call. Like the protocol core, nothing here imports anyio, asyncio,
socket or time.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ._events import Message
from .errors import LocalProtocolError, RemoteProtocolError, StaleMessageError

__all__ = ["Subscriptions"]


class Subscriptions:
    """The subscriptions open on one session, by id."""

    __slots__ = ("modes", "classes", "_durable", "_next")

    def __init__(self) -> None:
        #: id -> ack mode, for every open subscription
        self.modes: Dict[str, str] = {}
        #: id -> (message class, oversized class), for the subscriptions that asked for their own
        self.classes: Dict[str, Tuple[type, type]] = {}
        # Id -> durable name, for the durable ones
        self._durable: Dict[str, str] = {}
        self._next = 0

    def new_id(self, id: Optional[str]) -> str:
        """``id``, or the next number when None; LocalProtocolError for an id already open."""
        if id is None:
            self._next += 1
            return str(self._next)
        if id in self.modes:
            raise LocalProtocolError(f"subscription id {id!r} is already in use on this connection")
        return id

    def opened(self, id: str, ack: str, durable: Optional[str], message_classes: Optional[Tuple[type, type]]) -> None:
        """Record the subscription ``id`` whose SUBSCRIBE was encoded."""
        self.modes[id] = ack
        if durable is not None:
            self._durable[id] = durable
        if message_classes is not None:
            self.classes[id] = message_classes

    def durable_name(self, id: str, forget: bool) -> Optional[str]:
        """The durable name to delete with an UNSUBSCRIBE of ``id`` (with ``forget``), or what refuses it."""
        if id not in self.modes:
            raise LocalProtocolError(f"no subscription {id!r} on this connection")
        name = self._durable.get(id)
        if forget and name is None:
            raise LocalProtocolError(f"subscription {id!r} is not durable: there is nothing to forget")
        return name if forget else None

    def closed(self, id: str) -> None:
        """Forget the subscription ``id`` whose UNSUBSCRIBE was encoded."""
        del self.modes[id]
        self._durable.pop(id, None)
        self.classes.pop(id, None)

    def settle_headers(self, command: str, message: Message, session: Any, version: Optional[str]) -> Dict[str, str]:
        """The headers naming ``message`` in an ACK or NACK (``command``) on ``session``, or what refuses it.

        StaleMessageError for a message of another session, LocalProtocolError for a
        subscription that is gone or in ``auto`` mode, RemoteProtocolError for a
        message without the id header the frame must name.
        """
        if message.session is not session:
            raise StaleMessageError(
                f"message {message.message_id!r} was delivered on an earlier session; the broker redelivers"
                " unacknowledged messages of a lost session, so this " + command + " was not sent"
            )
        mode = self.modes.get(message.subscription)
        if mode is None:
            raise LocalProtocolError(
                f"cannot {command} message {message.message_id!r}: its subscription {message.subscription!r} is gone"
            )
        if mode == "auto":
            raise LocalProtocolError(
                f"cannot {command} message {message.message_id!r}: subscription {message.subscription!r} uses"
                " ack mode auto, where the broker needs no acknowledgement"
            )
        # STOMP 1.2: "The ACK frame MUST include an id header matching the ack header of the
        # MESSAGE being acknowledged"; 1.1: message-id and subscription; 1.0: message-id.
        if version == "1.2":
            if message.ack_id is None:
                raise RemoteProtocolError(f"the broker sent message {message.message_id!r} without an ack header")
            return {"id": message.ack_id}
        if message.message_id is None:
            raise RemoteProtocolError("the broker sent a MESSAGE without a message-id header")
        h = {"message-id": message.message_id}
        if version == "1.1":
            h["subscription"] = message.subscription
        return h
