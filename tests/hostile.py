"""A scripted, misbehaving STOMP server on loopback, for the hostile-server tests.

Each accepted connection runs ``handler(conn)`` in a thread of its own with a
blocking socket, so the same server serves async clients on any anyio backend
and the blocking client alike. The handler decides everything: what to answer,
when to stop reading, how to end (``conn.reset()`` for an RST, returning for a
plain close).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any, Callable, List, Optional

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


def endless_frame(conn: Conn) -> None:
    """CONNECTED, then a MESSAGE whose body never ends, until the client hangs up."""
    conn.connected()
    conn.send_raw(b"MESSAGE\nsubscription:1\nmessage-id:1\ndestination:/queue/x\n\n")
    chunk = b"x" * 65536
    while True:
        conn.send_raw(chunk)
