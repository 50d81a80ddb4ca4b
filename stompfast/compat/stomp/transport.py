"""The connection's socket, receiver thread and listener registry (stomp.py's ``stomp.transport``).

Theory of operation
-------------------
:class:`Transport` owns one TCP (or TLS) socket at a time. ``start()`` opens it,
trying each ``(host, port)`` in turn for up to ``reconnect_attempts_max`` rounds, with
stomp.py's pauses between them computed by the client's backoff function and TLS by the
client's SSL context, calls ``on_connecting`` and starts one receiver thread. That thread
reads large chunks and feeds them to stompfast's :class:`~stompfast.FrameScanner`
(compiled when available). Until the first frame it judges the bytes as the client does
(a server that is not STOMP, a TLS port), and it refuses a CONNECTED whose heart-beat
header the client's negotiation refuses: either ends the connection, and
``connect(wait=True)`` raises ``ConnectFailedException`` with the client's message.
Each frame becomes a mutable
:class:`~stompfast.compat.stomp.utils.Frame` and goes to :meth:`Transport.notify`,
which calls the listeners sorted by name, in the order the frames arrived.
A chunk of nothing but line ends, with no partial frame pending, is a heart-beat.
``transmit()`` calls every listener's ``on_send`` (which may edit the frame), encodes
the frame with :func:`stompfast.encode_frame` and writes it with ``sendall`` under a
lock, in the calling thread. On TLS the socket is non-blocking and every read and write
of the TLS connection is made under a second lock (an OpenSSL connection is not safe for
both at once), with the waits done by ``select`` outside it. Nothing here is bounded that
stomp.py leaves unbounded, except where a stompfast addition (a ``timeout`` argument, the
connection's ``wait_timeout``) says so.
"""

import errno
import functools
import select
import socket
import ssl
import threading
import time
from time import monotonic
from typing import Any, Callable, Dict, List, Optional, Tuple

from ... import FrameScanner, encode_frame
from ..._link import not_stomp, wrong_answer
from ..._reconnect import backoff_delay
from ..._tls import client_ssl_context
from ...errors import ConnectError, ProtocolError
from . import exception, listener, logging as log, utils
from .constants import CMD_DISCONNECT, HDR_CONTENT_LENGTH, HDR_HEARTBEAT, HDR_RECEIPT

try:
    from socket import SO_KEEPALIVE, SOL_SOCKET, SOL_TCP, TCP_KEEPCNT, TCP_KEEPIDLE, TCP_KEEPINTVL

    LINUX_KEEPALIVE_AVAIL = True
except ImportError:
    LINUX_KEEPALIVE_AVAIL = False

#: the TLS protocol stomp.py's ``set_ssl`` defaults to
DEFAULT_SSL_VERSION = ssl.PROTOCOL_TLS_CLIENT

HostAndPort = Tuple[str, int]

_KNOWN_FRAMES = frozenset(("connected", "message", "receipt", "error", "heartbeat"))
# A received chunk holding only these bytes, with no partial frame pending, is heart-beats
_EOL_BYTES = b"\r\n"
# How many of the first bytes received are kept to judge (and quote) a server that may not
# be STOMP; the client keeps as many, so both quote the same bytes.
_HEAD = 64
# The error for a TLS port spoken to in plain TCP tells a stomp.py user to call set_ssl, not
# to use the client's ssl= option.
_TLS_PORT_HINT = "call set_ssl() for it"


