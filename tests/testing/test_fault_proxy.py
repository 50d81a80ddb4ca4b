"""The fault-injection proxy (``stompfast.testing.FaultProxy``): one test per fault kind.

Byte-level faults are checked between two raw anyio sockets (a client and a
plain TCP server that records what it reads), frame faults with the in-process
broker; every async test runs on asyncio, asyncio+uvloop and trio.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from importlib.metadata import version as anyio_version
from typing import Any, AsyncIterator, List, Tuple

import anyio
import anyio.abc
import pytest
import sniffio
from rawstomp import Closed, RawClient

from stompfast import AsyncClient, Client, FrameScanner, ReconnectPolicy, encode_frame
from stompfast.testing import Broker, FaultProxy, ProxyStats, Trigger
from stompfast.testing._faults import FrameCounter

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5


class Server:
    """A plain TCP server on loopback: hands each accepted stream to the test."""

    def __init__(self) -> None:
        self.send_accepted, self.accepted = anyio.create_memory_object_stream(10)
        self.port = 0

    async def next(self) -> Any:
        with anyio.fail_after(WAIT):
            return await self.accepted.receive()


@contextlib.asynccontextmanager
async def server_and_proxy(**faults: Any) -> AsyncIterator[Tuple[Server, FaultProxy]]:
    server = Server()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: Any) -> None:
        await server.send_accepted.send(stream)
        await anyio.sleep_forever()  # the test owns the stream

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        async with FaultProxy(("127.0.0.1", server.port), **faults) as proxy:
            yield server, proxy
            assert proxy.errors == []  # peers' resets and EOFs end links; nothing else may fail in one
        tg.cancel_scope.cancel()


async def read_exactly(stream: Any, n: int) -> Tuple[bytes, List[int]]:
    """Read n bytes; also return the size of each read."""
    data, sizes = b"", []
    with anyio.fail_after(WAIT):
        while len(data) < n:
            chunk = await stream.receive()
            sizes.append(len(chunk))
            data += chunk
    return data, sizes


# anyio before 4.13 (the newest for Python 3.9 is 4.12) closes an asyncio socket with
# write_eof() before close(), so the proxy's reset sends a FIN ahead of its RST there and
# the peer reads an EOF first (docs/testing.md says so). Trio, and asyncio with a newer
# anyio, abort the socket: an RST alone.
FIN_BEFORE_RST = tuple(int(x) for x in anyio_version("anyio").split(".")[:2]) < (4, 13)


async def read_until_closed(stream: Any) -> Tuple[bytes, str]:
    """Everything until the stream ends; and how: ``"eof"`` (FIN) or ``"reset"`` (RST).

    Where the proxy's reset sends a FIN first (``FIN_BEFORE_RST``, asyncio only), the
    EOF is read on to the RST that follows it (an orderly close gets no RST: "eof").
    """
    data = b""
    with anyio.fail_after(WAIT):
        while True:
            try:
                data += await stream.receive()
            except anyio.EndOfStream:
                if FIN_BEFORE_RST and sniffio.current_async_library() == "asyncio":
                    return data, await _rst_after_fin(stream)
                return data, "eof"
            except (anyio.BrokenResourceError, ConnectionResetError):
                return data, "reset"


async def _rst_after_fin(stream: Any) -> str:
    """After an EOF: "reset" if an RST follows within a moment (the socket's pending error), else "eof"."""
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    for _ in range(25):
        # an RST received in CLOSE_WAIT leaves EPIPE pending (ECONNRESET in other states)
        if raw.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) in (errno.EPIPE, errno.ECONNRESET):
            return "reset"
        await anyio.sleep(0.02)
    return "eof"


async def open_pair(server: Server, proxy: FaultProxy) -> Tuple[Any, Any]:
    client = await anyio.connect_tcp("127.0.0.1", proxy.port)
    upstream = await server.next()
    return client, upstream


# ------------------------------------------------------------------ plain forwarding


