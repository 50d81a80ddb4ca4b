"""TLS and STOMP over WebSocket, hermetic: the in-process broker behind TLS and behind a wsproto bridge.

Certificates come from trustme (a throwaway CA per session). Every test runs on
asyncio, asyncio+uvloop and trio. The same features against real RabbitMQ are in
tests/integration/test_tls_ws.py.
"""

from __future__ import annotations

import ssl
import sys

import anyio
import pytest
import trustme

from stompfast import (
    AsyncClient,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    TLSError,
)
from stompfast._config import parse_url
from stompfast._websocket import subprotocols
from stompfast.testing import Broker

sys.path.insert(0, __import__("os").path.dirname(__file__))
from wsbridge import WSBridge  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def server_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return ctx


@pytest.fixture(scope="session")
def client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


async def round_trip(client: AsyncClient, size: int = 10) -> None:
    body = bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)
    async with client.subscribe("/queue/tls-ws", ack="client-individual") as sub:
        await client.send("/queue/tls-ws", body, receipt=True)
        with anyio.fail_after(WAIT):
            message = await sub.receive()
        assert message.body == body
        await message.ack(receipt=True)


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, scheme, port, vhost, path",
    [
        ("stomp+ssl://h", "ssl", 61614, "/", "/"),
        ("stomp+tls://h:1/vh", "ssl", 1, "vh", "/"),
        ("ssl://h:61612", "ssl", 61612, "/", "/"),
        ("SSL://h:61612", "ssl", 61612, "/", "/"),
        ("ws://guest:guest@127.0.0.1:15674/ws", "ws", 15674, "/", "/ws"),
        ("ws://h", "ws", 80, "/", "/"),
        ("wss://h/stomp%20x?a=1", "wss", 443, "/", "/stomp%20x?a=1"),
    ],
)
def test_url_schemes(url, scheme, port, vhost, path):
    ep = parse_url(url)
    assert (ep.scheme, ep.port, ep.virtual_host, ep.path) == (scheme, port, vhost, path)
    assert ep.tls == (scheme in ("ssl", "wss"))
    assert "guest:guest" not in repr(ep)


def test_subprotocols_follow_the_offered_versions():
    assert subprotocols(("1.0", "1.1", "1.2")) == ["v12.stomp", "v11.stomp", "v10.stomp"]
    assert subprotocols(("1.1",)) == ["v11.stomp"]
    client = AsyncClient("ws://h/ws", versions=("1.0", "1.2"))
    assert subprotocols(client._link.protocol.versions) == ["v12.stomp", "v10.stomp"]


def _tls(client):
    return client._settings.tls(client.endpoint)


def test_tls_options_are_checked_before_any_io():
    with pytest.raises(ConfigurationError, match="server_hostname"):
        AsyncClient("stomp://h", server_hostname="x")
    with pytest.raises(ConfigurationError, match="ssl must be"):
        AsyncClient("stomp://h", ssl="yes")
    assert _tls(AsyncClient("stomp+ssl://h", ssl=False)) is False
    assert _tls(AsyncClient("stomp://h", ssl=True)) is True
    assert _tls(AsyncClient("ssl://h")) is True
    assert _tls(AsyncClient("wss://h")) is True


def test_websocket_without_wsproto_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wsproto", None)  # import fails
    with pytest.raises(ConfigurationError, match=r"stompfast\[ws\]"):
        AsyncClient("ws://127.0.0.1:15674/ws")
    AsyncClient("stomp://127.0.0.1")  # TCP does not need it


# -- TLS -----------------------------------------------------------------------------------


async def test_tls_round_trip(server_ctx, client_ctx):
    async with Broker(ssl_context=server_ctx) as broker:
        assert broker.url.startswith("stomp+ssl://")
        async with AsyncClient(broker.url, ssl=client_ctx, heart_beat=(0, 0)) as client:
            assert client.version == "1.2"
            await round_trip(client, 300_000)


