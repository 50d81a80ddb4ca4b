"""AsyncClient against the in-process broker: the API, backpressure, heart-beats and every fault.

Runs on asyncio, asyncio+uvloop and trio (the ``anyio_backend`` fixture).
Real brokers are in tests/integration; this file is where faults are injected.
"""

from __future__ import annotations

import time

import anyio
import pytest

from stompfast import (
    AlreadySettledError,
    AsyncClient,
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    FlowControlError,
    HeartbeatTimeout,
    LocalProtocolError,
    RemoteProtocolError,
    RequestTimeout,
    ServerError,
)
from stompfast.testing import Broker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5


def make(broker: Broker, **kwargs) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    kwargs.setdefault("reconnect", False)  # these tests pin single-connection semantics
    return AsyncClient(broker.url, **kwargs)


async def next_message(sub):
    with anyio.fail_after(WAIT):
        return await sub.receive()


# -- connecting ----------------------------------------------------------------------------


@pytest.mark.parametrize("versions, expected", [(("1.0",), "1.0"), (("1.0", "1.1"), "1.1"), (None, "1.2")])
async def test_connect_negotiates_and_exposes_the_session(versions, expected):
    async with Broker(heart_beat=(200, 200)) as broker:
        kwargs = {"versions": versions} if versions else {}
        async with make(broker, heart_beat=(100, 100), **kwargs) as c:
            assert c.version == expected
            assert c.server == broker.server
            assert c.session in broker.sessions
            assert c.heart_beat == (200, 200)  # MAX(cx, sy), MAX(sx, cy)
            assert c.is_connected
        assert not c.is_connected


async def test_url_credentials_and_virtual_host_reach_connect():
    async with Broker(users={"alice": "s3:cret"}) as broker:
        url = f"stomp://alice:s3%3Acret@127.0.0.1:{broker.port}/my-vhost"
        async with AsyncClient(url, heart_beat=(0, 0), connect_headers={"client-id": "c-1"}):
            pass
        connect = [f for f in broker.received if f.command == "CONNECT"][-1]
        assert connect.headers["login"] == "alice"
        assert connect.headers["passcode"] == "s3:cret"
        assert connect.headers["host"] == "my-vhost"
        assert connect.headers["client-id"] == "c-1"


async def test_default_virtual_host_is_slash():
    async with Broker() as broker:
        async with make(broker):
            pass
        assert [f for f in broker.received if f.command == "CONNECT"][-1].headers["host"] == "/"


async def test_wrong_passcode_is_an_authentication_error():
    async with Broker(users={"alice": "right"}) as broker:
        with pytest.raises(AuthenticationError) as info:
            async with make(broker, login="alice", passcode="wrong"):
                pass
        assert "Bad CONNECT" in str(info.value)


async def test_error_answer_to_connect_carries_the_broker_message():
    async with Broker() as broker:
        broker.answer_connect_with_error("Go away", body="maintenance until noon")
        with pytest.raises(AuthenticationError) as info:
            async with make(broker):
                pass
        assert "Go away" in str(info.value) and "maintenance until noon" in str(info.value)
        assert info.value.body == b"maintenance until noon"


async def test_refused_connection_is_a_connect_error():
    async with Broker() as broker:
        broker.refuse_connections(1)
        with pytest.raises(ConnectError):
            async with make(broker):
                pass
        async with make(broker):  # the next one is accepted
            pass


async def test_nothing_listening_is_a_connect_error():
    async with Broker() as broker:
        port = broker.port
    with pytest.raises(ConnectError) as info:
        async with AsyncClient(f"stomp://127.0.0.1:{port}", heart_beat=(0, 0)):
            pass
    assert not isinstance(info.value, ConnectTimeout)


async def test_no_connected_in_time_is_a_connect_timeout():
    async def silent(stream):
        async with stream:
            await anyio.sleep(WAIT)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        with anyio.fail_after(WAIT):
            with pytest.raises(ConnectTimeout):
                async with AsyncClient(f"stomp://127.0.0.1:{port}", connect_timeout=0.3, heart_beat=(0, 0)):
                    pass
        tg.cancel_scope.cancel()
    await listener.aclose()


@pytest.mark.parametrize(
    "kwargs",
    [{"versions": ["3.0"]}, {"heart_beat": (-1, 0)}, {"connect_timeout": 0}, {"port": 70000},
     {"heartbeat_tolerance": 0.5}],
)
async def test_bad_options_fail_before_any_io(kwargs):
    with pytest.raises(ConfigurationError):
        AsyncClient("stomp://127.0.0.1", **kwargs)


