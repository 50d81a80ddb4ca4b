"""A scripted, misbehaving STOMP server on loopback, for the hostile-server tests.

Each accepted connection runs ``handler(conn)`` in a thread of its own with a
blocking socket, so the same server serves async clients on any anyio backend
and the blocking client alike. The handler decides everything: what to answer,
when to stop reading, how to end (``conn.reset()`` for an RST, returning for a
plain close).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import tracemalloc
from typing import Any, Callable, Iterator, List, Optional

import stompfast
from stompfast import FrameScanner, encode_frame
from stompfast.frames import Frame


class Conn:
    """One accepted connection: read frames, write frames or raw bytes."""

    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.number = number  # 1 for the first connection the server accepted
        self.scanner = FrameScanner(version="1.2")
        self.frames: List[Frame] = []

    def read_frame(self, timeout: float = 5.0) -> Optional[Frame]:
        """The next frame from the client (None at EOF)."""
        self.sock.settimeout(timeout)
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.frames.extend(self.scanner.feed(data))
        return self.frames.pop(0)

    def expect(self, command: str) -> Frame:
        frame = self.read_frame()
        assert frame is not None and frame.command == command, (command, frame)
        return frame

    def connected(self, heart_beat: str = "0,0", **headers: str) -> Frame:
        """Read CONNECT, answer CONNECTED (STOMP 1.2)."""
        connect = self.read_frame()
        assert connect is not None and connect.command in ("CONNECT", "STOMP"), connect
        self.send("CONNECTED", {"version": "1.2", "heart-beat": heart_beat, "server": "hostile/1", **headers})
        return connect

    def send(self, command: str, headers: Any = (), body: bytes = b"") -> None:
        self.sock.sendall(encode_frame(command, headers, body))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reset(self) -> None:
        """End with an RST (SO_LINGER 0), as a crashed peer or a middlebox does."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


class HostileServer:
    """``with HostileServer(handler) as server:`` listens on 127.0.0.1 until the block ends."""

    def __init__(self, handler: Callable[[Conn], Any]) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"stomp://127.0.0.1:{self.port}/"
        self.connections = 0
        self.errors: List[BaseException] = []
        self._socks: List[socket.socket] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)

    def __enter__(self) -> "HostileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for sock in self._socks:
                try:
                    sock.close()
                except OSError:
                    pass
        self._thread.join(5)

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            with self._lock:
                self.connections += 1
                number = self.connections
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(Conn(sock, number),), daemon=True).start()

    def _serve(self, conn: Conn) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass  # the client went away: what hostile handlers expect sooner or later
        except BaseException as exc:  # an assertion in a handler: the test reports it
            self.errors.append(exc)
        finally:
            try:
                conn.sock.close()
            except OSError:
                pass


def answering(data: bytes, keep_open: bool) -> Callable[[Conn], None]:
    """A server that reads the CONNECT, answers ``data``, then closes or reads until the client leaves."""

    def handler(conn: Conn) -> None:
        conn.sock.settimeout(5)
        conn.sock.recv(65536)
        conn.send_raw(data)
        if keep_open:
            conn.sock.settimeout(30)
            while conn.sock.recv(65536):
                pass

    return handler


def endless_frame(conn: Conn) -> None:
    """CONNECTED, then a MESSAGE whose body never ends, until the client hangs up."""
    conn.connected()
    conn.send_raw(b"MESSAGE\nsubscription:1\nmessage-id:1\ndestination:/queue/x\n\n")
    chunk = b"x" * 65536
    while True:
        conn.send_raw(chunk)


# -- the hostile-server table: one misbehaviour per case ---------------------------------------
#
# Each case is a server script and what the client must end in. "connect": the fault
# comes in answer to CONNECT, so connect() raises. "receive": the server answers
# CONNECTED, reads the SUBSCRIBE, then misbehaves; the waiting receive() raises.
# "survive": the junk is harmless; the client must go on working (a RECEIPT after it
# comes through). Limits in CASE_OPTIONS are small so that memory is measured against
# them; deadlines are generous multiples of the timeouts involved.