async def test_which_transports_a_thread_may_write(server_ctx, client_ctx, anyio_backend_name):
    # The blocking client's thread writes a plain TCP socket itself, and a WebSocket on
    # asyncio too (the layer frames it under the transport's lock); a TLS connection's
    # state (the SSL object) belongs to the loop, and so does trio's WebSocket stream:
    # there the transport declines and a thread's send is left to the loop.
    from stompfast._transport import WebSocketSpec, open_transport

    async with Broker(ssl_context=server_ctx, heart_beat=(0, 0)) as broker:
        transport = await open_transport("127.0.0.1", broker.port, ssl_context=client_ctx)
        assert not getattr(transport, "direct_ok", False)
        await transport.aclose()
        async with AsyncClient(broker.url, ssl=client_ctx, heart_beat=(0, 0)) as client:
            sent = await anyio.to_thread.run_sync(
                client.send_from_thread, "/queue/tls-direct", b"x", None, None, lambda receipt: None
            )
            assert sent is None
            await client.send("/queue/tls-direct", b"y", receipt=True)
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        transport = await open_transport("127.0.0.1", bridge.port, websocket=WebSocketSpec("/ws", ["v12.stomp"]))
        assert getattr(transport, "direct_ok", False) is (anyio_backend_name == "asyncio")
        await transport.aclose()


async def test_thread_writes_over_websocket_keep_their_order_between_pings(anyio_backend_name, anyio_backend):
    # A blocking client over WebSocket mixes queued sends with receipted ones (written by
    # its thread where it can) while the bridge pings every 2 ms (pongs written by the
    # layer in the loop): every frame must arrive whole and in the order of the calls,
    # every ping be answered, and on asyncio the thread must have written some itself.
    from stompfast import Client

    options = anyio_backend[1] if isinstance(anyio_backend, tuple) else {}
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, ping_every=0.002) as bridge:

        def run() -> list:
            with Client(bridge.url(), heart_beat=(0, 0), reconnect=False, backend=anyio_backend_name,
                        backend_options=options or None) as c:
                with c.subscribe("/queue/ws-order") as sub:
                    expected = []
                    for i in range(300):
                        body = b"%d" % i + b"." * (i * 37 % 3000)
                        expected.append(body)
                        c.send("/queue/ws-order", body, receipt=(i % 4 == 3), timeout=WAIT)
                    got = [sub.receive(timeout=WAIT).body for _ in expected]
                assert got == expected
            return expected

        await anyio.to_thread.run_sync(run)
        receipts = [f.headers.get("receipt", "") for f in broker.received if f.command == "SEND"]
        by_thread = [r for r in receipts if r.startswith("t")]
        if anyio_backend_name == "asyncio":
            assert by_thread, "the calling thread should have written some SENDs itself"
        else:
            assert not by_thread
        assert bridge.pings_sent and len(bridge.pongs) >= len(bridge.pings_sent) - 2


@pytest.mark.parametrize(
    "anyio_backend",
    [pytest.param(("asyncio", {}), id="asyncio"), pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop")],
)
async def test_a_threads_partial_websocket_write_goes_out_as_socket_bytes(anyio_backend):
    # (asyncio only: trio's WebSocket stream takes no thread writes.) What a thread's
    # partial write leaves is already framed: the next write sends it to the socket as
    # it is (not framed a second time), then its own frame.
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0)) as client:
            transport = client._link.transport
            first = b"SEND\ndestination:/queue/ws-tail\n\nfirst\x00"
            # as if a thread had framed it and the kernel had taken none of it
            with transport._lock:
                transport._tail = transport._on_the_wire(first)
            await client.send("/queue/ws-tail", b"second", receipt=True)
            async with client.subscribe("/queue/ws-tail") as sub:
                with anyio.fail_after(WAIT):
                    bodies = [(await sub.receive()).body for _ in range(2)]
            assert bodies == [b"first", b"second"]


async def test_ssl_keyword_turns_tls_on_for_a_stomp_url(server_ctx, client_ctx):
    async with Broker(ssl_context=server_ctx) as broker:
        async with AsyncClient(f"stomp://127.0.0.1:{broker.port}", ssl=client_ctx, heart_beat=(0, 0)) as client:
            await round_trip(client)


async def test_default_context_refuses_a_private_ca(server_ctx):
    async with Broker(ssl_context=server_ctx) as broker:
        with pytest.raises(TLSError) as info:
            await AsyncClient(broker.url, heart_beat=(0, 0)).__aenter__()
        err = info.value
        assert isinstance(err, ConnectError)
        assert "issuer" in err.verify_message and "issuer" in str(err)
        assert err.reason == "CERTIFICATE_VERIFY_FAILED"
        assert isinstance(err.__cause__, ssl.SSLCertVerificationError)
        await broker.wait_for(lambda: broker.stats.tls_handshakes_failed == 1)
        assert broker.stats.connections_accepted == 0