async def test_bad_url_is_a_configuration_error():
    for url in ("http://host", "stomp://", "stomp://h:port"):
        with pytest.raises(ConfigurationError):
            AsyncClient(url)


async def test_using_a_client_before_connect_or_after_close():
    async with Broker() as broker:
        c = make(broker)
        with pytest.raises(ClientClosedError):
            await c.send("/queue/a", b"x")
        async with c:
            pass
        with pytest.raises(ClientClosedError):
            await c.send("/queue/a", b"x")
        with pytest.raises(ClientClosedError):
            await c.connect()


# -- sending and receipts ---------------------------------------------------------------------


async def test_str_body_is_utf8_text_and_bytes_are_untouched():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                await c.send("/queue/a", "héllo")
                await c.send("/queue/a", b"\x00\xff\x00", content_type="application/octet-stream")
                await c.send("/queue/a", "x", content_type="text/x-custom", headers={"k": "a:b\\c\nd"})
                m1, m2, m3 = [await next_message(sub) for _ in range(3)]
        assert (m1.body, m1.content_type) == ("héllo".encode(), "text/plain;charset=utf-8")
        assert (m2.body, m2.content_type) == (b"\x00\xff\x00", "application/octet-stream")
        assert (m3.content_type, m3.headers["k"]) == ("text/x-custom", "a:b\\c\nd")


async def test_send_with_receipt_returns_only_after_the_receipt():
    async with Broker() as broker:
        async with make(broker) as c:
            broker.withhold_receipts()
            with anyio.move_on_after(0.3) as scope:
                await c.send("/queue/a", b"x", receipt=True)
            assert scope.cancelled_caught
            broker.withhold_receipts(False)
            with anyio.fail_after(WAIT):
                receipt = await c.send("/queue/a", b"y", receipt=True)
            assert receipt.done() and receipt.error is None


async def test_pipelined_receipts_and_flush_cover_everything_out_of_order():
    async with Broker() as broker:
        async with make(broker) as c:
            broker.delay_receipts(0.2)
            receipts = [await c.send("/queue/a", b"%d" % i, receipt=True, wait=False) for i in range(20)]
            await c.send("/queue/a", b"plain")
            assert not any(r.done() for r in receipts)
            with anyio.fail_after(WAIT):
                await c.flush()
            assert all(r.done() and r.error is None for r in receipts)
            assert broker.queue_depth("/queue/a") == 21
            with anyio.fail_after(WAIT):
                await c.wait_receipts(receipts + [None])


async def test_error_with_receipt_id_fails_that_receipt_with_server_error_and_every_other():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/ok") as sub:
                broker.withhold_receipts()
                other = await c.send("/queue/ok", b"x", receipt=True, wait=False)
                with anyio.fail_after(WAIT):
                    await broker.wait_for(lambda: broker.stats.receipts_withheld >= 1)
                broker.withhold_receipts(False)
                with pytest.raises(ServerError) as info:
                    with anyio.fail_after(WAIT):
                        await c.send("/nowhere/x", b"x", receipt=True)
                assert info.value.receipt_id is not None
                with pytest.raises(ServerError):
                    await other
                with pytest.raises(ServerError):
                    async for _ in sub:
                        pass
                with pytest.raises(ServerError):
                    await c.send("/queue/ok", b"after")


async def test_connection_loss_fails_every_pending_receipt():
    async with Broker() as broker:
        async with make(broker) as c:
            broker.withhold_receipts()
            receipts = [await c.send("/queue/a", b"x", receipt=True, wait=False) for _ in range(5)]
            with anyio.fail_after(WAIT):
                await broker.wait_for(lambda: broker.stats.frames_in.get("SEND", 0) >= 5)
            broker.drop_connections()
            for r in receipts:
                with pytest.raises(ConnectionLostError):
                    with anyio.fail_after(WAIT):
                        await r
            assert isinstance(c.error, ConnectionLostError)


async def test_cancelled_receipt_wait_leaves_the_client_usable():
    async with Broker() as broker:
        async with make(broker) as c:
            broker.withhold_receipts()
            with anyio.move_on_after(0.1):
                await c.send("/queue/a", b"x", receipt=True)
            broker.withhold_receipts(False)
            with anyio.fail_after(WAIT):
                await c.send("/queue/a", b"y", receipt=True)
            assert c.is_connected