async def test_bytes_pass_unchanged_both_ways_and_are_counted():
    async with server_and_proxy() as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        payload = bytes(range(256)) * 400  # 100 KiB, every byte value
        await client.send(payload)
        assert (await read_exactly(upstream, len(payload)))[0] == payload
        await upstream.send(b"pong" * 1000)
        assert (await read_exactly(client, 4000))[0] == b"pong" * 1000
        stats = proxy.stats
        assert isinstance(stats, ProxyStats)
        assert (stats.connections, stats.open_connections) == (1, 1)
        assert (stats.bytes_up, stats.bytes_down, stats.faults_injected) == (len(payload), 4000, 0)
        # a FIN from the client reaches the server as a FIN; the reverse ends the link
        await client.send_eof()
        assert await read_until_closed(upstream) == (b"", "eof")
        await upstream.send(b"last")
        await upstream.send_eof()
        assert await read_until_closed(client) == (b"last", "eof")
        with anyio.fail_after(WAIT):
            while proxy.connections:
                await anyio.sleep(0.01)


# ------------------------------------------------------------------ lasting faults


# uvloop's clock (libuv's) counts whole milliseconds and its timers may fire up to one tick
# before a delay measured with it is whole: a 0.2 s delay can read 0.1999...
CLOCK_TICK = 0.002


async def test_latency_delays_each_direction_without_serialising_chunks():
    async with server_and_proxy(latency=0.2) as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        t0 = anyio.current_time()
        for i in range(5):  # five chunks in a row: each is delayed, not delayed five times
            await client.send(b"%d" % i)
            await anyio.sleep(0.01)
        assert (await read_exactly(upstream, 5))[0] == b"01234"
        up = anyio.current_time() - t0
        assert 0.2 - CLOCK_TICK <= up < 0.2 + 0.05 * 5 + 0.3, up
        t0 = anyio.current_time()
        await upstream.send(b"x")
        await read_exactly(client, 1)
        down = anyio.current_time() - t0
        assert down >= 0.2 - CLOCK_TICK, down
        proxy.set(latency={"down": 0})  # changed at run time, per direction
        t0 = anyio.current_time()
        await upstream.send(b"y")
        await read_exactly(client, 1)
        assert anyio.current_time() - t0 < 0.15


async def test_throttle_caps_the_byte_rate():
    async with server_and_proxy(throttle={"up": 20_000}) as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        t0 = anyio.current_time()
        await client.send(b"a" * 10_000)
        data, sizes = await read_exactly(upstream, 10_000)
        took = anyio.current_time() - t0
        assert data == b"a" * 10_000
        assert took >= 0.4, took  # 10,000 bytes at 20,000 B/s: 0.5 s
        assert len(sizes) >= 5, sizes  # forwarded in small slices (rate / 50), not in one write
        t0 = anyio.current_time()
        await upstream.send(b"b" * 100_000)  # the other direction is not throttled
        await read_exactly(client, 100_000)
        assert anyio.current_time() - t0 < 0.4


async def test_split_forwards_one_byte_segments():
    payload = b"SEND\ndestination:/queue/a\n\n" + b"x" * 2000 + b"\0"
    async with server_and_proxy(split="up") as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        await client.send(payload)
        data, sizes = await read_exactly(upstream, len(payload))
        assert data == payload
        assert len(sizes) > 20, sizes  # one write would arrive in one or two reads
        proxy.set(split=None)
        await client.send(payload)
        data, sizes = await read_exactly(upstream, len(payload))
        assert data == payload and len(sizes) <= 3


@pytest.mark.parametrize("direction", ["up", "down"])
async def test_stall_holds_a_direction_until_resumed(direction):
    async with server_and_proxy(stall=direction) as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        sender, receiver = (client, upstream) if direction == "up" else (upstream, client)
        other_sender, other_receiver = (upstream, client) if direction == "up" else (client, upstream)
        await sender.send(b"held")
        await other_sender.send(b"flows")  # the other direction is not stalled
        assert (await read_exactly(other_receiver, 5))[0] == b"flows"
        with anyio.move_on_after(0.3) as scope:
            await receiver.receive()
        assert scope.cancelled_caught, "a stalled direction forwarded data"
        assert proxy.stats.faults == {"stall": 1}
        proxy.set(stall=None)
        assert (await read_exactly(receiver, 4))[0] == b"held"


