"""A fault-injection TCP proxy for tests: put it between a client and any broker.

Theory of operation
-------------------
:class:`FaultProxy` listens on loopback with :func:`anyio.create_tcp_listener`
and, for every client it accepts, opens a TCP connection to the target (any
broker: the in-process :class:`~stompfast.testing.Broker`, RabbitMQ, ActiveMQ).
It imports anyio only, so it runs on asyncio, asyncio + uvloop and trio, in the
caller's event loop (``async with FaultProxy(...)``) or in a thread of its own
(``with FaultProxy.in_thread(...)``). It never parses more than it must and
never changes a byte: what it forwards is exactly what it read, in order.

Each accepted connection (a *link*) has two directions: ``"up"`` (client to
broker) and ``"down"`` (broker to client). Each direction is a *pipe* of two
tasks in the link's task group:

* the *reader* reads up to 64 KiB from its side, stamps the chunk with the time
  it was read and appends it to the pipe's buffer. It stops reading while 1 MiB
  is buffered (a stalled direction pushes back on its sender through TCP, as a
  congested network does). It also counts STOMP frames (see below) and decides
  where a one-shot fault (:class:`Trigger`) falls in the byte stream: the chunk
  is split there and a fault marker is queued after the last byte to forward.
* the *writer* forwards the buffer to the other side: each chunk no sooner than
  ``latency`` seconds after it was read (a one-way delay: chunks are pipelined,
  not serialised), at most ``throttle`` bytes per second, in 1-byte ``send``
  calls with ``split`` (``TCP_NODELAY`` is set on both sockets, so each byte
  leaves as a segment of its own), and not at all while the direction is
  stalled. Reaching a fault marker, it executes the fault, so everything read
  before the trigger point has been forwarded (delays included) when it fires.

Faults that last (``latency``, ``throttle``, ``split``, ``stall``) apply to
every open link at once when changed with :meth:`FaultProxy.set`. One-shot
faults are :class:`Trigger` values given as ``reset=`` or ``half_close=``:
they fire once on *each* link (counted from the link's own start: its bytes,
its seconds, its frames), for links already open when set as well as later
ones. :meth:`FaultProxy.reset_all` and :meth:`FaultProxy.half_close_all` fire
at once on every open link.

* **reset**: both sockets are closed with ``SO_LINGER`` 0, so each peer gets a
  TCP RST (``ECONNRESET``), as when a middlebox or a crashed host drops a
  connection. Nothing buffered in the proxy is forwarded after it.
* **half-close** of a direction: the proxy shuts down its sending side towards
  that direction's receiver (a FIN: the receiver reads EOF) and discards what
  the sender sends afterwards (``discarded_bytes``); the other direction keeps
  flowing until its own end. A half-closed ``"down"`` is a broker that went
  silent with a FIN; a half-closed ``"up"`` is a client whose FIN reached the
  broker.

A peer's own FIN is forwarded as a FIN (after what was buffered before it) and
a peer's reset resets the link. A link ends when both directions have ended.
If the target refuses the connection, the client's connection is reset.

Frames: to fire a trigger at a frame, each pipe counts STOMP frames in its byte
stream. A frame starts at the first byte that is not an EOL (heart-beats are
not frames); its command is its first line; its header block ends at an empty
line; its body then ends after ``content-length`` bytes when that header is
present (the first one wins), else at the first NUL, which also ends the
frame. Escaping is not decoded (the counter only needs the command and
``content-length``), frames are not checked, and a header block longer than
1 MiB stops the counting for that direction. While a frame trigger is armed,
the bytes of a frame whose first line is incomplete are held back until the
command is known, so a trigger can fire before a frame's first byte.

Counters are in :attr:`FaultProxy.stats` (a :class:`ProxyStats` snapshot).
Public methods are synchronous and must be called from the proxy's event loop;
a proxy started with :meth:`FaultProxy.in_thread` forwards calls made from
other threads to its loop through a blocking portal, as the broker does.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import struct
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import SocketAttribute

from ._faults import DIRECTIONS, DOWN, UP, Fault, FrameCounter, Trigger
from ._threaded import RunsInThread

log = logging.getLogger("stompfast.testing")

__all__ = ["FaultProxy", "ProxyStats", "Trigger"]

_READ_SIZE = 65536
#: Bytes a direction buffers before its reader stops reading (backpressure through TCP).
_HIGH_WATER = 1 << 20
_IO_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of a proxy's counters (:attr:`FaultProxy.stats`).

    Attributes:
        connections: client connections accepted.
        open_connections: links open now.
        upstream_failures: accepted clients whose connection to the target
            failed (each was reset).
        bytes_up, bytes_down: bytes forwarded client to broker, broker to client.
        frames_up, frames_down: STOMP frames read from the client, from the
            broker, by command (see the module docstring for how they are found).
        discarded_bytes: bytes read after a half-close and thrown away.
        faults: faults injected, by kind: ``"reset"`` (links reset by a trigger
            or :meth:`FaultProxy.reset_all`), ``"half_close"``, ``"stall"`` (a
            direction of a link that began a stall).
        faults_injected: the sum of ``faults``.
    """

    connections: int = 0
    open_connections: int = 0
    upstream_failures: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    frames_up: Mapping[str, int] = field(default_factory=dict)
    frames_down: Mapping[str, int] = field(default_factory=dict)
    discarded_bytes: int = 0
    faults: Mapping[str, int] = field(default_factory=dict)
    faults_injected: int = 0