async def test_a_burst_of_sends_is_coalesced_into_few_socket_writes():
    async with Broker() as broker:
        async with make(broker) as c:
            writes = []
            transport = c._link.transport
            if hasattr(transport, "_stream"):  # the anyio stream (trio)
                stream = transport._stream

                class CountingStream:  # the real socket stream, with its writes counted
                    async def send(self, data):
                        writes.append(len(data))
                        await stream.send(data)

                    def __getattr__(self, name):
                        return getattr(stream, name)

                transport._stream = CountingStream()
            else:  # the asyncio transport
                raw = transport._transport

                class CountingTransport:  # the real asyncio transport, with its writes counted
                    def write(self, data):
                        writes.append(len(data))
                        raw.write(data)

                    def __getattr__(self, name):
                        return getattr(raw, name)

                transport._transport = CountingTransport()
            for _ in range(1000):
                await c.send("/queue/a", b"x" * 100)
            with anyio.fail_after(WAIT):
                await c.flush()
            assert broker.queue_depth("/queue/a") == 1000
            assert len(writes) <= 5, writes


async def test_a_long_burst_of_sends_is_written_through_not_queued_to_the_buffer_limit():
    # A burst that never yields: on asyncio the queue is written out from the sending
    # task at the write-through mark, so it stays small; elsewhere it may fill to
    # send_buffer_bytes and then send waits for the writer. Either way nothing is
    # lost or reordered.
    from stompfast._outbox import WRITE_THROUGH_BYTES

    limit = 1024 * 1024
    body = b"y" * 1000
    async with Broker() as broker:
        async with make(broker, send_buffer_bytes=limit) as c:
            asyncio_transport = not hasattr(c._link.transport, "_stream")
            peak = 0
            for i in range(3000):
                await c.send("/queue/burst", b"%06d" % i + body)
                peak = max(peak, c._link.outbox.out_bytes)
            with anyio.fail_after(WAIT):
                await c.flush()
            bound = WRITE_THROUGH_BYTES if asyncio_transport else limit
            assert peak <= bound + len(body) + 100, (peak, bound)
            if asyncio_transport:
                assert peak < limit / 2  # the mark, not the limit, bounded it
            assert broker.queue_depth("/queue/burst") == 3000
            async with c.subscribe("/queue/burst") as sub:
                with anyio.fail_after(WAIT):
                    for i in range(3000):
                        msg = await sub.__anext__()
                        assert msg.body[:6] == b"%06d" % i


async def test_a_burst_into_a_peer_that_stops_reading_waits_instead_of_queueing_to_the_limit():
    # The peer (a plain socket in a thread, small receive buffer) reads nothing for a
    # while: the socket and the loop's buffer fill, the writer task waits on the socket,
    # and send must then wait too: on asyncio once the write-through mark is queued,
    # elsewhere at send_buffer_bytes. When the peer reads again every frame arrives, in
    # order.
    import socket
    import threading

    from stompfast._outbox import WRITE_THROUGH_BYTES

    limit = 2 * 1024 * 1024
    body = b"z" * 1000
    count = 8000  # 8 MB: far more than the socket buffers hold
    reading = threading.Event()
    received = bytearray()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # inherited: no autotuning
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def peer():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\x00" not in data:
                data += conn.recv(65536)
            conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
            reading.wait(WAIT * 2)
            received.extend(data[data.index(b"\x00") + 1:])
            while received.count(b"SEND\n") < count or not received.rstrip(b"\n").endswith(b"\x00"):
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                received.extend(chunk)
            conn.sendall(b"RECEIPT\nreceipt-id:bye\n\n\x00")  # whatever DISCONNECT's id, close at once

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    try:
        c = AsyncClient(f"stomp://127.0.0.1:{listener.getsockname()[1]}/", heart_beat=(0, 0), reconnect=False,
                        send_buffer_bytes=limit, disconnect_timeout=0.2)
        async with c:
            asyncio_transport = not hasattr(c._link.transport, "_stream")
            peak = 0
            blocked = 0

            async def produce():
                nonlocal peak, blocked
                for i in range(count):
                    before = anyio.current_time()
                    await c.send("/queue/slow", b"%06d" % i + body)
                    if anyio.current_time() - before > 0.1:
                        blocked += 1
                    peak = max(peak, c._link.outbox.out_bytes)

            with anyio.fail_after(WAIT * 2):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(produce)
                    await anyio.sleep(0.5)  # the peer is not reading
                    reading.set()
            bound = WRITE_THROUGH_BYTES if asyncio_transport else limit
            assert peak <= bound + len(body) + 100, (peak, bound)
            assert blocked >= 1  # send waited while the peer was not reading
            await anyio.to_thread.run_sync(thread.join, WAIT)
    finally:
        reading.set()
        listener.close()
    frames = [f for f in bytes(received).split(b"\x00") if f.strip(b"\n").startswith(b"SEND")]
    assert len(frames) == count
    assert [f[f.index(b"\n\n") + 2:][:6] for f in frames] == [b"%06d" % i for i in range(count)]