async def test_a_context_trusting_another_ca_is_refused(server_ctx):
    other = ssl.create_default_context()
    trustme.CA().configure_trust(other)
    async with Broker(ssl_context=server_ctx) as broker:
        with pytest.raises(TLSError, match="certificate was refused"):
            async with AsyncClient(broker.url, ssl=other, heart_beat=(0, 0)):
                pass


async def test_host_name_mismatch_is_refused(server_ctx, client_ctx):
    async with Broker(ssl_context=server_ctx) as broker:
        with pytest.raises(TLSError) as info:
            async with AsyncClient(broker.url, ssl=client_ctx, server_hostname="wrong.example", heart_beat=(0, 0)):
                pass
        assert "wrong.example" in info.value.verify_message
        assert "server_hostname" in str(info.value)


async def test_server_hostname_is_sent_as_sni_and_checked(ca, client_ctx):
    seen = []
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("broker.example").configure_cert(ctx)  # not valid for 127.0.0.1
    ctx.sni_callback = lambda sock, name, _ctx: seen.append(name)
    async with Broker(ssl_context=ctx) as broker:
        async with AsyncClient(broker.url, ssl=client_ctx, server_hostname="broker.example", heart_beat=(0, 0)) as c:
            await round_trip(c)
        with pytest.raises(TLSError, match="mismatch"):
            async with AsyncClient(broker.url, ssl=client_ctx, heart_beat=(0, 0)):
                pass
    assert seen[0] == "broker.example"


async def test_client_certificate(ca, server_ctx, client_ctx):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED
    mine = ssl.create_default_context()
    ca.configure_trust(mine)
    ca.issue_cert("client@example").configure_cert(mine)  # ctx.load_cert_chain(certfile, keyfile)
    async with Broker(ssl_context=ctx) as broker:
        async with AsyncClient(broker.url, ssl=mine, heart_beat=(0, 0)) as client:
            await round_trip(client)
        # without one the broker ends the session (TLS 1.3: seen after the handshake, on the
        # first read: an alert (TLSError) or a bare close (ConnectError), depending on the loop)
        with pytest.raises(ConnectError, match="client certificate"):
            async with AsyncClient(broker.url, ssl=client_ctx, heart_beat=(0, 0)):
                pass


async def test_tls_client_on_a_plain_port(client_ctx):
    async with Broker() as broker:
        with pytest.raises(TLSError, match="TLS port"):
            async with AsyncClient(broker.url, ssl=client_ctx, heart_beat=(0, 0), connect_timeout=5):
                pass


async def test_plain_client_on_a_tls_port(server_ctx):
    async with Broker(ssl_context=server_ctx) as broker:
        with pytest.raises(ConnectError) as info:
            async with AsyncClient(broker.url, ssl=False, heart_beat=(0, 0), connect_timeout=5):
                pass
        assert not isinstance(info.value, TLSError)


async def test_a_silent_tls_server_times_out_and_cancellation_is_not_wrapped(client_ctx):
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepted = []

        async def hold(stream):
            accepted.append(stream)
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, hold)
            with pytest.raises(ConnectTimeout):
                async with AsyncClient(f"stomp+ssl://127.0.0.1:{port}", ssl=client_ctx, connect_timeout=0.3):
                    pass
            with anyio.move_on_after(0.3) as scope:
                async with AsyncClient(f"stomp+ssl://127.0.0.1:{port}", ssl=client_ctx, connect_timeout=10):
                    pass
            assert scope.cancelled_caught
            tg.cancel_scope.cancel()


# -- WebSocket -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [False, True], ids=["binary", "text"])
async def test_ws_round_trip(text):
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, text=text) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0)) as client:
            assert client.version == "1.2"
            await round_trip(client, 1 << 20)
            body = "ünïcode ✓ " * 1000
            async with client.subscribe("/queue/text") as sub:
                await client.send("/queue/text", body, receipt=True)
                with anyio.fail_after(WAIT):
                    assert (await sub.receive()).text == body
        request = bridge.requests[0]
        assert request.subprotocols == ["v12.stomp", "v11.stomp", "v10.stomp"]
        assert request.target == "/ws"
        assert request.host == f"127.0.0.1:{bridge.port}"
        assert {kind for kind, _ in bridge.client_messages} == {"bytes"}
        # the close handshake: our close frame (1000), answered
        await broker.wait_for(lambda: bridge.closed_connections == 1)
        assert bridge.client_close_codes == [1000]
        connect = [f for f in broker.received if f.command == "CONNECT"][0]
        assert connect.headers["host"] == "/"  # the URL path is not the virtual host