#: Client options of the table (small limits and timeouts: the deadlines follow from them).
CASE_OPTIONS = {
    "heart_beat": (0, 0),
    "connect_timeout": 1.0,
    "max_frame_bytes": 1024 * 1024,
    "max_header_bytes": 64 * 1024,
    "max_headers": 1000,
    "reconnect": False,
    "disconnect_timeout": 1.0,
}


class Case:
    def __init__(
        self, name: str, action: str, handler: Callable[[Conn], Any], error: Any, message: str = "",
        deadline: float = 3.0, options: Any = None,
    ) -> None:
        self.name = name
        self.action = action  # "connect", "receive" or "survive"
        self.handler = handler
        self.error = error  # the exception class the client must raise (None for "survive")
        self.message = message  # a piece of its message
        self.deadline = deadline  # seconds from the call to the error, at most
        self.options = dict(CASE_OPTIONS, **(options or {}))

    def __repr__(self) -> str:
        return f"Case({self.name!r})"


def _subscribed(conn: Conn) -> Frame:
    conn.connected()
    sub = conn.expect("SUBSCRIBE")
    if "receipt" in sub.headers:
        conn.send("RECEIPT", {"receipt-id": sub.headers["receipt"]})
    return sub


def _drain(conn: Conn) -> None:
    """Read (and drop) what the client sends until it hangs up."""
    conn.sock.settimeout(30)
    while conn.sock.recv(65536):
        pass


def _then(junk: Callable[[Conn, Frame], Any]) -> Callable[[Conn], None]:
    def handler(conn: Conn) -> None:
        sub = _subscribed(conn)
        junk(conn, sub)
        _drain(conn)

    return handler


def _message(sub: Frame, body: bytes = b"m", **headers: str) -> bytes:
    return encode_frame(
        "MESSAGE", {"subscription": sub.headers["id"], "message-id": "m1", "destination": "/queue/x", **headers}, body
    )


def _endless_header_line(conn: Conn, sub: Frame) -> None:
    conn.send_raw(b"MESSAGE\nsubscription:" + sub.headers["id"].encode() + b"\nx-long:")
    chunk = b"y" * 65536
    while True:
        conn.send_raw(chunk)


# built at import, so that the memory traced over a run is the client's, not this server's
_HEADER_LINES = b"".join(b"h%d:v\n" % i for i in range(100_000))


def _many_headers(conn: Conn, sub: Frame) -> None:
    conn.send_raw(b"MESSAGE\nsubscription:%s\nmessage-id:m1\ndestination:/queue/x\n" % sub.headers["id"].encode())
    conn.send_raw(_HEADER_LINES)
    conn.send_raw(b"\nbody\x00")


def _endless_body(conn: Conn, sub: Frame) -> None:
    conn.send_raw(b"MESSAGE\nsubscription:%s\nmessage-id:m1\ndestination:/queue/x\n\n" % sub.headers["id"].encode())
    chunk = b"x" * 65536
    while True:
        conn.send_raw(chunk)


def _short_content_length(conn: Conn, sub: Frame) -> None:
    # content-length says 5, the body goes on: the byte after the 5 is not the NUL
    conn.send_raw(b"MESSAGE\nsubscription:%s\nmessage-id:m1\ndestination:/queue/x\ncontent-length:5\n\n"
                  % sub.headers["id"].encode() + b"0123456789\x00")


def _huge_content_length(conn: Conn, sub: Frame) -> None:
    conn.send_raw(b"MESSAGE\nsubscription:%s\nmessage-id:m1\ndestination:/queue/x\ncontent-length:%d\n\n"
                  % (sub.headers["id"].encode(), 10**15))
    chunk = b"x" * 65536
    while True:
        conn.send_raw(chunk)


def _error_storm(conn: Conn) -> None:
    conn.read_frame()
    for i in range(10_000):
        conn.send("ERROR", {"message": f"storm {i}"}, b"go away")


