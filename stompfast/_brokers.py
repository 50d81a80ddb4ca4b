"""What the brokers stompfast knows do differently, and the headers and rules it follows for each.

One place for every per-broker fact the client acts on, so that the session
(``_protocol.py``, and its encoder in ``_protocol_encoder.py``) asks "which
broker, what header" instead of spelling broker names. A broker is known by the
start of CONNECTED's ``server`` header, never by URL (a failover list may mix
brokers); docs/brokers.md has the table and the measurements behind each entry.
Pure data and functions: no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import ConfigurationError

__all__ = [
    "ARTEMIS_TX_ACK",
    "ARTEMIS_WINDOW_BYTES_PER_MESSAGE",
    "BROKERS",
    "DURABLE_NEEDS_CLIENT_ID",
    "ERRORS_THAT_KEEP_THE_SESSION",
    "MAX_TTL",
    "NACK_LOSES",
    "OPTION_HEADERS",
    "PREFETCH_HEADERS",
    "SELECTOR_IGNORED",
    "broker_of",
    "check_durable",
    "check_message_options",
    "check_selector",
    "default_persistent",
    "durable_headers",
    "forget_headers",
    "message_option_headers",
    "prefetch_headers",
    "reply_destination",
    "routing_type",
]


def _rabbitmq_keeps(headers: Mapping[str, str]) -> bool:
    # RabbitMQ sends "Subscription not found" for deliveries still in flight to a
    # subscription just left, and for an ACK/NACK of a message of one; it keeps the
    # connection open after it (measured on RabbitMQ 3.10; docs/errors.md).
    return headers.get("message") == "Subscription not found"


def _activemq_keeps(headers: Mapping[str, str]) -> bool:
    # ActiveMQ Classic answers a frame it refuses (an unknown transaction, an
    # unexpected ACK, a SEND without destination, ...) with an ERROR that carries
    # the frame's receipt id and keeps the connection open; ERRORs that end the
    # session (a failed login) carry none, and it closes the socket after them.
    return "receipt-id" in headers


#: ERRORs after which the broker keeps the session, by the start of its ``server``
#: header: a test of the ERROR's headers. Every other ERROR ends the session, as
#: STOMP says ("the server MUST then close the connection just after sending the
#: ERROR frame"); the client then closes the connection itself. A kept ERROR that
#: names a receipt fails that receipt only. docs/errors.md has the table.
ERRORS_THAT_KEEP_THE_SESSION: Dict[str, Any] = {
    "RabbitMQ/": _rabbitmq_keeps,
    "ActiveMQ/": _activemq_keeps,
}

#: The brokers stompfast knows by the start of CONNECTED's ``server`` header (never
#: by URL: a failover list may mix them). docs/brokers.md says what differs.
BROKERS: Tuple[Tuple[str, str], ...] = (
    ("RabbitMQ/", "rabbitmq"),
    ("ActiveMQ-Artemis/", "artemis"),
    ("ActiveMQ/", "activemq"),
)

#: What a broker does with a NACKed message when that loses it (measured by
#: scripts/nack_facts.py; docs/brokers.md, "NACK and redelivery"): said once when a
#: consumer is told to NACK its failed messages there.
NACK_LOSES: Dict[str, str] = {
    "activemq": "ActiveMQ Classic discards a NACKed non-persistent message (a persistent one goes to ActiveMQ.DLQ)",
    "artemis": "Artemis discards a NACKed message",
}

#: The headers that ask a broker for a prefetch (any of them given by the caller: none added).
PREFETCH_HEADERS = ("prefetch-count", "activemq.prefetchSize", "consumer-window-size")

#: Artemis counts a consumer's window in bytes (``consumer-window-size``; it reads
#: ``activemq.prefetchSize`` as bytes too): the window asked for is this many bytes
#: per message of ``buffer_size``. docs/brokers.md has the measurements behind it.
ARTEMIS_WINDOW_BYTES_PER_MESSAGE = 1024


#: Why an ACK or NACK in a transaction is refused on Artemis (before anything is sent).
ARTEMIS_TX_ACK = (
    "ActiveMQ Artemis does not make an {command} part of a transaction (it acts at once and an ABORT"
    " does not undo it), so the client refuses it rather than pretend: {command} the message outside"
    " the transaction, after the COMMIT (docs/brokers.md)"
)


def broker_of(server: Optional[str]) -> Optional[str]:
    """``"rabbitmq"``, ``"activemq"``, ``"artemis"`` or None, from CONNECTED's ``server`` header."""
    if server:
        for prefix, name in BROKERS:
            if server.startswith(prefix):
                return name
    return None