# ------------------------------------------------------------------ half-close


async def test_half_close_down_sends_fin_to_the_client_while_up_still_flows():
    async with server_and_proxy() as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        await upstream.send(b"before")
        assert (await read_exactly(client, 6))[0] == b"before"
        proxy.half_close_all("down")
        assert await read_until_closed(client) == (b"", "eof")
        await client.send(b"still up")  # the client may still talk to the broker
        assert (await read_exactly(upstream, 8))[0] == b"still up"
        await upstream.send(b"lost")  # what the broker sends now is discarded
        with anyio.fail_after(WAIT):
            while proxy.stats.discarded_bytes < 4:
                await anyio.sleep(0.01)
        assert proxy.stats.faults == {"half_close": 1}


async def test_half_close_up_at_a_byte_count():
    async with server_and_proxy(half_close=Trigger(bytes=10, direction="up")) as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        await client.send(b"0123456789abcdef")
        assert await read_until_closed(upstream) == (b"0123456789", "eof")
        await upstream.send(b"answer")  # the broker can still answer
        assert (await read_exactly(client, 6))[0] == b"answer"
        assert proxy.stats.faults == {"half_close": 1}


# ------------------------------------------------------------------ reset


async def test_reset_at_a_byte_count_sends_rst_both_ways_after_exactly_n_bytes():
    async with server_and_proxy(reset=Trigger(bytes=100, direction="down")) as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        await upstream.send(b"a" * 60)
        assert (await read_exactly(client, 60))[0] == b"a" * 60  # below the count: forwarded
        await upstream.send(b"b" * 240)
        assert await read_until_closed(client) == (b"b" * 40, "reset")
        assert (await read_until_closed(upstream))[1] == "reset"
        stats = proxy.stats
        assert stats.faults == {"reset": 1} and stats.faults_injected == 1 and stats.bytes_down == 100
        # every new link gets the same fault; bytes=0 resets before anything is forwarded
        proxy.set(reset=Trigger(bytes=0, direction="up"))
        client, upstream = await open_pair(server, proxy)
        assert await read_until_closed(client) == (b"", "reset")
        assert proxy.stats.faults == {"reset": 2}


async def test_a_byte_count_already_passed_fires_at_once_on_an_idle_link():
    async with server_and_proxy() as (server, proxy):
        client, upstream = await open_pair(server, proxy)
        await upstream.send(b"12345")
        assert (await read_exactly(client, 5))[0] == b"12345"
        proxy.set(half_close=Trigger(bytes=3, direction="down"))  # nobody sends anything now
        assert await read_until_closed(client) == (b"", "eof")
        proxy.set(reset=Trigger(bytes=0, direction="up"))
        assert (await read_until_closed(upstream))[1] == "reset"
        assert proxy.stats.faults == {"half_close": 1, "reset": 1}


async def test_reset_after_a_time():
    async with server_and_proxy(reset=Trigger(seconds=0.3)) as (server, proxy):
        t0 = anyio.current_time()
        client, upstream = await open_pair(server, proxy)
        await upstream.send(b"hi")
        assert await read_until_closed(client) == (b"hi", "reset")
        assert 0.25 <= anyio.current_time() - t0 < 2
        assert proxy.stats.faults == {"reset": 1}


async def test_reset_all_at_run_time_resets_every_open_link_and_new_ones_work():
    async with server_and_proxy() as (server, proxy):
        pairs = [await open_pair(server, proxy) for _ in range(3)]
        with anyio.fail_after(WAIT):
            while proxy.connections < 3:
                await anyio.sleep(0.01)
        proxy.reset_all()
        for client, upstream in pairs:
            assert (await read_until_closed(client))[1] == "reset"
            assert (await read_until_closed(upstream))[1] == "reset"
        client, upstream = await open_pair(server, proxy)
        await client.send(b"again")
        assert (await read_exactly(upstream, 5))[0] == b"again"
        assert proxy.stats.faults == {"reset": 3} and proxy.stats.connections == 4


