"""The CONNECT a session offers, and what the broker's CONNECTED settles.

:class:`Handshake` holds what one session offers, checked when the session is
made: the versions, the heart-beats it asks for, the virtual host, the
credentials and the other CONNECT headers. It writes the CONNECT (or STOMP)
frame and reads the broker's CONNECTED headers into a :class:`Settlement`: the
version the broker chose (refused if we did not offer it), the broker its
``server`` header names, the escaping to write and read with, and the
heart-beats agreed (clamped by :func:`negotiate_heart_beat`). The session
(:class:`~stompfast._protocol.StompProtocol`) owns one ``Handshake``, moves its
own state around it and keeps the settlement in its own fields; a handshake
never changes once made, so nothing here is shared state. Like the protocol
core, nothing here imports anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, NamedTuple, Optional, Sequence, Tuple

from ._brokers import broker_of
from ._protocol_rules import check_heart_beat, check_versions, escaping_rules, negotiate_heart_beat, with_client_id
from ._scanner import encode_frame
from .errors import ConfigurationError, RemoteProtocolError

__all__ = ["Handshake", "Settlement"]


class Settlement(NamedTuple):
    """What a broker's CONNECTED settled for the session."""

    version: str
    #: the ``server`` header, and the broker it names (:func:`broker_of`)
    server: Optional[str]
    broker: Optional[str]
    session: Optional[str]
    #: ``(send_ms, receive_ms)``, negotiated
    heart_beat: Tuple[int, int]
    #: the escaping rules of what we send and of what we read (:func:`escaping_rules`)
    send_rules: str
    read_rules: str


class Handshake:
    """What one session offers in its CONNECT: the arguments of :class:`StompProtocol` of these names.

    Args:
        versions: the versions to offer, preferred last as the spec orders them.
        heart_beat: ``(cx, cy)`` in ms: the smallest interval we can send at, the
            interval we want to receive at (0: none).
        host: the CONNECT ``host`` header (the virtual host). ``"/"`` by default,
            which RabbitMQ reads as its default vhost and ActiveMQ and Artemis
            ignore; ``None`` leaves the header out (STOMP 1.1+ requires it).
        login, passcode: credentials, sent as ``login``/``passcode``.
        connect_headers: more CONNECT headers.
        client_id: the CONNECT ``client-id`` header: the identity ActiveMQ Classic
            and Artemis keep durable subscriptions under.
        use_stomp_command: send ``STOMP`` instead of ``CONNECT`` (1.1+ only).

    ConfigurationError, when made, for an offer no broker could accept.
    """

    __slots__ = ("versions", "heart_beat", "host", "login", "passcode", "headers", "client_id", "command")

    def __init__(
        self, *, versions: Iterable[str], heart_beat: Sequence[int], host: Optional[str], login: Optional[str],
        passcode: Optional[str], connect_headers: Optional[Mapping[str, str]], client_id: Optional[str],
        use_stomp_command: bool,
    ) -> None:
        self.versions = check_versions(versions)
        #: the ``(cx, cy)`` we ask for, in ms
        self.heart_beat = check_heart_beat(heart_beat)
        if use_stomp_command and self.versions == ("1.0",):
            raise ConfigurationError("the STOMP command needs version 1.1 or later; 1.0 brokers only know CONNECT")
        self.host = host
        self.login = login
        self.passcode = passcode
        #: the caller's CONNECT headers, with ``client-id`` when ``client_id`` is given
        self.headers = with_client_id(connect_headers, client_id)
        #: the connection's client-id (client_id=, or connect_headers'), or None
        self.client_id: Optional[str] = self.headers.get("client-id")
        self.command = "STOMP" if use_stomp_command else "CONNECT"

    def frame(self) -> bytes:
        """The CONNECT (or STOMP) frame: our headers first, then the caller's where they name no other."""
        headers: Dict[str, str] = {}
        if self.versions != ("1.0",):
            headers["accept-version"] = ",".join(self.versions)
        if self.host is not None:
            headers["host"] = self.host
        if self.login is not None:
            headers["login"] = self.login
        if self.passcode is not None:
            headers["passcode"] = self.passcode
        # Brokers enforce a heart-beat header even when the session settles on 1.0,
        # so it is sent whenever beats are wanted.
        if self.heart_beat != (0, 0):
            headers["heart-beat"] = "%d,%d" % self.heart_beat
        for name, value in self.headers.items():
            headers.setdefault(name, value)
        # CONNECT is never escaped, on any version.
        return encode_frame(self.command, headers, b"", "1.2")

    def settle(self, headers: Mapping[str, str]) -> Settlement:
        """What the CONNECTED ``headers`` settle; RemoteProtocolError for a version we did not offer."""
        version = headers.get("version", "1.0")
        if version not in self.versions:
            raise RemoteProtocolError(
                f"the broker chose STOMP {version}, which we did not offer ({', '.join(self.versions)})"
            )
        server = headers.get("server")
        send_rules, read_rules = escaping_rules(version, server)
        heart_beat = negotiate_heart_beat(self.heart_beat, headers.get("heart-beat"))
        return Settlement(
            version, server, broker_of(server), headers.get("session"), heart_beat, send_rules, read_rules
        )