def _close_mid_frame(conn: Conn) -> None:
    sub = _subscribed(conn)
    conn.send_raw(_message(sub)[:20])


def _reset_mid_frame(conn: Conn) -> None:
    sub = _subscribed(conn)
    conn.send_raw(_message(sub)[:20])
    conn.reset()


def _silent_after_connect(conn: Conn) -> None:
    conn.read_frame()
    _drain(conn)


def _silent_after_connected(conn: Conn) -> None:
    conn.connected(heart_beat="100,100")
    _drain(conn)


def _answer_receipts_after(
    junk: Callable[[Conn, Frame], Any], heart_beat: str = "0,0"
) -> Callable[[Conn], None]:
    """Send the junk, then answer every frame carrying a receipt (the client must still work)."""
    def handler(conn: Conn) -> None:
        conn.connected(heart_beat)
        sub = conn.expect("SUBSCRIBE")
        if "receipt" in sub.headers:
            conn.send("RECEIPT", {"receipt-id": sub.headers["receipt"]})
        junk(conn, sub)
        while True:
            frame = conn.read_frame(30)
            if frame is None:
                return
            if "receipt" in frame.headers:
                conn.send("RECEIPT", {"receipt-id": frame.headers["receipt"]})
                if frame.command == "DISCONNECT":
                    return

    return handler


def _connected_with(**headers: str) -> Callable[[Conn], None]:
    def handler(conn: Conn) -> None:
        connect = conn.read_frame()
        assert connect is not None
        conn.send("CONNECTED", {"server": "hostile/1", **headers})
        _drain(conn)

    return handler


def _two_errors(conn: Conn) -> None:
    """RabbitMQ 4.x's shape: ``Processing error`` first, the reason in a second ERROR, then close."""
    # (no Nagle: the first ERROR must reach the client before the second is sent)
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.send("ERROR", {"message": "Processing error"}, b"Processing error")
    time.sleep(0.02)
    conn.send("ERROR", {"message": "Feature transient_nonexcl_queues is deprecated"}, b"see the deprecated features")


def _two_errors_answering_connect(conn: Conn) -> None:
    conn.read_frame()
    _two_errors(conn)


def _two_errors_then_open(conn: Conn, sub: Frame) -> None:
    """Two ERRORs, then the connection stays open: the client reads on only briefly."""
    conn.send("ERROR", {"message": "first"})
    conn.send("ERROR", {"message": "second reason"})


def _error_then_frames(conn: Conn, sub: Frame) -> None:
    conn.send_raw(_message(sub, b"before") + encode_frame("ERROR", {"message": "bad thing"}, b"detail")
                  + _message(sub, b"after", **{"message-id": "m2"}))