async def test_an_unreachable_target_resets_the_client():
    with socket_port_closed() as port:
        async with FaultProxy(("127.0.0.1", port)) as proxy:
            client = await anyio.connect_tcp("127.0.0.1", proxy.port)
            assert (await read_until_closed(client))[1] in ("reset", "eof")
            assert proxy.stats.upstream_failures == 1


@contextlib.contextmanager
def socket_port_closed():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    yield port


# ------------------------------------------------------------------ frames (with the in-process broker)


async def test_reset_before_a_chosen_command_the_broker_still_got_the_frame(stomp_broker):
    async with FaultProxy(stomp_broker.url, reset=Trigger(command="RECEIPT")) as proxy:
        c = await RawClient.connected(proxy.port)  # CONNECTED passes
        await c.send("SEND", {"destination": "/queue/f", "receipt": "r1"}, b"body")
        with pytest.raises(Closed):
            await c.expect("RECEIPT")
        await stomp_broker.wait_for(lambda: stomp_broker.queue_depth("/queue/f") == 1)
        stats = proxy.stats
        assert stats.frames_down == {"CONNECTED": 1, "RECEIPT": 1}  # read, but never forwarded
        assert stats.frames_up == {"CONNECT": 1, "SEND": 1}
        assert stats.faults == {"reset": 1}


async def test_reset_mid_way_through_the_nth_frame(stomp_broker):
    for i in range(3):
        stomp_broker.publish("/queue/n", b"m%d" % i + b"\0" * 50)  # NULs in bodies: content-length counts
    # cut the second MESSAGE frame down after 20 bytes
    async with FaultProxy(stomp_broker.url, reset=Trigger(command="MESSAGE", frame=2, offset=20)) as proxy:
        client = await anyio.connect_tcp("127.0.0.1", proxy.port)
        await client.send(encode_frame("CONNECT", {"accept-version": "1.2", "host": "/"}))
        await client.send(encode_frame("SUBSCRIBE", {"id": "0", "destination": "/queue/n", "receipt": "s"}))
        data, how = await read_until_closed(client)
    assert how == "reset"
    cut = data.rindex(b"MESSAGE\n")  # where the cut frame begins
    assert len(data) - cut == 20  # exactly offset bytes of it were forwarded
    frames = FrameScanner().feed(data[:cut])  # and every frame before it, whole
    assert [f.command for f in frames if f.command != "RECEIPT"] == ["CONNECTED", "MESSAGE"]
    assert [f.body for f in frames if f.command == "MESSAGE"] == [b"m0" + b"\0" * 50]
    assert proxy.stats.faults == {"reset": 1}


async def test_half_close_at_a_frame_and_the_client_reconnects(stomp_broker):
    events: List[str] = []
    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
    async with FaultProxy(stomp_broker.url, half_close=Trigger(command="MESSAGE", frame=2)) as proxy:
        async with AsyncClient(proxy.url, heart_beat=(0, 0), reconnect=policy,
                               on_event=lambda e: events.append(e.kind)) as client:
            for i in range(3):
                await client.send("/queue/h", b"%d" % i, receipt=True)
            # a prefetch of one: each link delivers (and gets the ack of) one message before its second
            async with client.subscribe("/queue/h", ack="client-individual", buffer_size=1) as sub:
                got = []
                with anyio.fail_after(WAIT):
                    async for m in sub:
                        if m.body not in got:
                            got.append(m.body)
                        with contextlib.suppress(Exception):
                            await m.ack()
                        if len(got) == 3:
                            break
    assert sorted(got) == [b"0", b"1", b"2"]
    assert "disconnected" in events and client.reconnects >= 1
    assert proxy.stats.faults.get("half_close", 0) >= 1