class _Pipe:
    """One direction of a link: its buffer, counters and armed triggers."""

    def __init__(self, link: "_Link", direction: str, src: Any, dst: Any) -> None:
        self.link = link
        self.direction = direction
        self.src = src
        self.dst = dst
        # [time read, bytes or Fault, offset already written]
        self.buffer: Deque[List[Any]] = deque()
        self.buffered = 0
        # Bytes read from src (stream offset of the next one)
        self.read_pos = 0
        self.counter = FrameCounter()
        self.frames = 0
        self.commands: Counter[str] = Counter()
        self.holdback = b""
        # Half-closed: throw away what is read
        self.discard = False
        # The reader has queued its last item
        self.ended = False
        self.stalled = False
        # Wakes the writer (data, settings)
        self.changed = anyio.Event()
        # Wakes the reader (buffer below high water)
        self.space = anyio.Event()
        #: trigger kind -> stream offset where it fires, once known, and the trigger it is for
        self.fire_at: Dict[str, int] = {}
        self.armed: Dict[str, Trigger] = {}

    def wake(self) -> None:
        self.changed.set()


class _Link:
    def __init__(self, proxy: "FaultProxy", number: int, client: Any, server: Any) -> None:
        self.proxy = proxy
        self.number = number
        self.client = client
        self.server = server
        self.opened = anyio.current_time()
        self.tg: Any = None
        self.pipes = {UP: _Pipe(self, UP, client, server), DOWN: _Pipe(self, DOWN, server, client)}
        self.fired: Dict[str, bool] = {"reset": False, "half_close": False}
        self.timer_wake = anyio.Event()
        self.done = False
        self.was_reset = False


def _setsockopt(stream: Any, level: int, option: int, value: Any) -> None:
    # a socket the peer or the loop already closed raises OSError, or on uvloop ValueError
    # ("negative file descriptor"): there is nothing left to set then
    with contextlib.suppress(Exception):
        raw = stream.extra(SocketAttribute.raw_socket, None)
        if raw is not None:
            raw.setsockopt(level, option, value)


