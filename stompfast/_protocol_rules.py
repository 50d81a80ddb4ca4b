"""The STOMP rules the session applies, as constants and pure functions.

Which versions exist, how heart-beats are negotiated, which header escaping a
session writes and reads, what a client option or a destination must be, and
which ACK and NACK headers are the client's own. :class:`~stompfast._protocol.StompProtocol`
and its parts hold the state and call these (the negotiation ones from
``_protocol_handshake.py``); nothing here keeps any. Like the protocol
core, nothing here imports anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from .errors import ConfigurationError, LocalProtocolError, RemoteProtocolError

__all__ = [
    "ACK_MODES",
    "ESCAPING_ON_1_0",
    "MAX_HEART_BEAT_MS",
    "SETTLE_RESERVED",
    "SUPPORTED_VERSIONS",
    "add_settle_headers",
    "check_ack_mode",
    "check_destination",
    "check_heart_beat",
    "check_persistent",
    "check_versions",
    "escape_12",
    "escaping_rules",
    "negotiate_heart_beat",
    "with_client_id",
]

SUPPORTED_VERSIONS: Tuple[str, ...] = ("1.0", "1.1", "1.2")
#: Brokers (by the start of their ``server`` header) that escape headers on STOMP 1.0
#: sessions although 1.0 has no escaping, and the escaping rules to use with them
#: on the wire, ``(what we send, what we read)``, seen on these machines:
#: RabbitMQ escapes ``:`` as ``\c`` in what it sends and reads a backslash in what
#: it receives as an escape (an undefined one closes the connection): 1.1 both
#: ways. ActiveMQ unescapes ``\\``, ``\n`` and ``\c`` in what it receives but sends
#: raw: 1.1 out, 1.0 in.
ESCAPING_ON_1_0: Dict[str, Tuple[str, str]] = {"RabbitMQ/": ("1.1", "1.1"), "ActiveMQ/": ("1.1", "1.0")}
ACK_MODES = ("auto", "client", "client-individual")
#: The largest heart-beat interval taken from a broker, in ms (one hour): larger
#: values are clamped to it. See :func:`negotiate_heart_beat`.
MAX_HEART_BEAT_MS = 3_600_000
#: The headers of an ACK or NACK that the client writes itself: extra headers may not replace them.
SETTLE_RESERVED = frozenset({"id", "message-id", "subscription", "transaction", "receipt"})


def check_destination(destination: Any) -> None:
    """Refuse a destination that is not a ``str``: encoded, ``5`` would go out as ``destination:5``."""
    if not isinstance(destination, str):
        raise TypeError(f"destination must be a str, not {type(destination).__name__}")


def escape_12(value: str) -> str:
    """A header value escaped by STOMP 1.2's rules (backslash first, so added ones stay single)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(":", "\\c")


def escaping_rules(version: str, server: Optional[str]) -> Tuple[str, str]:
    """The escaping rules ``(what we send, what we read)`` of a session on ``version`` with this ``server``.

    The negotiated version's own rules, except on 1.0 with a broker of
    :data:`ESCAPING_ON_1_0`, which escapes although 1.0 has no escaping.
    """
    if version == "1.0" and server:
        for prefix, rules in ESCAPING_ON_1_0.items():
            if server.startswith(prefix):
                return rules
    return version, version


def add_settle_headers(command: str, h: Dict[str, Any], headers: Mapping[str, Any]) -> None:
    """Add the caller's extra ``headers`` to an ACK or NACK's ``h`` (the client's own are refused)."""
    for name, value in headers.items():
        if name in SETTLE_RESERVED:
            raise LocalProtocolError(
                f"the {command} header {name!r} is written by the client (it names the message, the"
                " transaction or the receipt): it cannot be given in headers"
            )
        h[name] = value