CASES = [
    Case("endless header line", "receive", _then(_endless_header_line), "LimitExceededError", "header"),
    Case("100,000 headers", "receive", _then(_many_headers), "LimitExceededError", "header"),
    Case("a frame that never ends", "receive", _then(_endless_body), "LimitExceededError", "frame"),
    Case("content-length shorter than the body", "receive", _then(_short_content_length),
         "RemoteProtocolError", "content-length"),
    Case("huge content-length", "receive", _then(_huge_content_length), "LimitExceededError", ""),
    Case("invalid UTF-8 in a header", "receive",
         _then(lambda c, s: c.send_raw(b"MESSAGE\nsubscription:%s\nmessage-id:\xff\xfe\ndestination:/queue/x\n\nb\x00"
                                       % s.headers["id"].encode())),
         "RemoteProtocolError", "UTF-8"),
    Case("unknown command", "receive", _then(lambda c, s: c.send_raw(b"BOGUS\nx:y\n\n\x00")),
         "RemoteProtocolError", "BOGUS"),
    Case("MESSAGE for an unknown subscription", "survive",
         _answer_receipts_after(lambda c, s: c.send("MESSAGE", {"subscription": "nope", "message-id": "m9",
                                                                "destination": "/queue/x"}, b"stray")), None),
    Case("RECEIPT never asked for", "survive",
         _answer_receipts_after(lambda c, s: c.send("RECEIPT", {"receipt-id": "never-asked"})), None),
    Case("nonsense heart-beat", "connect", _connected_with(version="1.2", **{"heart-beat": "fast,-1"}),
         "RemoteProtocolError", "heart-beat"),
    # clamped to an hour (MAX_HEART_BEAT_MS), not refused: the session is usable
    Case("huge heart-beat", "survive", _answer_receipts_after(lambda c, s: None, heart_beat="9" * 40 + ",1"),
         None, options={"heart_beat": (100, 100)}),
    Case("a version not offered", "connect", _connected_with(version="3.0"), "RemoteProtocolError",
         "did not offer"),
    Case("ERROR storm answering CONNECT", "connect", _error_storm, "AuthenticationError", "storm 0"),
    Case("close in the middle of a frame", "receive", _close_mid_frame, "ConnectionLostError", "middle of a frame"),
    Case("reset in the middle of a frame", "receive", _reset_mid_frame, "ConnectionLostError", ""),
    Case("silence after CONNECT", "connect", _silent_after_connect, "ConnectTimeout", "",
         deadline=CASE_OPTIONS["connect_timeout"] + 2),
    Case("silence after CONNECTED", "receive", _silent_after_connected, "HeartbeatTimeout", "",
         deadline=3.0, options={"heart_beat": (100, 100)}),
    Case("ERROR followed by frames in one read", "receive", _then(_error_then_frames), "ServerError", "bad thing"),
    Case("two ERRORs answering CONNECT, the reason second", "connect", _two_errors_answering_connect,
         "AuthenticationError", "Processing error; then ERROR: Feature transient_nonexcl_queues"),
    Case("two ERRORs, the reason second, then close", "receive",
         lambda c: (_subscribed(c), _two_errors(c)), "ServerError", "then ERROR: Feature transient_nonexcl_queues"),
    Case("two ERRORs, then the connection left open", "receive", _then(_two_errors_then_open), "ServerError",
         "first; then ERROR: second reason"),
]


class Outcome:
    """How one client run against one case ended."""

    def __init__(self) -> None:
        self.phase = "connect"  # where the error came: connect, subscribe, receive or (none) done
        self.error: Optional[BaseException] = None
        self.elapsed = 0.0  # seconds from the first call to the error (or the end)
        self.peak = 0  # bytes: tracemalloc's peak over the run
        self.messages = 0  # messages received before the error

    def check(self, case: "Case") -> None:
        """Raise AssertionError unless the outcome is the one ``case`` documents."""
        where = f"{case.name}: {self.phase}, {self.error!r} after {self.elapsed:.2f} s"
        if case.error is None:
            assert self.error is None and self.phase == "done", where
        else:
            expected = getattr(stompfast, case.error)
            assert isinstance(self.error, expected), where
            assert case.message in str(self.error), where
            assert (self.phase == "connect") == (case.action == "connect"), where
        assert self.elapsed <= case.deadline, where
        # Memory: a fraction of one frame limit (the scanner's buffer grows up to about twice it).
        assert self.peak < 3 * case.options["max_frame_bytes"] + 4 * 1024 * 1024, f"{where}: peak {self.peak}"