def prefetch_headers(broker: Optional[str], messages: int) -> Dict[str, str]:
    """The SUBSCRIBE headers that keep at most ``messages`` in flight on ``broker``."""
    if broker == "rabbitmq":
        return {"prefetch-count": str(messages)}
    if broker == "activemq":
        return {"activemq.prefetchSize": str(messages)}
    if broker == "artemis":
        return {"consumer-window-size": str(messages * ARTEMIS_WINDOW_BYTES_PER_MESSAGE)}
    # A broker we do not know (or Artemis on a 1.0 session, which sends no server header):
    # RabbitMQ's message count only. ActiveMQ's activemq.prefetchSize would be read as a
    # window of that many bytes by Artemis: one message in flight at a time.
    return {"prefetch-count": str(messages)}


#: The brokers that tie a durable subscription to the connection's ``client-id``: a
#: durable SUBSCRIBE without one is refused there (Artemis answers ERROR; ActiveMQ
#: Classic takes it under the connection's random id, so no later connection finds it).
DURABLE_NEEDS_CLIENT_ID = ("activemq", "artemis")


def durable_headers(broker: Optional[str], name: str) -> Dict[str, str]:
    """The SUBSCRIBE headers that make a subscription durable under ``name`` on ``broker``.

    RabbitMQ names the durable queue after the destination and the subscription
    ``id`` (the caller sets the id to ``name``); ActiveMQ Classic and Artemis
    after the connection's ``client-id`` and this name. docs/brokers.md has the
    measurements behind it.
    """
    if broker == "rabbitmq":
        return {"durable": "true", "auto-delete": "false"}
    if broker == "activemq":
        return {"activemq.subscriptionName": name}
    if broker == "artemis":
        return {"durable-subscription-name": name}
    # a broker we do not know (Artemis sends no server header on STOMP 1.0): every spelling, one name
    return {"durable": "true", "auto-delete": "false", "activemq.subscriptionName": name,
            "durable-subscription-name": name}


def reply_destination(broker: Optional[str], token: str) -> Tuple[str, bool]:
    """Where replies to this connection's requests go on ``broker``: ``(destination, subscribed_by_broker)``.

    RabbitMQ: a ``/temp-queue/`` named in ``reply-to`` is created for the connection
    and subscribed by the broker itself (a SUBSCRIBE to it is an ERROR); replies
    arrive with that name as their ``subscription``. ActiveMQ Classic: the client
    subscribes to the ``/temp-queue/`` first (the responder sees a
    ``/remote-temp-queue/ID:...`` it can send to). Artemis has no temporary
    destinations over STOMP: a topic of the client's own (``token``), whose
    subscription queue is non-durable and goes with the connection. Elsewhere: a
    queue of the client's own. Each goes away with the connection, except the
    last and Artemis's empty address (docs/brokers.md, measured).
    """
    if broker == "rabbitmq":
        return "/temp-queue/stompfast-replies", True
    if broker == "activemq":
        return "/temp-queue/stompfast-replies", False
    if broker == "artemis":
        return f"/topic/stompfast.replies.{token}", False
    return f"/queue/stompfast-replies-{token}", False


def forget_headers(broker: Optional[str], name: str) -> Dict[str, str]:
    """The UNSUBSCRIBE headers that delete the durable subscription ``name`` on ``broker``."""
    if broker == "rabbitmq":
        return {"durable": "true"}
    if broker == "activemq":
        return {"activemq.subscriptionName": name}
    if broker == "artemis":
        return {"durable-subscription-name": name}
    return {"durable": "true", "activemq.subscriptionName": name, "durable-subscription-name": name}


def check_durable(
    durable: Any, id: Optional[str], broker: Optional[str], server: Optional[str], client_id: Optional[str]
) -> None:
    """Refuse a durable name that is not a non-empty str, an ``id`` that differs from it, or a missing client-id.

    The subscription id of a durable subscription is its name: RabbitMQ names the
    durable queue after the id, so only the same id finds the queue again. A
    ``broker`` of :data:`DURABLE_NEEDS_CLIENT_ID` (``server`` names it in the
    message) needs the connection's ``client_id``; before CONNECTED, with no
    broker known, only the name is checked.
    """
    if not isinstance(durable, str) or not durable:
        raise ConfigurationError(f"durable must be a non-empty str (the subscription's name), not {durable!r}")
    if id is not None and id != durable:
        raise ConfigurationError(
            f"a durable subscription's id is its name: id={id!r} differs from durable={durable!r} (leave id out)"
        )
    if client_id is None and broker in DURABLE_NEEDS_CLIENT_ID:
        raise ConfigurationError(
            f"a durable subscription on {server or broker} needs a client identity: create the"
            " client with client_id=... (the broker keeps the subscription under it, and a later"
            " connection with the same client_id finds it again)"
        )


def routing_type(destination: str) -> Optional[str]:
    """Artemis's routing type for a ``/queue/`` or ``/topic/`` destination (None for others)."""
    if destination.startswith("/queue/"):
        return "ANYCAST"
    if destination.startswith("/topic/"):
        return "MULTICAST"
    return None


# -- message options: time to live, priority, persistence, selectors ------------------------------