class BaseTransport(listener.Publisher):
    """Listeners, receipts, the receiver loop and framing; the socket itself is :class:`Transport`'s.

    ``auto_decode=True`` gives listeners ``str`` bodies (UTF-8, undecodable bytes
    replaced, as stomp.py 8 does whatever ``encoding`` says); ``False`` gives ``bytes``.
    """

    def __init__(self, auto_decode: bool = True, encoding: str = "utf-8",
                 is_eol_fc: Callable[[bytes], bool] = utils.is_eol_default) -> None:
        self.listeners: Dict[str, Any] = {}
        self.running = False
        self.blocking: Optional[bool] = None
        self.connected = False
        self.connection_error = False
        self.disconnecting = False
        self.current_host_and_port: Optional[HostAndPort] = None
        self.bind_host_port: Optional[HostAndPort] = None
        self.notified_on_disconnect = False
        self.create_thread_fc: Callable[[Callable[[], Any]], Any] = utils.default_create_thread
        #: the STOMP version the connection class speaks: offered in CONNECT, and the one frames
        #: are encoded and scanned in until CONNECTED names the session's
        self.version = "1.1"
        #: the version CONNECTED named (``None`` until then, and again from each ``start()``)
        self.session_version: Optional[str] = None
        #: seconds the DISCONNECT's write may take before the socket is closed instead
        #: (``None``: unbounded, as on stomp.py; the connection's ``wait_timeout`` sets it)
        self.disconnect_write_timeout: Optional[float] = None
        self._receipts: Dict[str, str] = {}
        self._disconnect_receipt: Optional[str] = None
        self._auto_decode = auto_decode
        self._encoding = encoding
        self._is_eol = is_eol_fc
        # The listeners sorted by name, rebuilt when one is set or removed
        self._sorted: List[Any] = []
        self._listeners_lock = threading.Lock()
        self._receiver_exit = threading.Condition()
        self._disconnected_lock = threading.Lock()
        # No receiver thread yet: stop() has nothing to wait for
        self._receiver_exited = True
        # Counts start()s: a receiver thread ending after a newer one started (a listener
        # that connects again from on_disconnected) must not mark that one's end
        self._receiver_generation = 0
        self._receiver_ident: Optional[int] = None
        self._connect_wait = threading.Condition()
        self._send_wait = threading.Condition()
        # Why the last connect failed on the receiver's side (a server that is not STOMP,
        # a CONNECTED the session refuses), kept so that wait_for_connection can raise it
        # as stomp.py's exception type.
        self._connect_failure: Optional[ConnectError] = None

    def override_threading(self, create_thread_fc: Callable[[Callable[[], Any]], Any]) -> None:
        """Create the receiver thread with ``create_thread_fc(callback)``, which must start it."""
        self.create_thread_fc = create_thread_fc

    def start(self) -> None:
        """Open the socket, start the receiver thread, then call ``on_connecting`` (in this thread).

        Raises:
            ConnectFailedException: no ``(host, port)`` could be reached.
        """
        self.running = True
        self.session_version = None
        with self._connect_wait:
            self._connect_failure = None
        self.attempt_connection()
        with self._receiver_exit:
            self._receiver_exited = False
            self._receiver_generation += 1
            generation = self._receiver_generation
        self.create_thread_fc(functools.partial(self._receiver_loop, generation))
        self.notify("connecting")

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Wait until the receiver thread has ended, its clean-up and ``on_disconnected`` included.

        On the receiver thread itself (a listener's call) it waits only while the
        connection is connected, as stomp.py's does. ``timeout`` (a stompfast addition;
        ``None``, stomp.py's, waits for ever) bounds the wait in seconds. Returns whether
        the wait ended before the time was up.
        """
        deadline = None if timeout is None else monotonic() + timeout
        # The receiver's end comes after the DISCONNECT's receipt marks the connection
        # ended: returning at that mark let a connect() that followed race the ending
        # receiver, which then closed the new socket and forgot its host (seen in CI)
        on_receiver = threading.get_ident() == self._receiver_ident
        with self._receiver_exit:
            while not self._receiver_exited and (not on_receiver or self.is_connected()):
                if deadline is None:
                    self._receiver_exit.wait()
                    continue
                left = deadline - monotonic()
                if left <= 0:
                    return False
                self._receiver_exit.wait(left)
        return True

    def is_connected(self) -> bool:
        """Whether CONNECTED arrived and the connection has not ended since."""
        return self.connected

    def set_connected(self, connected: bool) -> None:
        """Record the connected state and wake ``wait_for_connection``."""
        with self._connect_wait:
            self.connected = connected
            if connected:
                self.disconnecting = False
                self._connect_wait.notify()

    def set_receipt(self, receipt_id: str, value: Optional[str]) -> None:
        """Remember what command ``receipt_id`` belongs to (``None`` forgets it)."""
        if value:
            self._receipts[receipt_id] = value
        else:
            self._receipts.pop(receipt_id, None)

    def set_listener(self, name: str, listener: Any) -> None:
        """Add (or replace) the listener called ``name``.

        Raises:
            AssertionError: ``listener`` is ``None`` (as stomp.py's assert, but also under ``python -O``).
        """
        if listener is None:
            raise AssertionError("listener must not be None")
        with self._listeners_lock:
            self.listeners[name] = listener
            self._sorted = [item[1] for item in sorted(self.listeners.items(), key=_name)]

    def remove_listener(self, name: str) -> None:
        """Remove the listener called ``name`` (``KeyError`` if there is none, as in stomp.py)."""
        with self._listeners_lock:
            del self.listeners[name]
            self._sorted = [item[1] for item in sorted(self.listeners.items(), key=_name)]

    def get_listener(self, name: str) -> Any:
        """The listener called ``name``, or ``None``."""
        return self.listeners.get(name)

    def process_frame(self, f: utils.Frame, frame_str: Any) -> None:
        """Hand a received frame to the listeners (``on_before_message`` first for a MESSAGE)."""
        frame_type = f.cmd.lower() if f.cmd else ""
        if frame_type in _KNOWN_FRAMES:
            if frame_type == "message":
                self.notify("before_message", f)
            if log.isEnabledFor(log.DEBUG):
                log.debug("received frame: %r, headers=%r, body=%r", f.cmd, f.headers, f.body)
            self.notify(frame_type, f)
        else:
            log.warning("unknown response frame type: '%s' (frame length was %d)", frame_type, utils.length(frame_str))

    def notify(self, frame_type: str, frame: Optional[utils.Frame] = None) -> None:
        """Call ``on_<frame_type>`` of every listener that has it, sorted by name.

        A RECEIPT for DISCONNECT first marks the connection ended and closes the socket
        (so ``on_disconnected`` comes before that receipt's ``on_receipt``, as in stomp.py).
        """
        if frame_type == "receipt" and frame is not None:
            receipt = frame.headers["receipt-id"]
            value = self._receipts.get(receipt)
            with self._send_wait:
                self.set_receipt(receipt, None)
                self._send_wait.notify()
            if value == CMD_DISCONNECT:
                self.set_connected(False)
                if receipt == self._disconnect_receipt:
                    self.disconnect_socket()
                self._disconnect_receipt = None
        elif frame_type == "connected":
            self.set_connected(True)
        elif frame_type == "disconnected":
            self.notified_on_disconnect = True
            self.set_connected(False)
        elif frame_type == "error" and not self.connected:
            with self._connect_wait:
                self.connection_error = True
                self._connect_wait.notify()

        for each in self._sorted:
            callback = getattr(each, "on_" + frame_type, None)
            if callback is None:
                continue
            if frame_type in ("heartbeat", "disconnected"):
                callback()
            elif frame_type == "connecting":
                callback(self.current_host_and_port)
            else:
                callback(frame)

    def transmit(self, frame: utils.Frame) -> None:
        """Call every listener's ``on_send`` (sorted by name), then encode and send the frame.

        Raises:
            NotConnectedException: there is no socket.
            LocalProtocolError: the frame cannot be written in this STOMP version (a header
                value with a line end on 1.0, an unknown command...); nothing was sent.
            TypeError: a body that is neither ``str`` nor ``bytes``.
        """
        for each in self._sorted:
            try:
                each.on_send(frame)
            except AttributeError:
                # stomp.py skips a listener without on_send this way (and so hides an
                # AttributeError raised inside one): kept
                continue
        bound = None
        if frame.cmd == CMD_DISCONNECT:
            bound = self.disconnect_write_timeout
            if HDR_RECEIPT in frame.headers:
                self._disconnect_receipt = frame.headers[HDR_RECEIPT]
        data = self.encode(frame)
        if log.isEnabledFor(log.DEBUG):
            log.debug("sending frame: %s", utils.clean_lines(data))
        if bound is None:
            self.send(data)
        elif not self.send_within(data, bound):
            log.warning("the DISCONNECT could not be written within %s s: closing the socket", bound)
            self.disconnect_socket()

    def encode(self, frame: utils.Frame) -> bytes:
        """The wire bytes of ``frame`` in :attr:`version` (a ``cmd`` of ``None`` is a heart-beat, one LF).

        A ``str`` body is encoded as UTF-8. ``content-length`` is written when the frame
        has that header (its value is replaced by the encoded body's length, as stomp.py
        does) and left out when it has not (``auto_content_length=False``); ``None``
        values are left out and a tuple value becomes repeated headers.
        """
        cmd = frame.cmd
        if cmd is None:
            return b"\n"
        body = frame.body
        data = utils.encode(body) if body else b""
        headers = frame.headers
        given_length = HDR_CONTENT_LENGTH in headers
        fields: Any = headers
        if data and given_length:
            headers[HDR_CONTENT_LENGTH] = len(data)
            # the encoder writes content-length itself for a non-empty body
            fields = headers.copy()
            del fields[HDR_CONTENT_LENGTH]
        try:
            return self._encode_fields(cmd, fields, data, given_length)
        except TypeError:
            # None values, tuples (repeated headers) or other objects: stomp.py writes
            # "%s" of each value, and leaves out None
            pairs = []
            for key, value in fields.items():
                if value is None:
                    continue
                for one in value if type(value) is tuple else (value,):
                    pairs.append((key, one if type(one) is str else "%s" % (one,)))
            return self._encode_fields(cmd, pairs, data, given_length)

    def _encode_fields(self, cmd: str, fields: Any, data: bytes, given_length: bool) -> bytes:
        version = self.session_version or self.version
        if data and not given_length:
            # no content-length: the head encoded alone (encode_frame adds none to an empty
            # body), then the body and the NUL; the body must hold no NUL, as on stomp.py
            head = encode_frame(cmd, fields, b"", version)
            return b"".join((head[:-1], data, b"\x00"))
        return encode_frame(cmd, fields, data, version)

    def send(self, encoded_frame: bytes) -> None:
        """Write encoded bytes (implemented by :class:`Transport`)."""

    def send_within(self, encoded_frame: bytes, timeout: float) -> bool:
        """Write encoded bytes if that can start within ``timeout`` seconds (implemented by :class:`Transport`)."""
        self.send(encoded_frame)
        return True

    def receive(self) -> bytes:
        """Read a chunk (implemented by :class:`Transport`)."""
        return b""

    def cleanup(self) -> None:
        """Release the socket (implemented by :class:`Transport`)."""

    def attempt_connection(self) -> None:
        """Open the socket (implemented by :class:`Transport`)."""

    def disconnect_socket(self) -> None:
        """Close the socket (implemented by :class:`Transport`)."""

    def wait_for_connection(self, timeout: Optional[float] = None) -> None:
        """Block until CONNECTED, an ERROR, or the end of the receiver thread.

        ``timeout`` only paces the re-checks, as in stomp.py: the wait itself is unbounded.

        Raises:
            ConnectFailedException: the connection ended, or is not connected when the wait ends.
                When the server's answer showed why (it is not STOMP, or its CONNECTED
                is refused), the exception says so in the client's words, and its
                ``__cause__`` is the client's error (:class:`~stompfast.NotStompError`...).
        """
        pace = timeout / 10.0 if timeout is not None else None
        with self._connect_wait:
            while self.running and not self.is_connected() and not self.connection_error:
                self._connect_wait.wait(pace)
            failure = self._connect_failure
        if failure is not None:
            raise exception.ConnectFailedException(str(failure)) from failure
        if not self.running or not self.is_connected():
            raise exception.ConnectFailedException()

    def _fail_connect(self, failure: ConnectError) -> None:
        # The receiver found that this connection cannot become a session: it logs why,
        # keeps it for wait_for_connection and stops the loop, whose end wakes that wait.
        log.error("closing the connection: %s", failure)
        with self._connect_wait:
            self._connect_failure = failure
        self.running = False

    def _claim_disconnected(self) -> bool:
        # on_disconnected once per connection, also when disconnect_socket() runs in another
        # thread (a bounded disconnect, a heart-beat timeout) while the receiver loop ends
        with self._disconnected_lock:
            if self.notified_on_disconnect:
                return False
            self.notified_on_disconnect = True
            return True

    def _new_scanner(self) -> FrameScanner:
        return FrameScanner(version=self.version)

    def _refuse_connected(self, frame: utils.Frame) -> Optional[ConnectError]:
        # The client refuses a CONNECTED whose heart-beat header is not two integers, and
        # so does this layer, before any listener sees the frame. A 1.0 connection offers
        # no heart-beats and reads none (stomp.py's Protocol10 ignores the header).
        header = frame.headers.get(HDR_HEARTBEAT)
        if header is None or self.version == "1.0":
            return None
        try:
            listener.agreed_heartbeats((0, 0), header)
        except ProtocolError as exc:
            host, port = self.current_host_and_port or ("?", 0)
            failure = ConnectError(f"{host}:{port} answered CONNECT with a CONNECTED the session refuses: {exc}")
            failure.__cause__ = exc
            return failure
        return None

    def _receiver_loop(self, generation: int) -> None:
        """The receiver thread: read, scan and hand out frames until the connection ends.

        ``generation`` is the :meth:`start` that began it.
        """
        self._receiver_ident = threading.get_ident()
        log.debug("starting receiver loop (%s)", threading.current_thread())
        scanner = self._new_scanner()
        host, port = self.current_host_and_port or ("?", 0)
        # Until the first frame, the bytes received are judged as the client judges them
        # (stompfast._link.wrong_answer), so that a wrong port fails the connect with the
        # client's error. It is None once a frame came, so each later read costs one test.
        head: Optional[bytes] = b""
        decode = self._auto_decode
        process = self.process_frame
        # The MESSAGE path below inlines process_frame's and notify's; a subclass (or an
        # instance) that replaces either gets every frame through its own, as on stomp.py
        inline = (getattr(process, "__func__", None) is BaseTransport.process_frame
                  and getattr(self.notify, "__func__", None) is BaseTransport.notify)
        try:
            while self.running:
                try:
                    data = self.receive()
                except exception.InterruptedException:
                    continue
                except Exception:
                    log.debug("socket read error", exc_info=log.verbose)
                    data = b""
                if not data:
                    break
                if head is not None:
                    head += data[: _HEAD - len(head)]
                    wrong = wrong_answer(host, port, head, data, scanner.buffered, _TLS_PORT_HINT)
                    if wrong is not None:
                        self._fail_connect(wrong)
                        break
                try:
                    frames = scanner.feed(data)
                except ProtocolError as exc:
                    if head is not None:
                        # No frame came yet, and a STOMP server does not answer CONNECT
                        # with a framing fault: this is another service.
                        failure = not_stomp(host, port, head)
                        failure.__cause__ = exc
                        self._fail_connect(failure)
                        break
                    log.error("closing the connection: the broker broke the framing rules: %s", exc)
                    break
                if not frames:
                    if not scanner.buffered and not data.strip(_EOL_BYTES):
                        self.notify("heartbeat", utils.HEARTBEAT_FRAME)
                    continue
                head = None
                for raw in frames:
                    body: Any = raw.body
                    if decode:
                        body = body.decode("utf-8", "replace")
                    command = raw.command
                    f = utils.Frame(command, dict(raw.headers), body)
                    if command == "MESSAGE" and inline:
                        # process_frame's MESSAGE path, inlined: the per-message cost is the point
                        listeners = self._sorted
                        for each in listeners:
                            callback = getattr(each, "on_before_message", None)
                            if callback is not None:
                                callback(f)
                        if log.isEnabledFor(log.DEBUG):
                            log.debug("received frame: %r, headers=%r, body=%r", f.cmd, f.headers, f.body)
                        for each in self._sorted:
                            callback = getattr(each, "on_message", None)
                            if callback is not None:
                                callback(f)
                    else:
                        if command == "CONNECTED":
                            refused = self._refuse_connected(f)
                            if refused is not None:
                                self._fail_connect(refused)
                                break
                            # the session's version decides the escapes from here on, both
                            # ways (1.0: none), also when the broker chose a lower one
                            self.session_version = scanner.version = f.headers.get("version", "1.0")
                        process(f, raw.body)
                    if not self.running:
                        break
        finally:
            self.running = False
            self.cleanup()
            log.debug("receiver loop ended")
            self.notify("receiver_loop_completed")
            if self._claim_disconnected():
                self.notify("disconnected")
            with self._connect_wait:
                self._connect_wait.notify_all()
            # Last, so stop() returns once nothing of this connection is left running; and
            # only while no newer start() (on_disconnected connecting again) took over
            with self._receiver_exit:
                if self._receiver_generation == generation:
                    self.notified_on_disconnect = False
                    self._receiver_exited = True
                    self._receiver_ident = None
                    self._receiver_exit.notify_all()


def _name(item: Tuple[str, Any]) -> str:
    return item[0]


class Transport(BaseTransport):
    """The TCP/TLS transport: stomp.py's constructor arguments, socket and reconnect rounds.

    ``timeout`` bounds each socket connect (stomp.py also leaves it on the socket, so an
    idle connection ends after ``timeout`` seconds there; here the socket blocks once
    connected: see docs/migrating.md). ``reconnect_attempts_max`` (-1: forever) bounds the
    rounds over the broker list in ``connect()``; a lost connection is not reconnected.
    """

    def __init__(
        self,
        host_and_ports: Optional[List[HostAndPort]] = None,
        prefer_localhost: bool = True,
        try_loopback_connect: bool = True,
        reconnect_sleep_initial: float = 0.1,
        reconnect_sleep_increase: float = 0.5,
        reconnect_sleep_jitter: float = 0.1,
        reconnect_sleep_max: float = 60.0,
        reconnect_attempts_max: int = 3,
        timeout: Optional[float] = None,
        keepalive: Any = None,
        vhost: Optional[str] = None,
        auto_decode: bool = True,
        encoding: str = "utf-8",
        recv_bytes: int = 1024,
        is_eol_fc: Callable[[bytes], bool] = utils.is_eol_default,
        bind_host_port: Optional[HostAndPort] = None,
    ) -> None:
        BaseTransport.__init__(self, auto_decode, encoding, is_eol_fc)
        if host_and_ports is None:
            host_and_ports = [("localhost", 61613)]
        ordered = list(host_and_ports)
        if prefer_localhost:
            ordered.sort(key=utils.is_localhost)
        loopback = []
        if try_loopback_connect:
            for host, port in ordered:
                if utils.is_localhost((host, port)) == 1 and not (
                    ("127.0.0.1", port) in ordered or ("localhost", port) in ordered
                ):
                    loopback.append(("127.0.0.1", port))
        self.host_and_ports: List[HostAndPort] = loopback + ordered
        self.bind_host_port = bind_host_port
        self.reconnect_sleep_initial = reconnect_sleep_initial
        self.reconnect_sleep_increase = reconnect_sleep_increase
        self.reconnect_sleep_jitter = reconnect_sleep_jitter
        self.reconnect_sleep_max = reconnect_sleep_max
        self.reconnect_attempts_max = reconnect_attempts_max
        self.timeout = timeout
        self.keepalive = keepalive
        self.vhost = vhost
        # stomp.py reads 1 KiB at a time; one read here takes all that is there, up to 64 KiB
        self.recv_bytes = max(recv_bytes, 65536)
        self.socket: Optional[socket.socket] = None
        self._socket_lock = threading.Lock()
        # Set while the socket is TLS: every call into the TLS connection is made under it
        # (see _receive_tls)
        self._tls_lock: Optional[threading.Lock] = None
        self._ssl_params: Dict[HostAndPort, Dict[str, Any]] = {}

    def is_connected(self) -> bool:
        """Whether there is a socket and CONNECTED arrived on it (and it has not ended since)."""
        return self.connected and self.socket is not None

    def disconnect_socket(self) -> None:
        """Stop the receiver, shut down and close the socket, and call ``on_disconnected`` once."""
        # claimed before the socket closes, so the ending receiver loop does not call it too
        claimed = self._claim_disconnected()
        self.running = False
        sock = self.socket
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError as exc:
                if utils.get_errno(exc) != errno.ENOTCONN:
                    log.warning("unable to issue SHUT_RDWR on socket because of error '%s'", exc)
            try:
                sock.close()
            except OSError as exc:
                log.warning("unable to close socket because of error '%s'", exc)
        self.current_host_and_port = None
        self.socket = None
        if claimed:
            self.notify("disconnected")

    def send(self, encoded_frame: bytes) -> None:
        """Write ``encoded_frame`` whole (``sendall``), one writer at a time.

        Raises:
            NotConnectedException: there is no socket.
            OSError: the write failed (logged, then raised as stomp.py does).
        """
        sock = self.socket
        if sock is None:
            raise exception.NotConnectedException()
        try:
            with self._socket_lock:
                if self._tls_lock is None:
                    sock.sendall(encoded_frame)
                else:
                    self._send_tls(sock, encoded_frame, None)
        except Exception:
            log.error("error sending frame", exc_info=True)
            raise

    def send_within(self, encoded_frame: bytes, timeout: float) -> bool:
        """Write a small frame whole, unless the write cannot start within ``timeout`` seconds.

        It cannot start while another thread's write holds the socket, or while the
        socket's send buffer is full (a broker that stopped reading). A frame that fits
        the free buffer (a DISCONNECT does) is then written without blocking.

        Returns:
            Whether the frame was written; ``False`` leaves the socket as it was.

        Raises:
            NotConnectedException: there is no socket.
        """
        sock = self.socket
        if sock is None:
            raise exception.NotConnectedException()
        deadline = monotonic() + timeout
        if not self._socket_lock.acquire(timeout=max(0.0, timeout)):
            return False
        try:
            if self._tls_lock is not None:
                return self._send_tls(sock, encoded_frame, deadline)
            if not select.select([], [sock], [], max(0.0, deadline - monotonic()))[1]:
                return False
            sock.sendall(encoded_frame)
        except Exception:
            log.error("error sending frame", exc_info=True)
            raise
        finally:
            self._socket_lock.release()
        return True

    def receive(self) -> bytes:
        """Read up to ``recv_bytes``; ``b""`` when the socket is gone or closed."""
        sock = self.socket
        if sock is None:
            return b""
        try:
            if self._tls_lock is not None:
                return self._receive_tls(sock)
            return sock.recv(self.recv_bytes)
        except OSError as exc:
            if utils.get_errno(exc) in (errno.EAGAIN, errno.EINTR):
                raise exception.InterruptedException() from exc
            if self.is_connected():
                raise
            return b""

    def _receive_tls(self, sock: Any) -> bytes:
        # An OpenSSL connection is not safe for a read and a write at once: a TLS 1.3
        # session ticket that the receiver takes in while another thread writes CONNECT
        # can hang both (stomp.py 8 hangs there now and then). So on TLS every call into
        # the connection is made under _tls_lock on a non-blocking socket, and the
        # waiting is done outside the lock, by select, so a reader never holds up a writer
        lock = self._tls_lock
        assert lock is not None
        while True:
            if not sock.pending():
                select.select([sock], [], [])
            with lock:
                try:
                    data: bytes = sock.recv(self.recv_bytes)
                    return data
                except ssl.SSLWantReadError:
                    continue
                except ssl.SSLWantWriteError:
                    pass
            select.select([], [sock], [])

    def _send_tls(self, sock: Any, data: bytes, deadline: Optional[float]) -> bool:
        # the writing half of _receive_tls's rule; a write OpenSSL could not finish is
        # retried with the same bytes, as it requires. False: the deadline passed first
        lock = self._tls_lock
        assert lock is not None
        view = memoryview(data)
        while view:
            with lock:
                try:
                    view = view[sock.send(view):]
                    continue
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
            if deadline is None:
                select.select([], [sock], [])
            else:
                left = deadline - monotonic()
                if left <= 0 or not select.select([], [sock], [], left)[1]:
                    return False
        return True

    def cleanup(self) -> None:
        """Close the socket and forget it."""
        sock = self.socket
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        self.socket = None

    def _enable_keepalive(self, sock: socket.socket) -> None:
        ka = self.keepalive
        if not ka:
            return
        args: Tuple[Any, ...]
        if ka is True:
            kind, args = "auto", ()
        else:
            kind, args = ka[0], tuple(ka[1:])
        if kind == "auto":
            if not LINUX_KEEPALIVE_AVAIL:
                log.error("keepalive: unable to detect any implementation, DISABLED!")
                return
            kind, args = "linux", (None, None, None)
        if kind != "linux" or not LINUX_KEEPALIVE_AVAIL:
            log.error("keepalive: implementation %r not recognized or not supported", kind)
            return
        sock.setsockopt(SOL_SOCKET, SO_KEEPALIVE, 1)
        for option, value in zip((TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT), args):
            if value is not None:
                sock.setsockopt(SOL_TCP, option, value)

    def attempt_connection(self) -> None:
        """Connect to the first ``(host, port)`` that answers, for up to ``reconnect_attempts_max`` rounds.

        Between rounds it sleeps ``reconnect_sleep_initial``, growing by
        ``reconnect_sleep_increase`` up to ``reconnect_sleep_max``, plus jitter.

        Raises:
            ConnectFailedException: no host answered in time.
        """
        self.connection_error = False
        self.notified_on_disconnect = False
        sleep_exp = 1
        count = 0
        while self.running and self.socket is None and (
            count < self.reconnect_attempts_max or self.reconnect_attempts_max == -1
        ):
            for host_and_port in self.host_and_ports:
                sock: Optional[socket.socket] = None
                try:
                    sock = socket.create_connection(host_and_port, self.timeout, self.bind_host_port)
                    self._enable_keepalive(sock)
                    params = self.get_ssl(host_and_port)
                    if params is not None:
                        sock = self._wrap_tls(sock, host_and_port, params)
                    # the timeout bounds the connect only (see the class docstring)
                    sock.settimeout(None)
                    if params is not None:
                        # the TLS connection is driven non-blocking under a lock (_receive_tls)
                        sock.setblocking(False)
                        self._tls_lock = threading.Lock()
                    else:
                        self._tls_lock = None
                        if self.blocking is not None:
                            sock.setblocking(self.blocking)
                    self.socket = sock
                    self.current_host_and_port = host_and_port
                    log.info("established connection to host %s, port %s", *host_and_port)
                    break
                except (OSError, AssertionError):
                    # a step after the TCP connect failed (keepalive, the TLS handshake, the
                    # certificate validator): that socket is closed here, not left to the GC
                    if sock is not None:
                        sock.close()
                    self.socket = None
                    count += 1
                    log.warning("could not connect to host %s, port %s", *host_and_port, exc_info=log.verbose)
            if self.socket is None:
                # The client's backoff with stomp.py's parameters: the initial pause grows by
                # (1 + increase) per round up to the cap, then 0 to jitter of it is added.
                pause = backoff_delay(
                    sleep_exp, self.reconnect_sleep_initial, 1.0 + self.reconnect_sleep_increase,
                    self.reconnect_sleep_max, self.reconnect_sleep_jitter, upward_only=True,
                )
                end = monotonic() + pause
                while self.running and monotonic() < end:
                    time.sleep(min(0.2, max(0.0, end - monotonic())))
                if pause < self.reconnect_sleep_max:
                    sleep_exp += 1
        if self.socket is None:
            raise exception.ConnectFailedException()

    def _wrap_tls(self, sock: socket.socket, host_and_port: HostAndPort, params: Dict[str, Any]) -> socket.socket:
        # The client's context, as stomp.py's set_ssl asks for it: verified against
        # ca_certs when given, not verified at all without (stomp.py's default). stomp.py 8
        # stores ssl_version but ignores it (TLS 1.2+ negotiated), so it is ignored here too.
        context = client_ssl_context(
            cafile=params["ca_certs"], certfile=params["cert_file"], keyfile=params["key_file"],
            password=params.get("password"), verify=bool(params["ca_certs"]),
        )
        tls = context.wrap_socket(sock, server_hostname=host_and_port[0])
        validator = params["cert_validator"]
        if validator is not None:
            ok, message = validator(tls.getpeercert(), host_and_port[0])
            if not ok:
                # the TLS socket owns the descriptor now: closing the plain one would not free it
                tls.close()
                raise ssl.SSLError("Server certificate validation failed: %s" % message)
        return tls

    def set_ssl(
        self,
        for_hosts: Any = (),
        key_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        ca_certs: Optional[str] = None,
        cert_validator: Any = None,
        ssl_version: Any = DEFAULT_SSL_VERSION,
        password: Optional[str] = None,
    ) -> None:
        """Use TLS for the listed ``(host, port)`` pairs.

        Without ``ca_certs`` the broker's certificate is not verified (stomp.py's default);
        with it, it is verified against that CA file and the host name. ``ssl_version`` is
        stored (``get_ssl`` returns it) and otherwise ignored, as in stomp.py 8: the context
        is always ``ssl.PROTOCOL_TLS_CLIENT``, which negotiates the highest version both support.
        """
        for host_port in for_hosts:
            self._ssl_params[host_port] = dict(key_file=key_file, cert_file=cert_file, ca_certs=ca_certs,
                                               cert_validator=cert_validator, ssl_version=ssl_version,
                                               password=password)

    def get_ssl(self, host_and_port: Optional[HostAndPort] = None) -> Optional[Dict[str, Any]]:
        """The TLS settings for ``host_and_port`` (default: the current one), or ``None``."""
        return self._ssl_params.get(host_and_port or self.current_host_and_port)  # type: ignore[arg-type]