# -- subscriptions -----------------------------------------------------------------------------


async def test_subscribe_iterate_and_leave_unsubscribes():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                assert broker.consumers("/queue/a") == 1
                for i in range(3):
                    await c.send("/queue/a", b"%d" % i)
                got = []
                async for msg in sub:
                    got.append(msg.body)
                    if len(got) == 3:
                        break
                assert got == [b"0", b"1", b"2"]
            with anyio.fail_after(WAIT):
                await broker.wait_for(lambda: broker.consumers("/queue/a") == 0)
            assert sub.closed
            with pytest.raises(ClientClosedError):
                await sub.receive()


async def test_iteration_ends_when_the_client_closes():
    async with Broker() as broker:
        results = []
        async with make(broker) as c:
            sub = c.subscribe("/queue/a")
            await sub.__aenter__()

            async def consume():
                async for msg in sub:
                    results.append(msg.body)
                results.append("end")

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await c.send("/queue/a", b"one")
                with anyio.fail_after(WAIT):
                    await broker.wait_for(lambda: broker.queue_depth("/queue/a") == 0 and results)
                await c.aclose()
        assert results == [b"one", "end"]


async def test_receive_batch_takes_what_one_read_delivered():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                for i in range(50):
                    broker.publish("/queue/a", b"%d" % i)
                await broker.wait_for(lambda: broker.queue_depth("/queue/a") == 0)
                with anyio.fail_after(WAIT):
                    while sub.pending < 50:
                        await anyio.sleep(0.01)
                batch = await sub.receive_batch(40)
                assert [m.body for m in batch] == [b"%d" % i for i in range(40)]
                assert len(await sub.receive_batch(40)) == 10


async def test_client_individual_ack_nack_and_redelivery():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                broker.publish("/queue/a", b"keep")
                broker.publish("/queue/a", b"refuse")
                keep, refuse = await next_message(sub), await next_message(sub)
                await keep.ack(receipt=True)
                await refuse.nack(receipt=True)
                again = await next_message(sub)  # requeued and redelivered
                assert (again.body, again.redelivered) == (b"refuse", True)
                await again.ack(receipt=True)
            assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


async def test_client_mode_acks_are_cumulative():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client") as sub:
                for i in range(5):
                    broker.publish("/queue/a", b"%d" % i)
                msgs = [await next_message(sub) for _ in range(5)]
                await msgs[2].ack(receipt=True)  # acks 0, 1 and 2
                assert broker.unacked("/queue/a") == 2
                before = broker.stats.frames_in.get("ACK", 0)
                await msgs[1].ack()  # already covered: nothing is sent
                await msgs[4].ack(receipt=True)
                assert broker.stats.frames_in.get("ACK", 0) == before + 1
                assert broker.unacked("/queue/a") == 0


async def test_a_message_is_settled_once_whichever_way_it_is_acked():
    # A second ack or nack of one message is refused before anything is sent, through
    # each door: message.ack/nack, client.ack/nack and a transaction's ack.
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                for body in (b"a", b"b", b"c"):
                    broker.publish("/queue/a", body)
                a, b, m = await next_message(sub), await next_message(sub), await next_message(sub)
                await a.ack(receipt=True)
                await c.nack(b, receipt=True)
                async with c.transaction() as tx:
                    await tx.ack(m)
                sent = dict(broker.stats.frames_in)
                for second in (a.ack, a.nack, b.ack, lambda: c.ack(b), lambda: c.nack(m)):
                    with pytest.raises(AlreadySettledError):
                        await second()
                assert (a.settled, b.settled, m.settled) == ("ACK", "NACK", "ACK")
                assert dict(broker.stats.frames_in) == sent
                assert c.error is None