@pytest.mark.parametrize("split, fragment", [(13, None), (None, 7), (5, 3), (1, None)])
async def test_ws_messages_split_and_fragmented(split, fragment):
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, split=split, fragment=fragment) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0)) as client:
            size = 2000 if split == 1 else 70_000
            await round_trip(client, size)
            # several frames per WebSocket message: the bridge relays whole broker reads
            async with client.subscribe("/queue/many") as sub:
                for i in range(20):
                    await client.send("/queue/many", b"m%d" % i)
                await client.flush()
                with anyio.fail_after(WAIT):
                    assert [(await sub.receive()).body for _ in range(20)] == [b"m%d" % i for i in range(20)]


ARTEMIS_FRAME_LIMIT = 65536  # Artemis's default webSocketMaxFramePayloadLength


async def _burst(client: AsyncClient, n: int, destination: str) -> None:
    """``n`` small sends written as one burst, then received back in order."""
    bodies = [b"burst-%05d-" % i + b"z" * 200 for i in range(n)]
    # The buffer holds all n and more: the flush's RECEIPT comes after the n messages,
    # and a buffer they fill would stop the reader before it (FlowControlError).
    async with client.subscribe(destination, buffer_size=2 * n) as sub:
        for body in bodies:
            await client.send(destination, body)
        await client.flush()
        with anyio.fail_after(WAIT * 2):
            assert [(await sub.receive()).body for _ in range(n)] == bodies


async def test_ws_large_send_and_burst_stay_under_the_artemis_frame_limit():
    # The bridge drops the connection on a frame over 65,536 bytes, as Artemis does;
    # before the cap, a 300 KiB SEND went out as one WebSocket frame.
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, max_frame=ARTEMIS_FRAME_LIMIT) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0), reconnect=False) as client:
            await round_trip(client, 300 * 1024)
            large = max(bridge.client_frames)
            await _burst(client, 2000, "/queue/ws-burst")
        assert bridge.dropped == 0
        assert large == ARTEMIS_FRAME_LIMIT  # the 300 KiB frame was cut at the cap, not below it
        assert max(bridge.client_frames) <= ARTEMIS_FRAME_LIMIT
        # the burst (2,000 frames of ~240 bytes, ~480 KB) needed several full messages
        assert bridge.client_frames.count(ARTEMIS_FRAME_LIMIT) >= 4 + 6


async def test_ws_a_smaller_cap_splits_frames_and_bursts_finer():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, max_frame=1000) as bridge:
        async with AsyncClient(
            bridge.url(), heart_beat=(0, 0), reconnect=False, websocket_max_message_bytes=1000
        ) as client:
            await round_trip(client, 300 * 1024)
            await _burst(client, 500, "/queue/ws-burst-small")
        assert bridge.dropped == 0
        assert max(bridge.client_frames) == 1000
        assert sum(bridge.client_frames) > 300 * 1024 + 500 * 200
        # no message from the client was over the cap: several per STOMP frame
        assert len(bridge.client_frames) > 300 + 100


async def test_ws_a_cap_above_the_broker_limit_loses_the_connection():
    # The risk the cap removes: with messages allowed past the broker's frame limit,
    # a large SEND ends the connection.
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, max_frame=ARTEMIS_FRAME_LIMIT) as bridge:
        async with AsyncClient(
            bridge.url(), heart_beat=(0, 0), reconnect=False, websocket_max_message_bytes=256 * 1024
        ) as client:
            await round_trip(client, 60_000)  # under the limit: fine
            with pytest.raises(ConnectionLostError):
                with anyio.fail_after(WAIT):
                    await client.send("/queue/ws-big", b"b" * 200_000, receipt=True)
        assert bridge.dropped == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, "65536", None, True])
def test_ws_max_message_bytes_is_checked(bad):
    with pytest.raises(ConfigurationError, match="websocket_max_message_bytes"):
        AsyncClient("ws://h/ws", websocket_max_message_bytes=bad)


def test_ws_max_message_bytes_default_is_artemis_limit():
    assert AsyncClient("ws://h/ws")._settings.websocket_max_message_bytes == ARTEMIS_FRAME_LIMIT
    assert AsyncClient("ws://h/ws", websocket_max_message_bytes=1)._settings.websocket_max_message_bytes == 1