def _set_linger_zero(stream: Any) -> None:
    _setsockopt(stream, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _set_nodelay(stream: Any) -> None:
    _setsockopt(stream, socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _directions(value: Any, name: str) -> Tuple[str, ...]:
    """``None``/``False`` -> (), ``True``/``"both"`` -> both, ``"up"``/``"down"`` -> that one."""
    if value is None or value is False:
        return ()
    if value is True or value == "both":
        return DIRECTIONS
    if value in DIRECTIONS:
        return (value,)
    raise ValueError(f"{name} must be None, True, 'up', 'down' or 'both', got {value!r}")


def _per_direction(value: Any, name: str) -> Dict[str, float]:
    """A number for both directions, or a mapping ``{"up": x, "down": y}`` (missing: 0)."""
    if isinstance(value, Mapping):
        bad = set(value) - set(DIRECTIONS)
        if bad:
            raise ValueError(f"{name} keys must be 'up' and 'down', got {sorted(bad)}")
        out = {d: float(value.get(d) or 0) for d in DIRECTIONS}
    else:
        out = {d: float(value or 0) for d in DIRECTIONS}
    if any(not v >= 0 or math.isinf(v) for v in out.values()):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return out


def _target(target: Union[str, Tuple[str, int]]) -> Tuple[str, int]:
    if isinstance(target, tuple):
        host, port = target
        return str(host), int(port)
    if "://" in target:
        parts = urlsplit(target)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"the target URL needs a host and a port, got {target!r}")
        return parts.hostname, parts.port
    name, sep, number = target.rpartition(":")
    if not sep or not name or not number.isdigit():
        raise ValueError(f"target must be 'host:port', (host, port) or a URL with a port, got {target!r}")
    return name.strip("[]"), int(number)


class FaultProxy(RunsInThread):
    """A TCP proxy between a client and a broker that injects network faults on demand.

    ``async with FaultProxy("127.0.0.1:61613") as proxy:`` listens on an
    ephemeral loopback port in the current event loop; :meth:`in_thread` runs
    one in a thread of its own for synchronous code. Connect the client to
    :attr:`url` (or :meth:`rewrite` a broker URL, which keeps its credentials).
    See the module docstring for the theory of operation.

    Args:
        target: the broker: ``"host:port"``, ``(host, port)`` or a URL with a
            port (only its host and port are used).
        host, port: where the proxy listens (port 0 picks a free one).
        latency: seconds each chunk is held before it is forwarded (a one-way
            delay), for both directions or as ``{"up": s, "down": s}``.
        throttle: bytes per second each link may forward per direction (0 or
            None: no limit), a number or ``{"up": ..., "down": ...}``.
        split: forward in 1-byte segments: ``True``/``"both"``, ``"up"`` or
            ``"down"``.
        stall: stop forwarding a direction (``"up"``, ``"down"`` or
            ``"both"``); data read meanwhile is kept (up to 1 MiB per
            direction, then the proxy stops reading) and forwarded when the
            stall ends (``set(stall=None)``).
        reset: a :class:`Trigger` at which each link is reset (RST both ways).
        half_close: a :class:`Trigger` at which one direction of each link is
            half-closed (FIN to its receiver).
        connect_timeout: seconds to wait for the target per accepted client.
    """

    def __init__(
        self,
        target: Union[str, Tuple[str, int]],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        latency: Union[float, Mapping[str, float]] = 0.0,
        throttle: Union[None, float, Mapping[str, float]] = None,
        split: Union[None, bool, str] = None,
        stall: Union[None, bool, str] = None,
        reset: Optional[Trigger] = None,
        half_close: Optional[Trigger] = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.target = _target(target)
        self.host = host
        self._requested_port = port
        self.connect_timeout = connect_timeout
        self._latency: Dict[str, float] = {}
        self._throttle: Dict[str, float] = {}
        self._split: Tuple[str, ...] = ()
        self._stall: Tuple[str, ...] = ()
        self._triggers: Dict[str, Optional[Trigger]] = {"reset": None, "half_close": None}
        self._apply(dict(latency=latency, throttle=throttle, split=split, stall=stall, reset=reset,
                         half_close=half_close))
        self._port: Optional[int] = None
        self._listener: Any = None
        self._tg: Any = None
        self._started = False
        self._links: Dict[_Link, None] = {}
        self._numbers = 0
        self._counts: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._frames: Dict[str, Counter[str]] = {UP: Counter(), DOWN: Counter()}
        self._errors: List[BaseException] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "FaultProxy":
        if self._started:
            raise RuntimeError("a FaultProxy can be started only once")
        self._started = True
        self._loop_thread = threading.get_ident()
        self._listener = await anyio.create_tcp_listener(
            local_host=self.host, local_port=self._requested_port
        )
        self._port = self._listener.extra(SocketAttribute.local_port)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._serve, self._tg)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Stop listening and close every link at once (shielded, bounded)."""
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            with anyio.move_on_after(2, shield=True):
                await self._listener.aclose()

    @classmethod
    @contextlib.contextmanager
    def in_thread(
        cls,
        *args: Any,
        backend: str = "asyncio",
        backend_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Iterator["FaultProxy"]:
        """Run a proxy in a thread with its own event loop; yields the started proxy.

        Takes the same arguments as :class:`FaultProxy`, plus the anyio
        ``backend`` (``"asyncio"`` or ``"trio"``) and its ``backend_options``.
        Methods called from other threads run in the proxy's loop. The proxy
        stops when the block exits.
        """
        yield from cls._run_in_thread(cls(*args, **kwargs), backend, backend_options)

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The TCP port the proxy listens on (known once started)."""
        if self._port is None:
            raise RuntimeError(
                "the proxy is not started: use `async with FaultProxy(...)` or FaultProxy.in_thread()"
            )
        return self._port

    @property
    def url(self) -> str:
        """``stomp://HOST:PORT/`` of the proxy (no credentials: see :meth:`rewrite`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"stomp://{host}:{self.port}/"

    def rewrite(self, url: str) -> str:
        """``url`` (a broker URL, with its scheme, credentials and path) pointing at the proxy instead."""
        parts = urlsplit(url)
        host = f"[{self.host}]" if ":" in self.host else self.host
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{host}:{self.port}" if userinfo else f"{host}:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    # ------------------------------------------------------------------ counters

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the counters (:class:`ProxyStats`)."""
        return self._call(self._stats)

    def _stats(self) -> ProxyStats:
        c = self._counts
        faults = dict(self._faults)
        return ProxyStats(
            connections=c["connections"],
            open_connections=len(self._links),
            upstream_failures=c["upstream_failures"],
            bytes_up=c["bytes_up"],
            bytes_down=c["bytes_down"],
            frames_up=dict(self._frames[UP]),
            frames_down=dict(self._frames[DOWN]),
            discarded_bytes=c["discarded"],
            faults=faults,
            faults_injected=sum(faults.values()),
        )

    @property
    def connections(self) -> int:
        """Links open now."""
        return self._call(lambda: len(self._links))

    @property
    def errors(self) -> List[BaseException]:
        """Unexpected exceptions raised while serving a link (bugs of the proxy; should stay empty).

        A peer's reset or EOF is not an error: the link ends (or is reset) and the proxy goes on.
        """
        return self._call(lambda: list(self._errors))

    # ------------------------------------------------------------------ faults

    def set(self, **changes: Any) -> None:
        """Change faults at run time; takes the keyword arguments of :class:`FaultProxy`'s faults.

        Only the names given change, e.g. ``proxy.set(latency=0.2)``,
        ``proxy.set(stall="down")``, ``proxy.set(stall=None)``,
        ``proxy.set(reset=Trigger(frame=3))``, ``proxy.set(reset=None)``. Open
        links see the change at once (a trigger counts from the link's start).
        """
        allowed = {"latency", "throttle", "split", "stall", "reset", "half_close"}
        unknown = set(changes) - allowed
        if unknown:
            raise TypeError(f"unknown fault(s) {sorted(unknown)}; expected some of {sorted(allowed)}")
        self._call(self._apply, changes)

    def clear(self) -> None:
        """Turn every fault off (no latency, throttle, split, stall or trigger)."""
        self.set(latency=0, throttle=None, split=None, stall=None, reset=None, half_close=None)

    def reset_all(self) -> None:
        """Reset every open link now: both of its sockets get an RST."""
        self._call(self._reset_all)

    def half_close_all(self, direction: str = DOWN) -> None:
        """Half-close ``direction`` of every open link now, after what it already buffered."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        self._call(self._half_close_all, direction)

    def _reset_all(self) -> None:
        for link in list(self._links):
            self._reset(link)

    def _half_close_all(self, direction: str) -> None:
        for link in list(self._links):
            pipe = link.pipes[direction]
            if not pipe.discard and not pipe.ended:
                self._queue_fault(pipe, "half_close")

    def _apply(self, changes: Mapping[str, Any]) -> None:
        # Every value is checked before any is applied
        new: Dict[str, Any] = {}
        for name, value in changes.items():
            if name in ("latency", "throttle"):
                new[name] = _per_direction(value, name)
            elif name in ("split", "stall"):
                new[name] = _directions(value, name)
            elif name in ("reset", "half_close"):
                if value is not None and not isinstance(value, Trigger):
                    raise TypeError(f"{name} must be a Trigger or None, got {value!r}")
                new[name] = value
        for name, value in new.items():
            if name in ("reset", "half_close"):
                self._triggers[name] = value
            else:
                setattr(self, f"_{name}", value)
        links = getattr(self, "_links", {})
        for link in links:
            for pipe in link.pipes.values():
                self._update_stall(pipe)
                for kind in list(pipe.fire_at):
                    if pipe.armed.get(kind) is not self._triggers[kind]:
                        # Computed for a trigger since replaced
                        del pipe.fire_at[kind]
                self._arm(pipe)
                self._fire_passed(pipe)
                pipe.wake()
            link.timer_wake.set()

    def _fire_passed(self, pipe: _Pipe) -> None:
        """Fire now a byte trigger set at run time below what the link already read (even if it is idle)."""
        for kind, at in list(pipe.fire_at.items()):
            if at > pipe.read_pos - len(pipe.holdback) or pipe.link.fired[kind] or pipe.ended:
                continue
            del pipe.fire_at[kind]
            if kind == "reset":
                self._reset(pipe.link)
            else:
                pipe.link.fired[kind] = True
                self._queue_fault(pipe, kind)

    def _update_stall(self, pipe: _Pipe) -> None:
        stalled = pipe.direction in self._stall
        if stalled and not pipe.stalled:
            self._faults["stall"] += 1
        pipe.stalled = stalled

    # ------------------------------------------------------------------ links

    async def _serve(self, client: Any) -> None:
        self._counts["connections"] += 1
        try:
            with anyio.fail_after(self.connect_timeout):
                server = await anyio.connect_tcp(*self.target)
        except (OSError, TimeoutError, anyio.BrokenResourceError):
            self._counts["upstream_failures"] += 1
            _set_linger_zero(client)
            await self._aclose(client)
            return
        except BaseException:
            await self._aclose(client)
            raise
        self._numbers += 1
        link = _Link(self, self._numbers, client, server)
        for stream in (client, server):
            _set_nodelay(stream)
        try:
            async with anyio.create_task_group() as tg:
                link.tg = tg
                self._links[link] = None
                for pipe in link.pipes.values():
                    self._update_stall(pipe)
                    self._arm(pipe)
                    tg.start_soon(self._reader, pipe)
                    tg.start_soon(self._writer, pipe)
                tg.start_soon(self._timer, link)
        # A bug of the proxy: keep serving the other links, but say so
        except Exception as exc:
            self._errors.append(exc)
            log.exception("stompfast.testing: error in proxy link %d", link.number)
        finally:
            link.done = True
            self._links.pop(link, None)
            await self._aclose(client)
            await self._aclose(server)

    @staticmethod
    async def _aclose(stream: Any) -> None:
        with anyio.move_on_after(1, shield=True):
            with contextlib.suppress(Exception):
                await stream.aclose()

    def _reset(self, link: _Link) -> None:
        if link.done or link.was_reset:
            return
        link.was_reset = link.fired["reset"] = True
        self._faults["reset"] += 1
        _set_linger_zero(link.client)
        _set_linger_zero(link.server)
        if link.tg is not None:
            link.tg.cancel_scope.cancel()

    def _peer_reset(self, link: _Link) -> None:
        """A peer reset its side (or a write failed): reset the other side too, uncounted."""
        if link.done:
            return
        _set_linger_zero(link.client)
        _set_linger_zero(link.server)
        if link.tg is not None:
            link.tg.cancel_scope.cancel()

    def _queue_fault(self, pipe: _Pipe, kind: str) -> None:
        """Queue a fault (or the peer's FIN) after what the pipe buffered; nothing is forwarded after it."""
        pipe.buffer.append([anyio.current_time(), Fault(kind), 0])
        pipe.ended = True
        if kind == "half_close":
            pipe.discard = True
            pipe.holdback = b""
        pipe.wake()

    def _arm(self, pipe: _Pipe) -> None:
        """Work out where the byte and frame triggers of this direction fall, when that is known."""
        for kind, trigger in self._triggers.items():
            if trigger is None or trigger.direction != pipe.direction or pipe.link.fired[kind]:
                continue
            if trigger.bytes is not None:
                pipe.fire_at[kind] = trigger.bytes
                pipe.armed[kind] = trigger

    def _frame_triggers(self, pipe: _Pipe) -> List[Tuple[str, Trigger]]:
        return [
            (kind, t)
            for kind, t in self._triggers.items()
            if t is not None and t.frame is not None and t.direction == pipe.direction
            and not pipe.link.fired[kind] and kind not in pipe.fire_at
        ]

    async def _timer(self, link: _Link) -> None:
        """Fires the time triggers of a link."""
        while True:
            deadline = math.inf
            due: List[Tuple[str, Trigger]] = []
            for kind, trigger in self._triggers.items():
                if trigger is None or trigger.seconds is None or link.fired[kind]:
                    continue
                at = link.opened + trigger.seconds
                if at <= anyio.current_time():
                    due.append((kind, trigger))
                deadline = min(deadline, at)
            for kind, trigger in due:
                if kind == "reset":
                    self._reset(link)
                    return
                link.fired[kind] = True
                pipe = link.pipes[trigger.direction]
                if not pipe.ended:
                    self._queue_fault(pipe, kind)
            if due:
                continue
            link.timer_wake = anyio.Event()
            with anyio.move_on_after(deadline - anyio.current_time()):
                await link.timer_wake.wait()

    async def _reader(self, pipe: _Pipe) -> None:
        link = pipe.link
        try:
            while True:
                while pipe.buffered >= _HIGH_WATER:
                    pipe.space = anyio.Event()
                    await pipe.space.wait()
                if (not pipe.discard and pipe.fire_at
                        and min(pipe.fire_at.values()) <= pipe.read_pos - len(pipe.holdback)):
                    # A byte trigger set at run time below what was read
                    if self._take(pipe, b""):
                        return
                    continue
                try:
                    data = await pipe.src.receive(_READ_SIZE)
                except anyio.EndOfStream:
                    if not pipe.ended:
                        if pipe.holdback:
                            self._forward(pipe, pipe.holdback)
                            pipe.holdback = b""
                        self._queue_fault(pipe, "eof")
                    return
                if pipe.discard:
                    self._counts["discarded"] += len(data)
                    continue
                if self._take(pipe, data):
                    return
        except _IO_ERRORS:
            self._peer_reset(link)

    def _take(self, pipe: _Pipe, data: bytes) -> bool:
        """Count the frames of a chunk read and queue it up to the first trigger point in it; True: reset."""
        # Stream offset of chunk[0]
        start = pipe.read_pos - len(pipe.holdback)
        chunk = pipe.holdback + data if pipe.holdback else data
        pipe.holdback = b""
        pipe.read_pos += len(data)
        triggers = self._frame_triggers(pipe)
        if data:
            frames = self._frames[pipe.direction]
            for offset, command in pipe.counter.feed(data):
                frames[command] += 1
                pipe.frames += 1
                pipe.commands[command] += 1
                for kind, trigger in triggers:
                    if kind in pipe.fire_at:
                        continue
                    count = pipe.commands[trigger.command] if trigger.command is not None else pipe.frames
                    matches = trigger.command is None or command == trigger.command
                    if matches and count >= (trigger.frame or 1):
                        pipe.fire_at[kind] = offset + trigger.offset
                        pipe.armed[kind] = trigger
        end = start + len(chunk)
        fire = min(pipe.fire_at.items(), key=lambda kv: kv[1], default=None)
        if fire is not None and fire[1] <= end:
            kind, at = fire
            cut = max(0, at - start)
            self._forward(pipe, chunk[:cut])
            del pipe.fire_at[kind]
            pipe.link.fired[kind] = True
            self._queue_fault(pipe, kind)
            if kind == "reset":
                return True
            self._counts["discarded"] += len(chunk) - cut
            return False
        keep = end
        if self._frame_triggers(pipe):
            pending = pipe.counter.pending
            if pending is not None:
                # The command of the frame from here is not known yet
                keep = max(start, pending)
        self._forward(pipe, chunk[: keep - start])
        pipe.holdback = chunk[keep - start :]
        return False

    def _forward(self, pipe: _Pipe, data: bytes) -> None:
        if data:
            pipe.buffer.append([anyio.current_time(), data, 0])
            pipe.buffered += len(data)
            pipe.wake()

    async def _writer(self, pipe: _Pipe) -> None:
        link = pipe.link
        key = "bytes_up" if pipe.direction == UP else "bytes_down"
        try:
            while True:
                if not pipe.buffer or pipe.stalled:
                    pipe.changed = anyio.Event()
                    await pipe.changed.wait()
                    continue
                item = pipe.buffer[0]
                stamp, data, done = item
                if isinstance(data, Fault):
                    pipe.buffer.popleft()
                    if data.kind == "reset":
                        self._reset(link)
                        return
                    if data.kind == "half_close":
                        self._faults["half_close"] += 1
                    # uvloop raises RuntimeError for a transport the peer already closed
                    with contextlib.suppress(*_IO_ERRORS, RuntimeError):
                        await pipe.dst.send_eof()
                    other = link.pipes[UP if pipe.direction == DOWN else DOWN]
                    if other.ended and not other.buffer:
                        link.tg.cancel_scope.cancel()
                    return
                due = stamp + self._latency.get(pipe.direction, 0.0)
                now = anyio.current_time()
                if due > now:
                    pipe.changed = anyio.Event()
                    with anyio.move_on_after(due - now):
                        await pipe.changed.wait()
                    continue
                rate = self._throttle.get(pipe.direction, 0.0)
                if pipe.direction in self._split:
                    size = 1
                elif rate:
                    # About 50 sends per second
                    size = max(1, int(rate / 50))
                else:
                    size = len(data) - done
                piece = data[done : done + size] if size < len(data) - done or done else data
                n = len(piece)
                # Counted as handed over, so a peer that has read it sees it counted
                self._counts[key] += n
                await pipe.dst.send(piece)
                item[2] = done + n
                if item[2] >= len(data):
                    pipe.buffer.popleft()
                    pipe.buffered -= len(data)
                    if pipe.buffered < _HIGH_WATER:
                        pipe.space.set()
                if rate:
                    await anyio.sleep(n / rate)
        except _IO_ERRORS:
            self._peer_reset(link)


# Shown as stompfast.testing.X (see the end of _broker.py).
FaultProxy.__module__ = ProxyStats.__module__ = "stompfast.testing"