@pytest.mark.parametrize("ack", ["client", "client-individual"])
async def test_a_refused_transactional_ack_leaves_the_message_to_ack_later(ack):
    # A broker that names itself Artemis, whose ACKs ignore transactions: tx.ack() is
    # refused before anything is sent, and the message stays unsettled; in client
    # mode the refused ACK must not count as covering it (it did: the later ACK was
    # then skipped as "already covered" and the message came back).
    async with Broker(server="ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine") as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack=ack) as sub:
                broker.publish("/queue/a", b"x")
                message = await next_message(sub)
                async with c.transaction() as tx:
                    with pytest.raises(LocalProtocolError, match="Artemis"):
                        await tx.ack(message)
                assert message.settled is None
                await message.ack(receipt=True)
            assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


async def test_unacked_messages_come_back_after_the_consumer_leaves():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                broker.publish("/queue/a", b"x")
                first = await next_message(sub)
                assert not first.redelivered
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                again = await next_message(sub)
                assert (again.body, again.redelivered) == (b"x", True)
                await again.ack(receipt=True)


async def test_ack_in_auto_mode_is_refused_locally():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                broker.publish("/queue/a", b"x")
                with pytest.raises(LocalProtocolError):
                    await (await next_message(sub)).ack()


async def test_prefetch_follows_the_buffer_in_client_modes_and_headers_pass_through():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client", buffer_size=7, headers={"selector": "a = 1"}):
                pass
            async with c.subscribe("/queue/b", ack="client-individual", headers={"prefetch-count": "3"}):
                pass
            async with c.subscribe("/queue/c"):
                pass
        subs = {f.headers["destination"]: f.headers for f in broker.received if f.command == "SUBSCRIBE"}
        # (the in-process broker is no broker the client knows: RabbitMQ's header only)
        assert subs["/queue/a"]["prefetch-count"] == "7" and "activemq.prefetchSize" not in subs["/queue/a"]
        assert subs["/queue/a"]["selector"] == "a = 1"
        assert subs["/queue/b"]["prefetch-count"] == "3" and "activemq.prefetchSize" not in subs["/queue/b"]
        assert "prefetch-count" not in subs["/queue/c"]


async def test_a_full_buffer_applies_backpressure_to_every_subscription():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/slow", buffer_size=5) as slow, c.subscribe("/queue/other") as other:
                # more than one socket read's worth: the buffer holds buffer_size plus
                # what the read that filled it carried, no more
                for i in range(50):
                    broker.publish("/queue/slow", b"%d" % i + b"." * 20_000)
                with anyio.fail_after(WAIT):
                    while slow.pending < 5:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.2)
                assert slow.pending < 50  # the reader stopped: the rest waits in the socket/broker
                broker.publish("/queue/other", b"stuck behind slow")
                with anyio.move_on_after(0.3):
                    await other.receive()
                    pytest.fail("the other subscription got a message while the reader was stopped")
                got = [(await next_message(slow)).body.rstrip(b".") for _ in range(50)]
                assert got == [b"%d" % i for i in range(50)]
                assert (await next_message(other)).body == b"stuck behind slow"


async def test_receipt_blocked_by_an_unread_full_subscription_fails_with_flow_control_error():
    async with Broker() as broker:
        async with make(broker, stall_timeout=0.3) as c:
            async with c.subscribe("/queue/flood", buffer_size=3) as sub:
                for _ in range(200):
                    broker.publish("/queue/flood", b"x" * 1000)
                with anyio.fail_after(WAIT):
                    while sub.pending < 3:
                        await anyio.sleep(0.01)
                with anyio.fail_after(WAIT):
                    with pytest.raises(FlowControlError) as info:
                        await c.flush()
                assert info.value.subscription == sub.id and info.value.destination == "/queue/flood"
                # draining it lets the client go on
                for _ in range(200):
                    await next_message(sub)
                with anyio.fail_after(WAIT):
                    await c.flush()


DEEP = 2000  # messages of 1000 bytes: 2 MB, far more than one read and the socket buffers hold


