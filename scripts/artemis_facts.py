"""Raw-socket probes of a live Artemis (scripts/brokers.sh start artemis): prints frames as seen.

Stdlib only. Usage: python scripts/artemis_facts.py [a b c d e f g h auth] (default: all).
Ports from STOMPFAST_ARTEMIS_PORT / STOMPFAST_ARTEMIS_PREFIX_PORT (61618 / 61619).
Destinations get a per-run suffix, so runs do not see each other's messages. Heart-beat counts
include the EOL Artemis writes after every frame's NUL. Not a test: evidence for docs/notes.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import sys
import time
from typing import Dict, List, Optional, Tuple

HOST = "127.0.0.1"
PORT = int(os.environ.get("STOMPFAST_ARTEMIS_PORT", "61618"))
PREFIX_PORT = int(os.environ.get("STOMPFAST_ARTEMIS_PREFIX_PORT", "61619"))
RUN = "%x" % (int(time.time() * 1000) % 0xFFFFFF)

Frame = Tuple[str, Dict[str, str], bytes]


def encode(cmd: str, headers: Optional[Dict[str, str]] = None, body: bytes = b"") -> bytes:
    head = cmd + "\n" + "".join("%s:%s\n" % kv for kv in (headers or {}).items()) + "\n"
    return head.encode() + body + b"\0"


class Parser:
    """STOMP frames out of a byte stream (EOL heart-beats counted, content-length honoured)."""

    def __init__(self) -> None:
        self.buf = b""
        self.beats = 0

    def feed(self, data: bytes) -> List[Frame]:
        self.buf += data
        out = []
        while True:
            while self.buf[:1] in (b"\n", b"\r"):
                if self.buf[:1] == b"\n":
                    self.beats += 1
                self.buf = self.buf[1:]
            end = self.buf.find(b"\n\n")
            if not self.buf or end < 0:
                return out
            lines = self.buf[:end].decode("utf-8", "replace").replace("\r", "").split("\n")
            headers: Dict[str, str] = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers.setdefault(k, v)
            start = end + 2
            if "content-length" in headers:
                stop = start + int(headers["content-length"])
                if len(self.buf) < stop + 1:
                    return out
            else:
                stop = self.buf.find(b"\0", start)
                if stop < 0:
                    return out
            out.append((lines[0], headers, self.buf[start:stop]))
            self.buf = self.buf[stop + 1:]


class Conn:
    def __init__(self, port: int = PORT, connect: bool = True, **headers: str) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=5)
        self.parser = Parser()
        self.pending: List[Frame] = []
        self.closed = False
        self.connected: Optional[Frame] = None
        if connect:
            h = {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}
            h.update({k.replace("_", "-"): v for k, v in headers.items()})
            self.send("CONNECT", h)
            self.connected = self.read(5)

    def send(self, cmd: str, headers: Optional[Dict[str, str]] = None, body: bytes = b"") -> None:
        self.raw(encode(cmd, headers, body))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, timeout: float) -> Optional[Frame]:
        """The next frame, or None on timeout or close (self.closed tells which)."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            except OSError:
                data = b""
            if not data:
                self.closed = True
                return None
            self.pending.extend(self.parser.feed(data))
        return self.pending.pop(0)

    def drain(self, timeout: float) -> List[Frame]:
        frames = []
        while True:
            f = self.read(timeout)
            if f is None:
                return frames
            frames.append(f)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def show(f: Optional[Frame], limit: int = 120) -> str:
    if f is None:
        return "(nothing)"
    cmd, headers, body = f
    return "%s %s body=%r" % (cmd, headers, body[:limit])


def sent_with_receipt(c: Conn, dest: str, body: bytes, n: int = 1, **extra: str) -> None:
    for i in range(n):
        h = {"destination": dest}
        h.update({k.replace("_", "-"): v for k, v in extra.items()})
        if i == n - 1:
            h["receipt"] = "s-%s" % dest
        c.send("SEND", h, body)
    r = c.read(5)
    assert r and r[0] == "RECEIPT", show(r)


# ------------------------------------------------------------------------------------------------


def fact_auth() -> None:
    print("== auth")
    for label, h in [("guest/guest", {"login": "guest", "passcode": "guest"}), ("anonymous", {}),
                     ("guest/wrong", {"login": "guest", "passcode": "wrong"})]:
        c = Conn(connect=False)
        c.send("CONNECT", dict({"accept-version": "1.2", "host": "/"}, **h))
        f = c.read(5)
        print("%-12s -> %s; closed after: %s" % (label, show(f), c.read(2) is None and c.closed))
        c.close()