async def test_ws_versions_offer_only_their_subprotocols():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        async with AsyncClient(bridge.url(), versions=("1.1",), heart_beat=(0, 0)) as client:
            assert client.version == "1.1"
        assert bridge.requests[0].subprotocols == ["v11.stomp"]


async def test_ws_virtual_host_keyword():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        async with AsyncClient(bridge.url(), virtual_host="vh1", heart_beat=(0, 0)):
            pass
        assert [f for f in broker.received if f.command == "CONNECT"][0].headers["host"] == "vh1"


async def test_ws_pings_are_answered_and_heart_beats_flow():
    async with Broker(heart_beat=(100, 100)) as broker, WSBridge(broker, ping_every=0.05) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(100, 100)) as client:
            await broker.wait_for(lambda: len(bridge.pongs) >= 5 and broker.stats.heartbeats_in >= 2)
            assert client.is_connected
            await round_trip(client)
        assert bridge.pongs == bridge.pings_sent[: len(bridge.pongs)]


@pytest.mark.parametrize("status", [404, 401])
async def test_ws_upgrade_refused(status):
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, refuse=status) as bridge:
        with pytest.raises(ConnectError) as info:
            async with AsyncClient(bridge.url(), heart_beat=(0, 0)):
                pass
        assert info.value.status_code == status
        assert f"HTTP {status}" in str(info.value)
        assert "no WebSocket endpoint here" in str(info.value)


async def test_ws_wrong_path_is_a_404():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        with pytest.raises(ConnectError, match="HTTP 404") as info:
            async with AsyncClient(bridge.url("/nope"), heart_beat=(0, 0)):
                pass
        assert info.value.status_code == 404


async def test_ws_close_from_the_broker_with_an_error_code():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0), reconnect=False) as client:
            async with client.subscribe("/queue/x") as sub:
                bridge.close_all(1011, "going wrong")
                with pytest.raises(ConnectionLostError, match="1011"):
                    with anyio.fail_after(WAIT):
                        await sub.receive()
            assert "going wrong" in str(client.error)


async def test_ws_clean_close_from_the_broker_is_a_lost_connection():
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker) as bridge:
        async with AsyncClient(bridge.url(), heart_beat=(0, 0), reconnect=False) as client:
            async with client.subscribe("/queue/x") as sub:
                bridge.close_all(1000)
                with pytest.raises(ConnectionLostError, match="closed the connection"):
                    with anyio.fail_after(WAIT):
                        await sub.receive()


async def test_ws_connection_refused():
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
    with pytest.raises(ConnectError, match="could not connect"):
        async with AsyncClient(f"ws://127.0.0.1:{port}/ws"):
            pass


async def test_wss_round_trip(server_ctx, client_ctx):
    async with Broker(heart_beat=(0, 0)) as broker, WSBridge(broker, ssl_context=server_ctx) as bridge:
        assert bridge.url().startswith("wss://")
        async with AsyncClient(bridge.url(), ssl=client_ctx, heart_beat=(0, 0)) as client:
            await round_trip(client, 200_000)
        assert bridge.requests[0].host == f"127.0.0.1:{bridge.port}"
        with pytest.raises(TLSError):
            async with AsyncClient(bridge.url(), heart_beat=(0, 0)):
                pass


def test_asyncio_reads_land_in_one_reused_buffer_and_the_view_does_not_outlive_the_call():
    # asyncio hands the plain-TCP and TLS protocol one preallocated buffer per read
    # (recv_into) instead of a fresh 256 KiB bytes object.
    import asyncio

    from stompfast._transport import READ_SIZE, _BufferedProtocol

    proto = _BufferedProtocol()
    assert isinstance(proto, asyncio.BufferedProtocol)
    buf = proto.get_buffer(-1)
    assert len(buf) == READ_SIZE and proto.get_buffer(-1) is buf  # the same buffer every read

    # pull mode (before the client switches to push): chunks are copied out as bytes
    buf[:5] = b"SEND\n"
    proto.buffer_updated(5)
    buf[:3] = b"xyz"  # the next read overwrites the buffer
    assert list(proto.chunks) == [b"SEND\n"] and type(proto.chunks[0]) is bytes

    # push mode: the callback sees exactly the bytes read, as a view released after the call
    seen = []
    proto.on_data = lambda data: seen.append((bytes(data), data))
    buf[:4] = b"abcd"
    proto.buffer_updated(4)
    assert seen[0][0] == b"abcd"
    with pytest.raises(ValueError):  # kept past the call: fails loudly, never reads stale bytes
        bytes(seen[0][1])