@pytest.mark.parametrize(
    "ack, headers",
    [
        ("auto", None),  # no prefetch at all: the broker pushes the whole queue
        ("client-individual", {"prefetch-count": "500"}),  # a prefetch above buffer_size
    ],
)
async def test_subscribe_to_a_deep_queue_whose_receipt_comes_late_does_not_stall(ack, headers):
    # The broker delivers before it confirms: the messages fill the buffer and stop
    # the reader with the RECEIPT unread behind them. Before the first MESSAGE counted
    # as the confirmation, subscribe() waited for that RECEIPT until stall_timeout
    # (FlowControlError), and nobody could drain the buffer in the meantime.
    async with Broker() as broker:
        for i in range(DEEP):
            broker.publish("/queue/deep", b"%04d" % i + b"." * 996)
        broker.delay_receipts(3.0)
        async with make(broker) as c:
            # well before the RECEIPT (3 s) and the stall (10 s)
            with anyio.fail_after(2):
                sub = await c.subscribe("/queue/deep", ack=ack, headers=headers, buffer_size=10).__aenter__()
            try:
                # its messages confirmed it: the RECEIPT was not even sent yet
                assert sub.pending > 0 and broker.stats.frames_out.get("RECEIPT", 0) == 0
                got = []
                for _ in range(DEEP):
                    message = await next_message(sub)
                    got.append(message.body[:4])
                    if ack != "auto":
                        await message.ack()
                assert got == [b"%04d" % i for i in range(DEEP)]
                # the late RECEIPT finds no waiter and changes nothing
                with anyio.fail_after(WAIT):
                    await broker.wait_for(lambda: broker.stats.frames_out.get("RECEIPT", 0) >= 1)
                broker.delay_receipts(0)
                with anyio.fail_after(WAIT):
                    await c.flush()
                assert c.stats().receipts_pending == 0 and c.stats().receipts_failed == 0
            finally:
                await sub.aclose()


async def test_subscribe_with_a_late_receipt_and_no_message_still_waits_for_the_receipt():
    # Only a MESSAGE of this subscription stands in for its RECEIPT: an empty
    # queue's subscribe returns when the RECEIPT comes, not before.
    async with Broker() as broker:
        broker.delay_receipts(0.5)
        async with make(broker) as c:
            with anyio.fail_after(WAIT):
                async with c.subscribe("/queue/empty") as sub:
                    assert broker.stats.frames_out.get("RECEIPT", 0) == 1
                    broker.publish("/queue/empty", b"later")
                    assert (await next_message(sub)).body == b"later"


async def test_client_mode_buffer_is_held_to_buffer_size_by_the_prefetch_while_the_receipt_is_late():
    # In the client modes the prefetch the SUBSCRIBE asks for keeps the broker from
    # sending more than buffer_size unacked messages, so the reader never stops for
    # them: the late RECEIPT, and any other, is read behind them as usual.
    async with Broker() as broker:
        for i in range(200):
            broker.publish("/queue/deep", b"%d" % i)
        broker.delay_receipts(0.5)
        async with make(broker) as c:
            with anyio.fail_after(WAIT):
                async with c.subscribe("/queue/deep", ack="client", buffer_size=10) as sub:
                    # a full, unread buffer holds back no receipt
                    await c.flush()
                    assert broker.stats.frames_out.get("RECEIPT", 0) >= 2
                    assert sub.pending == 10  # no more than the prefetch
                    for i in range(200):
                        message = await next_message(sub)
                        assert message.body == b"%d" % i
                        await message.ack()
                        assert sub.pending <= 10


# -- transactions ------------------------------------------------------------------------------


async def test_transaction_commits_on_exit():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.transaction() as tx:
                await tx.send("/queue/a", b"1")
                await tx.send("/queue/a", "2")
                await c.flush()
                assert broker.queue_depth("/queue/a") == 0
            assert broker.queue_depth("/queue/a") == 2


async def test_transaction_aborts_on_exception_and_on_cancellation():
    async with Broker() as broker:
        async with make(broker) as c:
            with pytest.raises(KeyError):
                async with c.transaction() as tx:
                    await tx.send("/queue/a", b"1")
                    raise KeyError("boom")
            with anyio.move_on_after(0.1):
                async with c.transaction() as tx:
                    await tx.send("/queue/a", b"2")
                    await anyio.sleep(10)
            with anyio.fail_after(WAIT):
                await c.flush()
            assert broker.queue_depth("/queue/a") == 0
            aborts = [f for f in broker.received if f.command == "ABORT"]
            assert len(aborts) >= 2


async def test_transactional_acks_apply_on_commit():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                broker.publish("/queue/a", b"x")
                msg = await next_message(sub)
                async with c.transaction() as tx:
                    await tx.ack(msg)
                    await c.flush()
                    assert broker.unacked("/queue/a") == 1
                assert broker.unacked("/queue/a") == 0


# -- heart-beats -------------------------------------------------------------------------------