@contextlib.contextmanager
def _measuring(out: Outcome) -> Iterator[Outcome]:
    """Time ``out``'s run and trace its memory; a StompError ends it as ``out.error``."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        yield out
        out.phase = "done"
    except stompfast.StompError as exc:
        out.error = exc
    finally:
        out.elapsed = time.monotonic() - started
        out.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


async def run_async(case: "Case", url: str) -> Outcome:
    """``case`` against an AsyncClient on the running backend."""
    import anyio

    with _measuring(Outcome()) as out:
        with anyio.fail_after(case.deadline + 5):  # a hang fails the test, not the run
            async with stompfast.AsyncClient(url, **case.options) as client:
                out.phase = "subscribe"
                async with client.subscribe("/queue/x") as sub:
                    if case.action == "survive":
                        out.phase = "send"
                        await client.send("/queue/x", b"after the junk", receipt=True)
                    else:
                        out.phase = "receive"
                        for _ in range(10):
                            await sub.receive()
                            out.messages += 1
    return out


def run_blocking(case: "Case", url: str, backend: str = "asyncio", backend_options: Any = None) -> Outcome:
    """``case`` against the blocking Client on a portal of ``backend``."""
    with _measuring(Outcome()) as out:
        with stompfast.Client(url, backend=backend, backend_options=backend_options, **case.options) as client:
            out.phase = "subscribe"
            with client.subscribe("/queue/x") as sub:
                if case.action == "survive":
                    out.phase = "send"
                    client.send("/queue/x", b"after the junk", receipt=True, timeout=case.deadline + 5)
                else:
                    out.phase = "receive"
                    for _ in range(10):
                        sub.receive(timeout=case.deadline + 5)
                        out.messages += 1
    return out


# -- random server byte streams (the client-level fuzz: tests/test_hostile_suite.py, fuzz/fuzz_client.py) --

#: Pieces a random stream is made of; ``{sub}`` becomes the subscription id of the SUBSCRIBE.
FRAGMENTS = [
    b"MESSAGE\nsubscription:{sub}\nmessage-id:m1\ndestination:/queue/x\n\nhello\x00",
    b"MESSAGE\nsubscription:{sub}\nmessage-id:m2\ndestination:/queue/x\ncontent-length:3\n\na\x00b\x00",
    b"MESSAGE\nsubscription:{sub}\nmessage-id:m3\nack:a3\n\n\x00",
    b"MESSAGE\nsubscription:nope\nmessage-id:m4\n\nstray\x00",
    b"RECEIPT\nreceipt-id:never-asked\n\n\x00",
    b"ERROR\nmessage:random error\n\nbody\x00",
    b"CONNECTED\nversion:1.2\n\n\x00",
    b"MESSAGE\nsubscription:{sub}\nh:\\x\n\n\x00",
    b"MESSAGE\ncontent-length:99999999999999\n\n",
    b"\n", b"\r\n", b"\x00", b":", b"\\", b"\xff\xfe",
    b"MESSAGE\nsubscription:{sub}\n", b"content-length:", b"\n\n",
]


def stream_handler(data: bytes, chunks: int = 3) -> Callable[[Conn], None]:
    """CONNECTED, the SUBSCRIBE confirmed, then ``data`` in ``chunks`` writes, then a plain close."""

    def handler(conn: Conn) -> None:
        sub = _subscribed(conn)
        payload = data.replace(b"{sub}", sub.headers["id"].encode())
        step = max(1, len(payload) // max(1, chunks))
        for i in range(0, len(payload), step):
            conn.send_raw(payload[i:i + step])

    return handler


#: A client that has met a random stream must end (the server closes) in one of these.
FUZZ_CASE = Case("random stream", "receive", lambda conn: None, "StompError", deadline=5.0)


async def run_stream(data: bytes, chunks: int = 3) -> Outcome:
    """``data`` from a server to an AsyncClient on the running backend; the outcome, checked loosely."""
    with HostileServer(stream_handler(data, chunks)) as server:
        outcome = await run_async(FUZZ_CASE, server.url)
        assert not server.errors, server.errors
    return outcome


def check_stream_outcome(outcome: Outcome, data: bytes) -> None:
    """Ended in a typed error (the close at the latest), in time, with memory bounded by the limits."""
    where = f"{len(data)} bytes {data[:200]!r}: {outcome.phase}, {outcome.error!r} after {outcome.elapsed:.2f} s"
    assert isinstance(outcome.error, stompfast.StompError), where
    assert outcome.phase in ("subscribe", "receive"), where
    assert outcome.elapsed <= FUZZ_CASE.deadline, where
    assert outcome.peak < 3 * CASE_OPTIONS["max_frame_bytes"] + 4 * 1024 * 1024, where