def fact_a() -> None:
    print("== a. CONNECTED, heart-beats")
    c = Conn()
    print("no heart-beat header ->", show(c.connected))
    c.close()
    for hb in ("500,500", "0,0", "1000,0", "0,1000"):
        c = Conn(heart_beat=hb)
        print("heart-beat:%s -> %s" % (hb, show(c.connected)))
        c.close()
    for hb in ("500,500", "500,0", "2000,0"):
        c = Conn(heart_beat=hb)
        t0 = time.monotonic()
        while c.read(30) is not None:
            pass
        gone = time.monotonic() - t0
        print("heart-beat:%s, client silent: closed=%s after %.2fs, %d server beats received"
              % (hb, c.closed, gone, c.parser.beats))
        c.close()
    # a client that keeps beating is not dropped
    c = Conn(heart_beat="500,500")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 6 and not c.closed:
        c.raw(b"\n")
        c.read(0.4)
    print("heart-beat:500,500, client beating every 0.4 s for 6 s: closed=%s, %d server beats"
          % (c.closed, c.parser.beats))
    c.close()


def routing(label: str, port: int, q_pre: str, q_two: str, send_h: Dict[str, str], sub_h: Dict[str, str]) -> None:
    p = Conn(port)
    sent_with_receipt(p, q_pre, b"pre", 3, **send_h)
    c = Conn(port)
    c.send("SUBSCRIBE", dict({"id": "0", "destination": q_pre, "ack": "auto", "receipt": "sub"}, **sub_h))
    got = c.drain(2)
    msgs = [f for f in got if f[0] == "MESSAGE"]
    print("%s: 3 SENT to %s before any SUBSCRIBE -> %d MESSAGE delivered (frames: %s)"
          % (label, q_pre, len(msgs), [f[0] for f in got]))
    c.close()
    subs = []
    for _ in range(2):
        s = Conn(port)
        s.send("SUBSCRIBE", dict({"id": "0", "destination": q_two, "ack": "auto", "receipt": "sub"}, **sub_h))
        r = s.read(5)
        assert r and r[0] == "RECEIPT", show(r)
        subs.append(s)
    sent_with_receipt(p, q_two, b"two", 4, **send_h)
    counts = [len([f for f in s.drain(1.5) if f[0] == "MESSAGE"]) for s in subs]
    print("%s: 2 consumers on %s, 4 SENT -> each got %s" % (label, q_two, counts))
    for s in subs:
        s.close()
    p.close()


def fact_b() -> None:
    print("== b. routing")
    routing("stock, no headers", PORT, "/queue/r1-" + RUN, "/queue/r2-" + RUN, {}, {})
    routing("stock, ANYCAST headers", PORT, "/queue/r3-" + RUN, "/queue/r4-" + RUN,
            {"destination-type": "ANYCAST"}, {"subscription-type": "ANYCAST"})
    routing("prefix port, /queue/", PREFIX_PORT, "/queue/p1-" + RUN, "/queue/p2-" + RUN, {}, {})
    routing("prefix port, /topic/", PREFIX_PORT, "/topic/p3-" + RUN, "/topic/p4-" + RUN, {}, {})
    routing("stock, MULTICAST headers", PORT, "/topic/r5-" + RUN, "/topic/r6-" + RUN,
            {"destination-type": "MULTICAST"}, {"subscription-type": "MULTICAST"})


def fact_c() -> None:
    print("== c. flow control (50 queued x 100 bytes, ack:client-individual, no ACK sent)")
    variants = [("activemq.prefetchSize:5", {"activemq.prefetchSize": "5"}),
                ("consumer-window-size:5", {"consumer-window-size": "5"}),
                ("consumer-window-size:1000", {"consumer-window-size": "1000"}),
                ("consumer-window-size:-1", {"consumer-window-size": "-1"}),
                ("consumer-window-size:0", {"consumer-window-size": "0"}),
                ("(none)", {}),
                ("prefetch-count:5", {"prefetch-count": "5"})]
    for i, (label, h) in enumerate(variants):
        q = "/queue/fc%d-%s" % (i, RUN)
        p = Conn(PREFIX_PORT)
        sent_with_receipt(p, q, b"x" * 100, 50)
        p.close()
        c = Conn(PREFIX_PORT)
        c.send("SUBSCRIBE", dict({"id": "0", "destination": q, "ack": "client-individual"}, **h))
        msgs = [f for f in c.drain(2) if f[0] == "MESSAGE"]
        extra = ""
        if msgs and len(msgs) < 50:
            c.send("ACK", {"id": msgs[0][1]["ack"]})
            more = [f for f in c.drain(1.5) if f[0] == "MESSAGE"]
            extra = "; after ACK of the first: %d more" % len(more)
        print("%-28s -> %d MESSAGE before any ACK%s" % (label, len(msgs), extra))
        c.close()