async def test_client_heart_beats_keep_a_strict_broker_happy():
    async with Broker(heart_beat=(100, 100), heartbeat_grace=0.05) as broker:
        async with make(broker, heart_beat=(100, 100)) as c:
            await anyio.sleep(1.0)
            assert c.is_connected
            with anyio.fail_after(WAIT):
                await c.send("/queue/a", b"x", receipt=True)


async def test_broker_silence_raises_heartbeat_timeout_to_every_waiter():
    async with Broker(heart_beat=(100, 100)) as broker:
        async with make(broker, heart_beat=(100, 100), heartbeat_tolerance=2) as c:
            async with c.subscribe("/queue/a") as sub:
                broker.withhold_receipts()
                pending = await c.send("/queue/a", b"x", receipt=True, wait=False)
                await next_message(sub)
                broker.stop_heartbeats()
                with anyio.fail_after(WAIT):
                    with pytest.raises(HeartbeatTimeout):
                        await sub.receive()
                with pytest.raises(HeartbeatTimeout):
                    await pending
                assert isinstance(c.error, HeartbeatTimeout) and isinstance(c.error, TimeoutError)


async def test_a_slow_consumer_never_causes_a_false_heartbeat_timeout():
    # the reader stops reading while a buffer is full; silence then proves nothing
    async with Broker(heart_beat=(100, 100)) as broker:
        async with make(broker, heart_beat=(100, 100), heartbeat_tolerance=2) as c:
            async with c.subscribe("/queue/a", buffer_size=2) as sub:
                for _ in range(20):
                    broker.publish("/queue/a", b"x" * 100_000)
                await anyio.sleep(1.0)  # nobody reads for 10 intervals
                for _ in range(20):
                    await next_message(sub)
                assert c.is_connected


# -- faults ------------------------------------------------------------------------------------


async def test_error_frame_mid_session_fails_everything_with_server_error():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                broker.withhold_receipts()
                pending = await c.send("/queue/a", b"x", receipt=True, wait=False)
                await next_message(sub)
                broker.send_error("Simulated failure", body="details here")
                with anyio.fail_after(WAIT):
                    with pytest.raises(ServerError) as info:
                        await sub.receive()
                assert "Simulated failure" in str(info.value) and info.value.body == b"details here"
                with pytest.raises(ServerError):
                    await pending
                with pytest.raises(ServerError):
                    await c.send("/queue/a", b"y")


async def test_connection_cut_in_the_middle_of_a_frame():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                broker.drop_mid_frame()
                broker.publish("/queue/a", b"x" * 1000)
                with anyio.fail_after(WAIT):
                    with pytest.raises(ConnectionLostError) as info:
                        await sub.receive()
                assert "middle of a frame" in str(info.value)


async def test_malformed_bytes_from_the_broker_are_a_remote_protocol_error():
    async with Broker() as broker:
        async with make(broker) as c:
            async with c.subscribe("/queue/a") as sub:
                broker.publish("/queue/a", b"before")
                assert (await next_message(sub)).body == b"before"
                broker.send_raw(b"MESSAGE\nsubscription:1\nmessage-id:9\ndestination:/queue/a\nbad\\qescape:1\n\nx\x00")
                with anyio.fail_after(WAIT):
                    with pytest.raises(RemoteProtocolError):
                        await sub.receive()


async def test_close_sends_disconnect_with_receipt_and_is_bounded():
    async with Broker() as broker:
        async with make(broker) as c:
            pass
        (disconnect,) = [f for f in broker.received if f.command == "DISCONNECT"]
        assert "receipt" in disconnect.headers
        broker.withhold_receipts()
        c = make(broker, disconnect_timeout=0.3)
        async with c:
            pass
        with anyio.fail_after(WAIT):
            await c.aclose()  # idempotent


async def test_close_while_another_task_waits_on_a_receipt():
    async with Broker() as broker:
        async with make(broker, disconnect_timeout=0.2) as c:
            broker.withhold_receipts()
            outcome = []

            async def waiter():
                try:
                    await c.send("/queue/a", b"x", receipt=True)
                except ClientClosedError:
                    outcome.append("closed")

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0.1)
                await c.aclose()
        assert outcome == ["closed"]