def negotiate_heart_beat(client: Tuple[int, int], server: Optional[str]) -> Tuple[int, int]:
    """Negotiated ``(send_ms, receive_ms)`` from our ``heart-beat`` and the broker's header.

    STOMP 1.1 "Heart-beating": client to server, 0 if ``cx`` or ``sy`` is 0, else
    ``MAX(cx, sy)``; server to client, 0 if ``sx`` or ``cy`` is 0, else ``MAX(sx, cy)``.
    A missing header is "0,0".

    The header is read strictly. STOMP 1.2: "When used, the heart-beat header MUST
    contain two positive integers separated by a comma": each is one or more ASCII
    digits (``0`` allowed, as the spec's own "0,0"), nothing else, so no sign,
    space, ``_`` or non-ASCII digit (all of which ``int()`` would take). Anything
    else is a :class:`~stompfast.RemoteProtocolError` naming the header. An empty
    header is taken as a missing one ("0,0": no beats either way, the safe reading).

    A broker value above :data:`MAX_HEART_BEAT_MS` (one hour) is clamped to it
    rather than refused: the session is still usable, we beat at least hourly (the
    spec's "at least every <n> milliseconds" is kept by beating more often), and
    ``heart-beat:99999999999,1`` can no longer push the liveness deadline ~9.5 years
    out. No broker beats less often than every few minutes (RabbitMQ's default is
    60 s); an hour only bounds a mistaken or hostile header. Our own ``(cx, cy)``
    are not clamped: they are the caller's choice.
    """
    cx, cy = client
    sx = sy = 0
    if server:
        parts = server.split(",")
        if len(parts) != 2 or not all(part.isascii() and part.isdigit() for part in parts):
            shown = repr(server) if len(server) <= 64 else f"{server[:64]!r}..."
            raise RemoteProtocolError(
                f"CONNECTED has an invalid heart-beat header {shown}: it must be two integers of ASCII digits"
                " separated by a comma"
            )
        # At most 10 digits go through int(): anything longer is over the cap anyway.
        sx, sy = (min(int(part) if len(part) <= 10 else MAX_HEART_BEAT_MS, MAX_HEART_BEAT_MS) for part in parts)
    send = 0 if cx == 0 or sy == 0 else max(cx, sy)
    receive = 0 if sx == 0 or cy == 0 else max(sx, cy)
    return send, receive


def check_versions(versions: Iterable[str]) -> Tuple[str, ...]:
    """The versions to offer as a tuple (a comma-separated ``str`` is split); ConfigurationError for an unknown one."""
    if isinstance(versions, str):
        versions = [v.strip() for v in versions.split(",")]
    result = tuple(versions)
    if not result:
        raise ConfigurationError("versions must name at least one STOMP version")
    for v in result:
        if v not in SUPPORTED_VERSIONS:
            raise ConfigurationError(f"unsupported STOMP version {v!r}: choose from {', '.join(SUPPORTED_VERSIONS)}")
    return result


def check_heart_beat(heart_beat: Sequence[int]) -> Tuple[int, int]:
    """``heart_beat`` as a pair of non-negative int milliseconds, or ConfigurationError."""
    try:
        cx, cy = heart_beat
    except (TypeError, ValueError):
        raise ConfigurationError(f"heart_beat must be a pair of milliseconds (cx, cy), not {heart_beat!r}") from None
    for v in (cx, cy):
        if type(v) is not int or v < 0:
            raise ConfigurationError(f"heart_beat values must be non-negative int milliseconds, not {heart_beat!r}")
    return cx, cy


def with_client_id(connect_headers: Optional[Mapping[str, str]], client_id: Optional[str]) -> Dict[str, str]:
    """A copy of ``connect_headers`` with ``client-id`` set to ``client_id``, when given.

    ConfigurationError for a ``client_id`` that is not a non-empty ``str``, or
    that differs from a ``client-id`` already in ``connect_headers``.
    """
    headers = dict(connect_headers or {})
    if client_id is not None:
        if not isinstance(client_id, str) or not client_id:
            raise ConfigurationError(f"client_id must be a non-empty str, not {client_id!r}")
        given = headers.get("client-id")
        if given is not None and given != client_id:
            raise ConfigurationError(
                f"client_id={client_id!r} and connect_headers' client-id {given!r} differ: give one"
            )
        headers["client-id"] = client_id
    return headers


def check_persistent(persistent: Any) -> None:
    """Refuse a ``persistent=`` option that is not True, False or None."""
    if persistent is not None and type(persistent) is not bool:
        raise ConfigurationError(f"persistent must be True, False or None, not {persistent!r}")


def check_ack_mode(ack: Any, version: Optional[str]) -> None:
    """Refuse an ack mode that is not one of ACK_MODES, or that the session's ``version`` lacks."""
    if ack not in ACK_MODES:
        raise ConfigurationError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
    if ack == "client-individual" and version == "1.0":
        raise LocalProtocolError("ack mode client-individual needs STOMP 1.1 or later; this session is 1.0")