def fact_d() -> None:
    print("== d. transactions (prefix port, /queue/)")
    for end in ("ABORT", "COMMIT", "(no ACK: control)", "(plain ACK: control)"):
        q = "/queue/tx-ack-%s-%s" % (end.lower().strip("()").replace(" ", "-").replace(":", ""), RUN)
        p = Conn(PREFIX_PORT)
        sent_with_receipt(p, q, b"tx")
        p.close()
        c = Conn(PREFIX_PORT)
        c.send("SUBSCRIBE", {"id": "0", "destination": q, "ack": "client-individual"})
        m = c.read(3)
        assert m and m[0] == "MESSAGE", show(m)
        if end == "(plain ACK: control)":
            c.send("ACK", {"id": m[1]["ack"], "receipt": "end"})
        elif end != "(no ACK: control)":
            c.send("BEGIN", {"transaction": "t1"})
            c.send("ACK", {"id": m[1]["ack"], "transaction": "t1"})
            c.send(end, {"transaction": "t1", "receipt": "end"})
        after = c.drain(2)
        c.send("DISCONNECT", {"receipt": "bye"})
        c.drain(2)
        c.close()
        c = Conn(PREFIX_PORT)
        c.send("SUBSCRIBE", {"id": "0", "destination": q, "ack": "auto"})
        again = [f for f in c.drain(2) if f[0] == "MESSAGE"]
        what = end if end.startswith("(") else "BEGIN t1, ACK transaction:t1, %s t1" % end
        print("%s -> same subscription then got %s; a new subscription after"
              " DISCONNECT got %d MESSAGE" % (what, [show(f, 20) for f in after], len(again)))
        c.close()
    for end in ("ABORT", "COMMIT"):
        q = "/queue/tx-send-%s-%s" % (end.lower(), RUN)
        c = Conn(PREFIX_PORT)
        s = Conn(PREFIX_PORT)
        s.send("SUBSCRIBE", {"id": "0", "destination": q, "ack": "auto", "receipt": "sub"})
        s.read(3)
        c.send("BEGIN", {"transaction": "t2"})
        c.send("SEND", {"destination": q, "transaction": "t2", "receipt": "in-tx"}, b"in tx")
        r1 = c.read(3)
        before = [f for f in s.drain(1) if f[0] == "MESSAGE"]
        c.send(end, {"transaction": "t2", "receipt": "end"})
        r2 = c.read(3)
        after = [f for f in s.drain(1.5) if f[0] == "MESSAGE"]
        print("BEGIN t2, SEND transaction:t2 (answer %s), before %s the consumer got %d; %s (answer %s) -> consumer"
              " got %d" % (show(r1), end, len(before), end, show(r2), len(after)))
        c.close()
        s.close()


# ------------------------------------------------------------------------------------------------
# WebSocket