async def test_a_full_client_ack_buffer_does_not_stop_receipts():
    # The broker's prefetch is the buffer size in the client modes, so the buffer
    # cannot overflow: the reader keeps reading and receipts keep arriving.
    async with Broker() as broker:
        async with make(broker, stall_timeout=0.5) as c:
            async with c.subscribe("/queue/full", ack="client-individual", buffer_size=10) as sub:
                for i in range(20):
                    broker.publish("/queue/full", b"%d" % i)
                await broker.wait_for(lambda: broker.unacked("/queue/full") == 10)
                with anyio.fail_after(WAIT):
                    for _ in range(20):
                        await c.send("/queue/other", b"x", receipt=True)
                assert sub.pending == 10  # full, unread, and nothing was stopped
                first = await next_message(sub)
                await first.ack()
                await broker.wait_for(lambda: broker.unacked("/queue/full") == 10 and sub.pending == 10)


async def test_leaving_by_an_outer_cancellation_still_sends_disconnect_promptly():
    async with Broker() as broker:
        with anyio.CancelScope() as outer:
            async with make(broker, disconnect_timeout=5):
                started = anyio.current_time()
                outer.cancel()  # cancelled once connected (a deadline could hit the connect itself)
                await anyio.sleep(10)
        assert anyio.current_time() - started < 2.5  # not the 5 s disconnect_timeout
        await broker.wait_for(lambda: "DISCONNECT" in [f.command for f in broker.received])


# -- message options: ttl, priority, persistent, selector ------------------------------------------


def _sends(broker: Broker) -> list:
    return [f for f in broker.received if f.command == "SEND"]


@pytest.mark.parametrize("server", ["RabbitMQ/3.10.8", "ActiveMQ/5.17.2"])
async def test_message_options_are_written_as_the_connected_broker_reads_them(server):
    async with Broker(server=server) as broker, make(broker) as c:
        before = int(time.time() * 1000)
        await c.send("/queue/a", b"queued", ttl=2, priority=3, persistent=False)
        await c.send("/queue/a", b"confirmed", ttl=2, receipt=True)
        await c.flush()
        queued, confirmed = _sends(broker)
    assert (queued.headers["priority"], queued.headers["persistent"]) == ("3", "false")
    if server.startswith("RabbitMQ/"):
        assert [f.headers.get("expiration") for f in (queued, confirmed)] == ["2000", "2000"]
        assert not any("expires" in f.headers for f in (queued, confirmed))
    else:
        for frame in (queued, confirmed):
            assert before + 2000 <= int(frame.headers["expires"]) <= time.time() * 1000 + 2000
            assert "expiration" not in frame.headers
        # ActiveMQ: /queue/ is persistent unless the send says otherwise
        assert confirmed.headers["persistent"] == "true"


async def test_a_request_expires_with_its_timeout():
    # the in-process broker names no broker stompfast knows: both spellings
    async with Broker() as broker, make(broker) as c:
        before = int(time.time() * 1000)
        with pytest.raises(RequestTimeout):
            await c.request("/queue/nobody", b"?", timeout=0.2)
        (request,) = _sends(broker)
    assert request.headers["expiration"] == "200"
    assert before + 200 <= int(request.headers["expires"]) <= time.time() * 1000 + 200


async def test_bad_options_and_a_selector_rabbitmq_ignores_are_refused_and_nothing_is_sent():
    async with Broker(server="RabbitMQ/3.10.8") as broker, make(broker) as c:
        for bad in ({"ttl": 0}, {"ttl": "1"}, {"priority": 10}, {"persistent": "yes"},
                    {"ttl": 1, "headers": {"expiration": "5"}}, {"persistent": True, "headers": {"persistent": "1"}}):
            with pytest.raises(ConfigurationError):
                await c.send("/queue/a", b"x", **bad)
            with pytest.raises(ConfigurationError):
                await c.send("/queue/a", b"x", receipt=True, **bad)
        for kwargs in ({"selector": "a = 1"}, {"headers": {"selector": "a = 1"}}):
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                c.subscribe("/queue/a", **kwargs)
        await c.flush()
        assert not [f for f in broker.received if f.command in ("SEND", "SUBSCRIBE")]


async def test_a_selector_is_checked_and_passed_on_where_the_broker_applies_it():
    async with Broker(server="ActiveMQ/5.17.2") as broker, make(broker) as c:
        for bad in ({"selector": ""}, {"selector": 5}, {"selector": "a = 1", "headers": {"selector": "b = 2"}}):
            with pytest.raises(ConfigurationError):
                c.subscribe("/queue/a", **bad)
        async with c.subscribe("/queue/a", selector="region = 'EU'"):
            pass
        (subscribe,) = [f for f in broker.received if f.command == "SUBSCRIBE"]
    assert subscribe.headers["selector"] == "region = 'EU'"