def test_frame_counter_finds_the_same_frames_at_every_split_point():
    frames = [
        encode_frame("CONNECTED", {"version": "1.2"}),
        b"\n\r\n\n",  # heart-beats between frames
        encode_frame("MESSAGE", {"destination": "/q", "message-id": "1"}, b"a\0b\0c"),  # NULs in the body
        b"SEND\r\ndestination:/q\r\n\r\nno length\0",  # CRLF lines, body up to the NUL
        encode_frame("RECEIPT", {"receipt-id": "x"}),
        b"ERROR\ncontent-length:3\ncontent-length:99\n\nabc\0",  # the first content-length wins
    ]
    stream = b"".join(frames)
    expected = [(0, "CONNECTED")]
    pos = len(frames[0]) + len(frames[1])
    for f, cmd in zip(frames[2:], ["MESSAGE", "SEND", "RECEIPT", "ERROR"]):
        expected.append((pos, cmd))
        pos += len(f)
    whole = FrameCounter()
    assert whole.feed(stream) == expected
    for cut in range(len(stream) + 1):
        c = FrameCounter()
        assert c.feed(stream[:cut]) + c.feed(stream[cut:]) == expected, cut
    c = FrameCounter()
    assert [f for i in range(len(stream)) for f in c.feed(stream[i : i + 1])] == expected


def test_trigger_and_fault_arguments_are_checked():
    for bad in [dict(), dict(bytes=1, seconds=1), dict(bytes=-1), dict(frame=0), dict(bytes=1, offset=3),
                dict(seconds=1, direction="sideways")]:
        with pytest.raises(ValueError):
            Trigger(**bad)
    assert Trigger(command="RECEIPT").frame == 1
    with pytest.raises(ValueError):
        FaultProxy("127.0.0.1:1", stall="left")
    with pytest.raises(ValueError):
        FaultProxy("127.0.0.1:1", latency=-1)
    with pytest.raises(ValueError):
        FaultProxy("no-port")
    proxy = FaultProxy("stomp://guest:secret@127.0.0.1:61613/")
    assert proxy.target == ("127.0.0.1", 61613)
    with pytest.raises(TypeError):
        proxy.set(nonsense=1)
    with pytest.raises(ValueError):
        proxy.set(latency=0.5, stall="sideways")
    assert proxy._latency == {"up": 0.0, "down": 0.0}  # nothing of a refused change is applied


# ------------------------------------------------------------------ in a thread, for synchronous code


def test_in_thread_with_the_blocking_client(anyio_backend):
    backend, options = anyio_backend if isinstance(anyio_backend, tuple) else (anyio_backend, {})
    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
    with Broker.in_thread() as broker, FaultProxy.in_thread(
        broker.url, latency=0.05, backend=backend, backend_options=options
    ) as proxy:
        rewritten = proxy.rewrite("stomp://guest:pw@example.com:61613/vh")
        assert rewritten == f"stomp://guest:pw@127.0.0.1:{proxy.port}/vh"
        with Client(proxy.url, heart_beat=(0, 0), reconnect=policy) as client:
            t0 = time.monotonic()
            client.send("/queue/t", "one", receipt=True, timeout=WAIT)
            assert time.monotonic() - t0 >= 0.1  # latency both ways
            proxy.reset_all()  # from this thread, into the proxy's loop
            deadline = time.monotonic() + WAIT
            while client.reconnects < 1:
                assert time.monotonic() < deadline, "no reconnect after the reset"
                time.sleep(0.01)
            client.send("/queue/t", "two", receipt=True, timeout=WAIT)
        assert proxy.stats.faults == {"reset": 1}
        assert broker.queue_depth("/queue/t") == 2


def test_exported_lazily_from_stompfast_testing():
    import subprocess
    import sys

    code = (
        "import sys, stompfast.testing as t\n"
        "assert 'stompfast.testing._proxy' not in sys.modules  # the pytest plugin's import stays cheap\n"
        "assert {'FaultProxy', 'ProxyStats', 'Trigger'} <= set(t.__all__)\n"
        "assert t.FaultProxy.__module__ == 'stompfast.testing'  # shown by the name users import\n"
        "assert 'stompfast.testing._proxy' in sys.modules  # loaded on first use\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