class WS:
    def __init__(self, path: str = "/", protocols: Optional[str] = "v12.stomp") -> None:
        self.sock = socket.create_connection((HOST, PORT), timeout=5)
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n" % (path, HOST, PORT, key))
        if protocols is not None:
            req += "Sec-WebSocket-Protocol: %s\r\n" % protocols
        self.sock.sendall((req + "\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = self.sock.recv(4096)
            if not d:
                break
            buf += d
        head, _, self.rest = buf.partition(b"\r\n\r\n")
        self.response = head.decode("latin-1")
        self.status = self.response.split("\r\n", 1)[0]
        self.parser = Parser()
        self.closed: Optional[str] = None

    def frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        b0 = (0x80 if fin else 0) | opcode
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", b0, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", b0, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", b0, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def recv_exact(self, n: int) -> bytes:
        while len(self.rest) < n:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError
            self.rest += d
        out, self.rest = self.rest[:n], self.rest[n:]
        return out

    def read(self, timeout: float) -> List[Frame]:
        """STOMP frames from WS messages until timeout or close (self.closed holds the close frame)."""
        frames: List[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return frames
            self.sock.settimeout(left)
            try:
                b0, b1 = self.recv_exact(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self.recv_exact(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self.recv_exact(8))[0]
                payload = self.recv_exact(n)
            except socket.timeout:
                return frames
            except (EOFError, OSError):
                self.closed = self.closed or "TCP closed"
                return frames
            op = b0 & 0x0F
            if op == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.closed = "close frame code=%s reason=%r" % (code, payload[2:])
                return frames
            if op in (0, 1, 2):
                frames.extend(self.parser.feed(payload))

    def stomp(self, data: bytes, opcode: int = 2) -> None:
        self.frame(opcode, data)


def ws_connected(path: str = "/", protocols: Optional[str] = "v12.stomp") -> WS:
    w = WS(path, protocols)
    w.stomp(encode("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}))
    f = w.read(3)
    assert f and f[0][0] == "CONNECTED", (w.status, f, w.closed)
    return w


def fact_e() -> None:
    print("== e. WebSocket on the stock port %d" % PORT)
    for path, protos in [("/", "v12.stomp"), ("/ws", "v12.stomp"), ("/stomp", "v12.stomp"),
                         ("/", "v10.stomp, v11.stomp, v12.stomp"), ("/", "stomp"), ("/", None), ("/", "mqtt")]:
        w = WS(path, protos)
        chosen = [line for line in w.response.split("\r\n") if line.lower().startswith("sec-websocket-protocol")]
        ok = ""
        if w.status.split(" ")[1:2] == ["101"]:
            w.stomp(encode("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}))
            f = w.read(2)
            ok = " -> CONNECT answered %s" % (f[0][0] if f else "nothing (%s)" % w.closed)
        print("GET %-7s Sec-WebSocket-Protocol: %-32s -> %s %s%s" % (path, protos, w.status, chosen, ok))
        w.sock.close()
    w = WS("/", "v12.stomp")
    print("handshake response:\n  " + w.response.replace("\r\n", "\n  "))
    w.sock.close()
    q = "/queue/ws-%s" % RUN
    for size in (60 * 1024, 65536 - 100, 65536 + 100, 70 * 1024):
        w = ws_connected()
        frame = encode("SEND", {"destination": q, "receipt": "big"}, b"y" * 0)
        pad = size - len(frame)
        frame = encode("SEND", {"destination": q, "receipt": "big"}, b"y" * pad)
        assert len(frame) == size
        w.stomp(frame)
        got = w.read(3)
        print("one WS binary message of %d bytes (a SEND) -> %s; connection: %s"
              % (size, [show(f, 40) for f in got], w.closed or "open"))
        w.sock.close()
    for exact in (65536, 65537):
        w = ws_connected()
        head = encode("SEND", {"destination": q, "receipt": "edge"})
        frame = encode("SEND", {"destination": q, "receipt": "edge"}, b"z" * (exact - len(head)))
        w.stomp(frame)
        got = w.read(3)
        print("one WS message of exactly %d bytes -> %s; connection: %s"
              % (len(frame), [f[0] for f in got], w.closed or "open"))
        w.sock.close()
    # 70 KiB in one WS message, fragmented into two WS frames (FIN=0 + continuation)
    w = ws_connected()
    frame = encode("SEND", {"destination": q, "receipt": "frag"}, b"f" * (70 * 1024))
    half = len(frame) // 2
    w.frame(2, frame[:half], fin=False)
    w.frame(0, frame[half:], fin=True)
    got = w.read(3)
    print("70 KiB SEND as one WS message in two fragments (FIN=0 + continuation) -> %s; connection: %s"
          % ([show(f, 40) for f in got], w.closed or "open"))
    w.sock.close()
    # one STOMP frame across two WS messages
    for opcode, label in ((2, "binary"), (1, "text")):
        qs = "/queue/ws-split-%s-%s" % (label, RUN)
        w = ws_connected()
        w.stomp(encode("SUBSCRIBE", {"id": "0", "destination": qs, "ack": "auto", "receipt": "sub"}), opcode)
        print("  subscribe ->", [f[0] for f in w.read(2)])
        frame = encode("SEND", {"destination": qs, "receipt": "split", "content-type": "text/plain"}, b"hello, split")
        cut = frame.index(b"hello") + 3
        w.stomp(frame[:cut], opcode)
        time.sleep(0.3)
        w.stomp(frame[cut:], opcode)
        got = w.read(3)
        print("SEND split across two WS %s messages (%r | %r) -> %s; connection: %s"
              % (label, frame[:cut][-12:], frame[cut:], [show(f, 40) for f in got], w.closed or "open"))
        w.sock.close()
    # two STOMP frames in one WS message
    w = ws_connected()
    w.stomp(encode("SEND", {"destination": q, "receipt": "one"}, b"1")
            + encode("SEND", {"destination": q, "receipt": "two"}, b"2"))
    print("two SEND frames in one WS message ->", [show(f, 10) for f in w.read(2)])
    w.sock.close()
    # heart-beat over WS
    w = WS("/", "v12.stomp")
    w.stomp(encode("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest",
                               "heart-beat": "0,500"}))
    got = w.read(3)
    print("WS CONNECT heart-beat:0,500 -> %s; server beats in 3 s: %d"
          % (show(got[0]) if got else None, w.parser.beats))
    w.sock.close()


def fact_f() -> None:
    print("== f. ERROR behaviour (each on a fresh connection, then SEND with receipt)")
    cases = [("UNSUBSCRIBE", {"id": "nope", "receipt": "u1"}),
             ("ACK", {"id": "nope", "receipt": "a1"}),
             ("NACK", {"id": "nope", "receipt": "n1"}),
             ("COMMIT", {"transaction": "nope", "receipt": "c1"}),
             ("ABORT", {"transaction": "nope", "receipt": "b1"}),
             ("SUBSCRIBE", {"destination": "/queue/f-%s" % RUN, "receipt": "s1"}),
             ("SEND", {"receipt": "d1"})]
    for cmd, h in cases:
        c = Conn()
        c.send(cmd, h)
        first = c.drain(1.5)
        closed_now = c.closed
        try:
            c.send("SEND", {"destination": "/queue/f-%s" % RUN, "receipt": "after"}, b"after")
            after = c.drain(1.5)
        except OSError as e:
            after = [("(write failed: %s)" % e, {}, b"")]
        print("%s %s ->\n    %s\n    closed=%s; then SEND receipt:after -> %s; closed=%s"
              % (cmd, h, "\n    ".join(show(f) for f in first) or "(nothing)", closed_now,
                 [show(f, 40) for f in after] or "(nothing)", c.closed))
        c.close()


def fact_g() -> None:
    print("== g. MESSAGE headers")
    q = "/queue/g-%s" % RUN
    p = Conn(PREFIX_PORT)
    sent_with_receipt(p, q, b"with length", content_length="11", content_type="text/plain")
    p.send("SEND", {"destination": q, "receipt": "r2"}, b"no length")
    p.read(3)
    p.send("SEND", {"destination": q, "receipt": "r3", "content-length": "5"}, b"a\0b\0c")
    p.read(3)
    p.send("SEND", {"destination": q, "receipt": "r4", "custom": "x", "persistent": "true"}, b"")
    p.read(3)
    p.close()
    for ack in ("client-individual", "auto"):
        c = Conn(PREFIX_PORT)
        c.send("SUBSCRIBE", {"id": "sub-%s" % ack, "destination": q, "ack": ack})
        for f in c.drain(1.5):
            print("ack:%s -> %s" % (ack, show(f)))
        c.close()
        if ack == "client-individual":
            print("(not acked: redelivered to the next subscription)")


def auto_ack_race(tries: int, pause: float) -> None:
    """Subscribe with ack:auto, take one message, UNSUBSCRIBE after ``pause`` s, look for it again."""
    p = Conn(PREFIX_PORT)
    c = Conn(PREFIX_PORT)
    again = errors = 0
    for i in range(tries):
        if c.closed:
            c.close()
            c = Conn(PREFIX_PORT)
        q = "/queue/h-%s-%d-%d" % (RUN, pause * 1000, i)
        c.send("SUBSCRIBE", {"id": "a%d" % i, "destination": q, "ack": "auto"})
        sent_with_receipt(p, q, b"once")
        f = c.read(5)
        assert f and f[0] == "MESSAGE", show(f)
        if pause:
            time.sleep(pause)
        c.send("UNSUBSCRIBE", {"id": "a%d" % i})
        c.send("SUBSCRIBE", {"id": "c%d" % i, "destination": q, "ack": "client-individual"})
        f = c.read(0.3)
        if f and f[0] == "MESSAGE":
            again += 1
            c.send("ACK", {"id": f[1]["ack"]})
            f = c.read(0.3)
        if f and f[0] == "ERROR":
            errors += 1
            print("  try %d: %s" % (i, show(f)))
            c.closed = True
        else:
            c.send("UNSUBSCRIBE", {"id": "c%d" % i})
    c.close()
    p.close()
    print("pause %.3f s: delivered again %d, ERROR %d, in %d tries" % (pause, again, errors, tries))


def fact_h() -> None:
    print("== h. ack:auto, the subscription left at once after one message: delivered again?")
    tries = int(os.environ.get("STOMPFAST_PROBE_TRIES", "300"))
    auto_ack_race(tries, 0.0)
    auto_ack_race(tries, 0.05)


def main(argv: List[str]) -> None:
    names = argv or ["auth", "a", "b", "c", "d", "e", "f", "g", "h"]
    for n in names:
        globals()["fact_" + n]()


if __name__ == "__main__":
    main(sys.argv[1:])
