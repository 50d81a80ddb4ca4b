"""One client connection of the test broker: its reader and writer, and the handling of each frame.

A :class:`Connection` owns its socket, its server-side scanner, its outbox, the session
it negotiated (version, heart-beats, login), its subscriptions by id, the index of its
unacked deliveries and its open transactions. It routes, delivers and settles through
the broker's :class:`~stompfast.testing._broker_store.Store`. See the theory of operation
in :mod:`stompfast.testing._broker`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import anyio

from .._protocol import MAX_HEART_BEAT_MS
from .._scanner import FrameScanner, encode_frame
from ..errors import LimitExceededError, LocalProtocolError, RemoteProtocolError
from ..frames import SERVER_COMMANDS, Frame
from ._broker_listener import aclose_quietly
from ._broker_model import ACK_MODES, NOT_COPIED, Delivery, Faults, Subscription, Tally, Violation, canonical
from ._broker_store import Store

__all__ = ["Connection", "Settings"]

_IO_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
#: Above this many bytes waiting in a connection's outbox the broker stops delivering to it and
#: stops reading from it until the writer has caught up (per-connection memory bound).
_OUTBOX_HIGH_WATER = 1 << 20
_READ_SIZE = 65536


@dataclass(frozen=True)
class Settings:
    """What a connection needs of the broker's options, read when the connection is accepted."""

    versions: Tuple[str, ...]
    heart_beat: Tuple[int, int]
    users: Optional[Mapping[str, str]]
    server: str
    heartbeat_grace: float
    linger: float
    when_full: str


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_heart_beat(value: Optional[str]) -> Tuple[int, int]:
    """A client's ``heart-beat`` header: two integers of ASCII digits (the spec's grammar), capped.

    ``int()`` alone would take spaces, signs, ``_`` and non-ASCII digits; a huge
    value is clamped to MAX_HEART_BEAT_MS (one hour), as the client does.
    """
    if value is None:
        return 0, 0
    parts = value.split(",")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise Violation("Invalid heart-beat header", f"heart-beat must be two non-negative integers "
                        f"of ASCII digits separated by a comma, got {value[:64]!r}\n")
    cx, cy = (min(int(p), MAX_HEART_BEAT_MS) for p in parts)
    return cx, cy


def _encode(version: Optional[str], command: str, headers: Sequence[Tuple[str, str]], body: bytes) -> bytes:
    version = version or "1.2"
    try:
        data = encode_frame(command, headers, body, version=version)
    except LocalProtocolError:
        # Blank out only what this version cannot say: CR (1.0, 1.1), LF (1.0), ':' in a name (1.0).
        def clean(text: str, name: bool) -> str:
            text = text.replace("\r", " ")
            if version == "1.0":
                text = text.replace("\n", " ")
                if name:
                    text = text.replace(":", "_")
            return text

        headers = [(clean(k, True) or "_", clean(v, False)) for k, v in headers]
        data = encode_frame(command, headers, body, version=version)
    return data