#: The most seconds ``ttl=`` may ask: ten years of 365 days. RabbitMQ answers a larger
#: ``expiration`` (measured on 3.10: above 315,360,000,000 ms) with an ERROR that ends the
#: session (``invalid expiration ... value_too_large``), so it is refused before sending.
MAX_TTL = 315_360_000

#: The SEND headers each message option writes (on some broker): a keyword option and one of
#: its headers in ``headers=`` together are refused, rather than one of them silently winning.
OPTION_HEADERS: Dict[str, Tuple[str, ...]] = {
    "ttl": ("expiration", "expires"),
    "priority": ("priority",),
    "persistent": ("persistent",),
}

#: The brokers that accept a SUBSCRIBE ``selector`` header and ignore it (every message is
#: delivered, matching or not): a selector is refused there before anything is sent.
SELECTOR_IGNORED = ("rabbitmq",)


def check_message_options(ttl: Any, priority: Any, persistent: Any, headers: Optional[Mapping[str, Any]]) -> None:
    """Refuse a bad ``ttl``, ``priority`` or ``persistent``, or one that ``headers`` also set (ConfigurationError).

    ``ttl``: seconds, a positive finite int or float up to :data:`MAX_TTL`;
    ``priority``: an int from 0 to 9 (the JMS range); ``persistent``: a bool.
    """
    if ttl is not None:
        if type(ttl) not in (int, float) or not math.isfinite(ttl) or not 0 < ttl <= MAX_TTL:
            raise ConfigurationError(
                f"ttl must be a number of seconds above 0 and at most {MAX_TTL} (ten years: RabbitMQ's limit),"
                f" not {ttl!r}"
            )
    if priority is not None and (type(priority) is not int or not 0 <= priority <= 9):
        raise ConfigurationError(f"priority must be an int from 0 to 9, not {priority!r}")
    if persistent is not None and type(persistent) is not bool:
        raise ConfigurationError(f"persistent must be True, False or None, not {persistent!r}")
    if headers:
        given = {"ttl": ttl, "priority": priority, "persistent": persistent}
        for option, names in OPTION_HEADERS.items():
            if given[option] is None:
                continue
            for name in names:
                if name in headers:
                    raise ConfigurationError(
                        f"{option}= and a {name!r} header both given: give one ({option}= writes the header"
                        " the broker reads)"
                    )


def message_option_headers(
    broker: Optional[str], ttl: Optional[float], priority: Optional[int], persistent: Optional[bool], now: float
) -> Dict[str, str]:
    """The SEND headers that ask ``broker`` for ``ttl``, ``priority`` and ``persistent`` (checked values).

    ``now`` is the time of the send in seconds since the epoch. RabbitMQ reads a
    time to live as ``expiration`` in milliseconds from its arrival; ActiveMQ Classic
    and Artemis as ``expires``, the epoch millisecond at which it expires (by the
    broker's clock), and each ignores the other's header. A broker stompfast does
    not know (Artemis on STOMP 1.0) gets both. ``priority`` and ``persistent`` are
    the same header everywhere (docs/brokers.md says who honours them).
    """
    h: Dict[str, str] = {}
    if ttl is not None:
        # Rounded up: a ttl under a millisecond still expires, rather than meaning "0"
        ms = math.ceil(ttl * 1000)
        if broker != "activemq" and broker != "artemis":
            h["expiration"] = str(ms)
        if broker != "rabbitmq":
            h["expires"] = str(int(now * 1000) + ms)
    if priority is not None:
        h["priority"] = str(priority)
    if persistent is not None:
        h["persistent"] = "true" if persistent else "false"
    return h


def default_persistent(broker: Optional[str], destination: str, persistent: Optional[bool]) -> bool:
    """Whether a SEND to ``destination`` gets ``persistent:true`` when it does not say (the client option).

    ``persistent``: the client's ``persistent=`` option. True: every SEND; False:
    none (each broker's own default: not persistent); None: every ``/queue/`` SEND
    on a broker stompfast knows. Each of them keeps a STOMP message that does not say
    ``persistent:true`` in memory only (RabbitMQ: delivery mode 1, dropped from a
    classic queue at a restart), so a broker restart would empty a job queue on all
    three; the cost of storing it is measured in docs/brokers.md
    (``bench/persistent_cost.py``). A broker it does not know (the in-process test
    broker, Artemis on STOMP 1.0, which names itself on 1.1 and 1.2 only) gets
    nothing it did not ask for.
    """
    if persistent is not None:
        return persistent
    return broker is not None and destination.startswith("/queue/")


def check_selector(broker: Optional[str], server: Optional[str], headers: Optional[Mapping[str, Any]]) -> None:
    """Refuse a SUBSCRIBE ``selector`` header on a broker that would ignore it (ConfigurationError)."""
    if headers and "selector" in headers and broker in SELECTOR_IGNORED:
        raise ConfigurationError(
            f"{server or broker} ignores STOMP selectors: every message of the destination would be delivered,"
            " matching or not, so the subscription is refused. Route with an /exchange/ destination and a binding"
            " pattern, or filter in your handler (docs/brokers.md)"
        )