class Connection:
    """One accepted client socket and the STOMP session on it."""

    def __init__(self, stream: Any, scanner: FrameScanner, number: int, settings: Settings, store: Store,
                 tally: Tally, faults: Faults) -> None:
        self.stream = stream
        self.scanner = scanner
        self.number = number
        self.settings = settings
        self.store = store
        self.tally = tally
        self.faults = faults
        self.session: Optional[str] = None
        # The negotiated version; None until CONNECTED is sent.
        self.version: Optional[str] = None
        self.login: Optional[str] = None
        self.outbox = bytearray()
        # Set when the writer has something new to do.
        self.wake = anyio.Event()
        # Set (and replaced) after each write, so that a reader held by a full outbox resumes.
        self.flushed = anyio.Event()
        self.writer_done = anyio.Event()
        # None while open, else how it closes: "graceful", "abort" or "abort-after-flush".
        self.closing: Optional[str] = None
        self.tg: Any = None
        # Seconds between broker heart-beats; 0 means none.
        self.hb_out = 0.0
        # Seconds the client promised between its heart-beats; 0 means none.
        self.hb_in = 0.0
        self.last_write = anyio.current_time()
        self.throttled = False
        self.subs: Dict[str, Subscription] = {}
        # STOMP 1.0 subscriptions without an id, by destination.
        self.anonymous: Dict[str, Subscription] = {}
        self.by_ack: Dict[str, Delivery] = {}
        self.by_message_id: Dict[str, Delivery] = {}
        self.transactions: Dict[str, List[Tuple[str, Any]]] = {}

    def all_subs(self) -> List[Subscription]:
        return list(self.subs.values()) + list(self.anonymous.values())

    # ------------------------------------------------------------------ what the other parts call

    def can_take(self) -> bool:
        """Whether a MESSAGE may be queued to this connection now (it is open and its outbox not full).

        A full outbox marks the connection throttled, so that the writer dispatches
        its subscriptions' queues again once it has caught up.
        """
        if self.closing or self.version is None:
            return False
        if len(self.outbox) >= _OUTBOX_HIGH_WATER:
            self.throttled = True
            return False
        return True

    def track(self, delivery: Delivery) -> None:
        """Index an unacked delivery by its ack id and message id, the ids an ACK may name it by."""
        self.by_ack[delivery.ack_id] = delivery
        self.by_message_id[delivery.message.id] = delivery

    def untrack(self, delivery: Delivery) -> None:
        self.by_ack.pop(delivery.ack_id, None)
        if self.by_message_id.get(delivery.message.id) is delivery:
            del self.by_message_id[delivery.message.id]

    def poke(self) -> None:
        """Wake the writer, so that it recomputes its heart-beat deadline."""
        self.wake.set()

    def write(self, data: bytes) -> bool:
        if self.closing is not None:
            return False
        self.outbox += data
        self.wake.set()
        return True

    def send(self, command: str, headers: Sequence[Tuple[str, str]], body: bytes = b"") -> None:
        if self.closing is not None:
            return
        self.tally.frame_out(command)
        self.write(_encode(self.version, command, headers, body))

    def send_half(self, command: str, headers: Sequence[Tuple[str, str]], body: bytes) -> None:
        """Write the first half of a frame only (:meth:`Broker.drop_mid_frame`); the caller then closes."""
        data = _encode(self.version, command, headers, body)
        self.tally.frame_out(command)
        self.write(data[: len(data) // 2])

    def error(self, message: str, body: str = "", receipt: Optional[str] = None,
              headers: Sequence[Tuple[str, str]] = ()) -> None:
        h = [("message", _one_line(message))]
        if receipt is not None:
            h.append(("receipt-id", receipt))
        h.extend(headers)
        b = body.encode()
        if b:
            h.append(("content-type", "text/plain"))
        self.send("ERROR", h, b)

    def close(self, how: str = "graceful", linger: Optional[float] = None) -> None:
        """Begin closing: end the session now; the socket closes per ``how``."""
        if self.closing is not None:
            if how == "abort" and self.tg is not None:
                self.tg.cancel_scope.cancel()
            return
        self.closing = how
        self.end_session()
        # A held SEND of this connection is dropped with it.
        self.store.wake_producers()
        self.wake.set()
        if self.tg is None:
            return
        if how == "abort":
            self.tg.cancel_scope.cancel()
        elif how == "graceful":
            self.tg.start_soon(self._linger, self.settings.linger if linger is None else linger)

    def end_session(self) -> None:
        """Abort transactions and end every subscription (requeue unacked); idempotent."""
        self.transactions.clear()
        for sub in self.all_subs():
            self._unsubscribe(sub)

    async def aclose(self) -> None:
        await aclose_quietly(self.stream)

    # ------------------------------------------------------------------ the two tasks

    async def serve(self, opened: Callable[[], None]) -> None:
        """Run the reader here and the writer beside it until the connection ends.

        ``opened`` is called once the connection's task group exists, so that the
        broker lists only connections that can be closed.
        """
        async with anyio.create_task_group() as tg:
            self.tg = tg
            opened()
            tg.start_soon(self._write_loop)
            await self._read_loop()
            tg.cancel_scope.cancel()

    async def _read_loop(self) -> None:
        stream = self.stream
        while True:
            while len(self.outbox) >= _OUTBOX_HIGH_WATER and self.closing is None:
                # The client does not read, so the broker stops reading it too.
                await self.flushed.wait()
            timeout = math.inf
            if self.hb_in and self.closing is None:
                timeout = 2 * self.hb_in + self.settings.heartbeat_grace
            try:
                with anyio.move_on_after(timeout) as scope:
                    data = await stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                # The client closed its sending side: what was queued for it (the RECEIPT of its
                # last frame, or an ERROR) is flushed first, then the connection closes.
                self.close(linger=0)
                with anyio.move_on_after(2):
                    await self.writer_done.wait()
                return
            except _IO_ERRORS:
                self.close("abort")
                return
            if scope.cancelled_caught:
                self.error("Heart-beat timeout",
                           f"No data received for {timeout * 1000:.0f} ms; the agreed client heart-beat "
                           f"interval is {self.hb_in * 1000:.0f} ms.\n")
                self.close(linger=0)
                continue
            if self.closing is None:
                await self._on_data(data)
                self.store.touch()

    async def _write_loop(self) -> None:
        stream = self.stream
        faults = self.faults
        try:
            while True:
                if self.outbox:
                    data = bytes(self.outbox)
                    del self.outbox[:]
                    await stream.send(data)
                    self.last_write = anyio.current_time()
                    self.flushed.set()
                    self.flushed = anyio.Event()
                    if self.throttled:
                        self.throttled = False
                        for sub in self.all_subs():
                            self.store.dispatch(sub.queue)
                    continue
                if self.closing == "graceful":
                    with contextlib.suppress(Exception):
                        await stream.send_eof()
                    return
                # Any other closing is an abort after the flush just done (a frame was cut).
                if self.closing is not None:
                    self.tg.cancel_scope.cancel()
                    return
                deadline = math.inf
                if self.hb_out and not faults.stopped_heartbeats:
                    deadline = self.last_write + self.hb_out
                with anyio.move_on_after(deadline - anyio.current_time()):
                    await self.wake.wait()
                if self.wake.is_set():
                    self.wake = anyio.Event()
                elif self.hb_out and not faults.stopped_heartbeats and self.closing is None:
                    # Nothing was written for a whole interval, so a heart-beat is due.
                    self.outbox += b"\n"
                    self.tally.count("heartbeats_out")
        except _IO_ERRORS:
            self.close("abort")
        finally:
            self.writer_done.set()

    async def _linger(self, seconds: float) -> None:
        # A client that reads nothing cannot hold the socket open.
        with anyio.move_on_after(2 + seconds):
            await self.writer_done.wait()
        await anyio.sleep(seconds)
        self.tg.cancel_scope.cancel()

    # ------------------------------------------------------------------ input

    async def _on_data(self, data: bytes) -> None:
        pos, n = 0, len(data)
        while pos < n and self.closing is None:
            if self.version is None:
                # STOMP 1.1: frames after CONNECT follow the negotiated version's escaping rules,
                # so input is fed up to the end of one frame (a NUL) until CONNECT has been handled.
                nul = data.find(b"\0", pos)
                end = n if nul < 0 else nul + 1
            else:
                end = n
            chunk = data[pos:end] if (pos or end != n) else data
            pos = end
            fault: Optional[RemoteProtocolError] = None
            try:
                frames = self.scanner.feed(chunk)
            except RemoteProtocolError as exc:
                frames, fault = list(exc.frames), exc
            if not frames and fault is None and self.scanner.buffered == 0 and not chunk.strip(b"\r\n"):
                self.tally.count("heartbeats_in")
            for frame in frames:
                if self.closing is not None:
                    return
                await self._on_frame(frame)
            if fault is not None and self.closing is None:
                if isinstance(fault, LimitExceededError):
                    self.error("Frame too large", f"{fault}\n",
                               headers=[("limit", f"{fault.limit_name}={fault.limit}")])
                else:
                    self.error("Malformed frame", f"{fault}\n")
                self.close()

    def _adds(self, frame: Frame) -> bool:
        """Whether handling ``frame`` (a SEND or COMMIT) stores messages now."""
        tx = frame.headers.get("transaction")
        if frame.command == "SEND":
            return tx is None
        return any(command == "SEND" for command, _ in self.transactions.get(tx or "", ()))

    async def _on_frame(self, frame: Frame) -> None:
        command = frame.command
        store = self.store
        if (command in ("SEND", "COMMIT") and store.full() and self.settings.when_full == "block"
                and self.version is not None and self._adds(frame)):
            # This connection is not read meanwhile, so TCP pushes back on the producer.
            await store.wait_for_space(self)
            if self.closing is not None:
                return
        self.tally.frame_in(frame)
        receipt = frame.headers.get("receipt")
        try:
            if self.version is None:
                if command not in ("CONNECT", "STOMP"):
                    raise Violation("Illegal command", f"{command} before CONNECT: you must log in using "
                                    "CONNECT first.\n")
                self._on_connect(frame)
                # STOMP 1.2: "Any client frame other than CONNECT MAY specify a receipt header"
                return
            handler = self._HANDLERS.get(command)
            if handler is None:
                if command in ("CONNECT", "STOMP"):
                    raise Violation("Already connected", f"{command} received on a connected session.\n")
                raise Violation("Illegal command", f"{command} is a server frame.\n"
                                if command in SERVER_COMMANDS else f"Unknown command {command}.\n")
            handler(self, frame)
        except Violation as v:
            self.error(v.message, v.body, receipt, v.headers)
            self.close()
            return
        if command == "DISCONNECT":
            # STOMP 1.2 DISCONNECT: the receipt confirms every earlier frame was received; then close.
            # The session ends first, so nothing is delivered during a delayed receipt.
            self.end_session()
            if receipt is not None and not self.faults.withhold and self.faults.receipt_delay:
                await anyio.sleep(self.faults.receipt_delay)
            self._receipt(receipt, delayed_ok=False)
            self.close()
            return
        self._receipt(receipt)

    def _receipt(self, receipt: Optional[str], delayed_ok: bool = True) -> None:
        if receipt is None:
            return
        faults = self.faults
        if faults.withhold:
            self.tally.count("withheld")
        elif faults.receipt_delay and delayed_ok:
            self.tg.start_soon(self._delayed_receipt, receipt, faults.receipt_delay)
        else:
            self.send("RECEIPT", [("receipt-id", receipt)])

    async def _delayed_receipt(self, receipt: str, delay: float) -> None:
        await anyio.sleep(delay)
        self.send("RECEIPT", [("receipt-id", receipt)])
        self.store.touch()

    # ------------------------------------------------------------------ CONNECT

    def _on_connect(self, frame: Frame) -> None:
        h = frame.headers
        settings = self.settings
        simulated = self.faults.take_connect_error()
        if simulated is not None:
            raise Violation(*simulated)
        # STOMP 1.2 "Protocol Negotiation": no accept-version means 1.0, else the highest in common wins.
        accept = h.get("accept-version")
        offered = ["1.0"] if accept is None else [v.strip() for v in accept.split(",")]
        common = [v for v in settings.versions if v in offered]
        if not common:
            supported = " ".join(settings.versions)
            raise Violation(f"Supported protocol versions are {supported}",
                            f"Supported protocol versions are {supported}\n",
                            headers=[("version", ",".join(settings.versions))])
        version = common[-1]
        login = h.get("login")
        users = settings.users
        if users is not None:
            if login is None or login not in users or users[login] != h.get("passcode"):
                who = "no login" if login is None else f"user '{login}'"
                raise Violation("Bad CONNECT", f"Access refused for {who}: bad login or passcode.\n")
        cx, cy = _parse_heart_beat(h.get("heart-beat"))
        sx, sy = settings.heart_beat
        # STOMP 1.2 "Heart-beating": none if either side says 0, else one every MAX of the two.
        self.hb_in = max(cx, sy) / 1000 if cx and sy else 0.0
        self.hb_out = max(sx, cy) / 1000 if sx and cy else 0.0
        self.version = version
        self.login = login
        self.session = f"session-{self.number}"
        self.scanner.version = version
        self.send("CONNECTED", [
            ("version", version),
            ("session", self.session),
            ("server", settings.server),
            ("heart-beat", f"{sx},{sy}"),
        ])
        self.last_write = anyio.current_time()

    # ------------------------------------------------------------------ frames of a session

    @staticmethod
    def _require(frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None:
            raise Violation(f"Missing {name} header", f"{frame.command} requires a '{name}' header.\n")
        return value

    def _transaction(self, frame: Frame) -> Optional[List[Tuple[str, Any]]]:
        tx = frame.headers.get("transaction")
        if tx is None:
            return None
        if tx not in self.transactions:
            raise Violation("Unknown transaction", f"Transaction '{tx}' was not begun (or has ended).\n")
        return self.transactions[tx]

    def _on_send(self, frame: Frame) -> None:
        destination = self._require(frame, "destination")
        # Unknown destinations are refused now, even inside a transaction, where the ERROR can name the SEND.
        canonical(destination)
        headers = [(k, v) for k, v in frame.header_list if k not in NOT_COPIED]
        held = self._transaction(frame)
        if held is not None:
            held.append(("SEND", (destination, headers, frame.body)))
        else:
            self.store.check_space()
            self.store.route(destination, headers, frame.body)

    def _on_subscribe(self, frame: Frame) -> None:
        destination = self._require(frame, "destination")
        sub_id = frame.headers.get("id")
        if sub_id is None and self.version != "1.0":
            raise Violation("Missing id header", "SUBSCRIBE requires an 'id' header since STOMP 1.1.\n")
        if sub_id is not None and sub_id in self.subs:
            raise Violation("Duplicate subscription id", f"Subscription '{sub_id}' already exists.\n")
        if sub_id is None and destination in self.anonymous:
            raise Violation("Duplicate subscription", f"Already subscribed to '{destination}' without id.\n")
        ack = frame.headers.get("ack", "auto")
        if ack not in ACK_MODES:
            raise Violation("Invalid ack mode",
                            f"ack must be one of {', '.join(ACK_MODES)}; got '{ack}'.\n")
        prefetch = 0
        for name in ("prefetch-count", "activemq.prefetchSize"):
            value = frame.headers.get(name)
            if value is not None:
                if not value.isdigit():
                    raise Violation(f"Invalid {name}", f"{name} must be a non-negative integer; "
                                    f"got '{value}'.\n")
                prefetch = int(value)
                break
        sub = self.store.subscribe(self, sub_id, destination, ack, prefetch)
        if sub_id is None:
            self.anonymous[destination] = sub
        else:
            self.subs[sub_id] = sub
        self.store.dispatch(sub.queue)

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.headers.get("id")
        if sub_id is not None:
            sub = self.subs.get(sub_id)
            if sub is None:
                raise Violation("Unknown subscription", f"No subscription with id '{sub_id}'.\n")
        elif self.version == "1.0" and "destination" in frame.headers:
            destination = frame.headers["destination"]
            sub = self.anonymous.get(destination) or next(
                (s for s in self.subs.values() if s.destination == destination), None)
            if sub is None:
                raise Violation("Unknown subscription", f"No subscription to '{destination}'.\n")
        else:
            raise Violation("Missing id header", "UNSUBSCRIBE requires an 'id' header.\n")
        self._unsubscribe(sub)

    def _unsubscribe(self, sub: Subscription) -> None:
        # Let go of the subscription here first; one already let go of is ended already.
        if sub.id is not None:
            if self.subs.get(sub.id) is not sub:
                return
            del self.subs[sub.id]
        else:
            if self.anonymous.get(sub.destination) is not sub:
                return
            del self.anonymous[sub.destination]
        self.store.unsubscribe(sub)

    def _find_delivery(self, frame: Frame) -> Delivery:
        h = frame.headers
        command = frame.command
        if self.version == "1.2":
            # STOMP 1.2 ACK: "The ACK frame MUST include an id header matching the ack header of the MESSAGE"
            ack_id = self._require(frame, "id")
            delivery = self.by_ack.get(ack_id)
            if delivery is None:
                raise Violation("Unknown message", f"{command} of '{ack_id}', which is no unacked message "
                                "of this session.\n")
            return delivery
        # STOMP 1.1 requires message-id and subscription; 1.0 message-id (and subscription if given).
        message_id = self._require(frame, "message-id")
        sub = None
        if self.version == "1.1" or "subscription" in h:
            sub_id = self._require(frame, "subscription")
            sub = self.subs.get(sub_id)
            if sub is None:
                raise Violation("Unknown subscription", f"{command} names subscription '{sub_id}', "
                                "which does not exist.\n")
        delivery = self.by_message_id.get(message_id)
        if delivery is None or (sub is not None and delivery.sub is not sub):
            raise Violation("Unknown message", f"{command} of message '{message_id}', which is no unacked "
                            "message of this " + ("subscription" if sub else "session") + ".\n")
        return delivery

    def _on_ack(self, frame: Frame) -> None:
        if frame.command == "NACK" and self.version == "1.0":
            raise Violation("Illegal command", "NACK does not exist in STOMP 1.0.\n")
        delivery = self._find_delivery(frame)
        held = self._transaction(frame)
        if held is not None:
            held.append((frame.command, delivery))
        else:
            self.store.settle(frame.command, delivery)

    def _on_begin(self, frame: Frame) -> None:
        tx = self._require(frame, "transaction")
        if tx in self.transactions:
            raise Violation("Duplicate transaction", f"Transaction '{tx}' is already open.\n")
        self.transactions[tx] = []

    def _on_commit(self, frame: Frame) -> None:
        self._require(frame, "transaction")
        held = self._transaction(frame)
        if any(command == "SEND" for command, _ in held or ()):
            self.store.check_space()
        del self.transactions[frame.headers["transaction"]]
        for command, item in held or ():
            if command == "SEND":
                self.store.route(*item)
            # An ACK or NACK whose delivery is still unacked is settled now; another was settled since.
            elif item.sub.holds(item):
                self.store.settle(command, item)

    def _on_abort(self, frame: Frame) -> None:
        self._require(frame, "transaction")
        self._transaction(frame)
        # The transaction's held sends and acks are forgotten with it.
        del self.transactions[frame.headers["transaction"]]

    def _on_disconnect(self, frame: Frame) -> None:
        # Nothing to do here: _on_frame sends the receipt and closes, since that may wait.
        pass

    _HANDLERS: Dict[str, Callable[[Connection, Frame], None]] = {
        "SEND": _on_send,
        "SUBSCRIBE": _on_subscribe,
        "UNSUBSCRIBE": _on_unsubscribe,
        "ACK": _on_ack,
        "NACK": _on_ack,
        "BEGIN": _on_begin,
        "COMMIT": _on_commit,
        "ABORT": _on_abort,
        "DISCONNECT": _on_disconnect,
    }
