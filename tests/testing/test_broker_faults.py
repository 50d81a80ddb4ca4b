"""The in-process broker's fault injection, and that misbehaving clients never hurt it."""

from __future__ import annotations

import anyio
import pytest
from rawstomp import RawClient

from stompfast import FrameScanner, RemoteProtocolError, encode_frame
from stompfast.frames import Frame
from stompfast.testing import Broker

pytestmark = pytest.mark.anyio


async def connect(broker, version="1.2", **headers):
    return await RawClient.connected(broker.port, version, **headers)


async def subscribe(c, destination, sub_id="0", **headers):
    h = {"id": sub_id, "destination": destination}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    await c.receipt("SUBSCRIBE", h, rid=f"sub-{sub_id}", keep_messages=True)


# ------------------------------------------------------------------ drop_connections


async def test_drop_connections_closes_every_socket_and_requeues(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b:
        await subscribe(a, "/queue/d", ack="client")
        stomp_broker.publish("/queue/d", b"x")
        await a.expect("MESSAGE")
        assert stomp_broker.connections == 2
        stomp_broker.drop_connections()
        assert await a.expect_closed() == []
        assert await b.expect_closed() == []
        # the session ended at once: the unacked message is back in the queue
        assert (stomp_broker.queue_depth("/queue/d"), stomp_broker.unacked("/queue/d")) == (1, 0)
    await stomp_broker.wait_for(lambda: stomp_broker.connections == 0)
    async with await connect(stomp_broker) as c:  # and the broker still accepts clients
        await subscribe(c, "/queue/d")
        await c.expect("MESSAGE", redelivered="true")


# ------------------------------------------------------------------ drop_mid_frame


@pytest.mark.parametrize("ack", ["client", "auto"])
async def test_drop_mid_frame_cuts_the_next_message_in_half(stomp_broker, ack):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/cut", ack=ack)
        stomp_broker.drop_mid_frame()
        await c.sync()  # armed, but no MESSAGE yet: other frames pass untouched
        stomp_broker.publish("/queue/cut", b"0123456789" * 10)
        assert await c.expect_closed() == []
        tail = bytes(c.raw[c.raw.rindex(b"MESSAGE\n"):])
        full = encode_frame("MESSAGE", [
            ("destination", "/queue/cut"), ("message-id", "msg-1"),
            ("subscription", "0"), *([("ack", "session-1:2")] if ack == "client" else []),
        ], b"0123456789" * 10)
        assert tail == full[: len(full) // 2]
        assert c.scanner.buffered == len(tail)  # the client holds an incomplete frame
    assert stomp_broker.stats.frames_out["MESSAGE"] == 1
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/cut")
        stomp_broker.publish("/queue/cut", b"next")  # the fault fired once: this one is whole
        if ack == "client":
            await c.expect("MESSAGE", redelivered="true")
        else:
            assert stomp_broker.stats.messages_discarded == 1  # auto-acked, so lost
        assert (await c.expect("MESSAGE")).body == b"next"


# ------------------------------------------------------------------ receipts


async def test_withhold_receipts(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/w")
        stomp_broker.withhold_receipts()
        await c.send("SEND", {"destination": "/queue/w", "receipt": "lost"}, b"1")
        await c.send("SEND", {"destination": "/queue/w"}, b"2")
        # the frames are processed, only the receipt is missing
        assert [m.body for m in await c.messages(2)] == [b"1", b"2"]
        assert stomp_broker.stats.receipts_withheld == 1
        stomp_broker.withhold_receipts(False)
        await c.receipt("SEND", {"destination": "/queue/w"}, b"3", keep_messages=True)
        assert (await c.expect("MESSAGE")).body == b"3"


async def test_withheld_disconnect_receipt_still_closes(stomp_broker):
    async with await connect(stomp_broker) as c:
        stomp_broker.withhold_receipts(True)
        await c.send("DISCONNECT", {"receipt": "bye"})
        assert await c.expect_closed() == []


async def test_delay_receipts(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/dl")
        stomp_broker.delay_receipts(0.2)
        start = anyio.current_time()
        await c.send("SEND", {"destination": "/queue/dl", "receipt": "slow"}, b"x")
        await c.expect("MESSAGE")  # processed at once: the MESSAGE overtakes the receipt
        assert anyio.current_time() - start < 0.15
        await c.expect("RECEIPT", receipt_id="slow")
        assert anyio.current_time() - start >= 0.19  # (uvloop's clock counts whole milliseconds)
        stomp_broker.delay_receipts(0)
        start = anyio.current_time()
        await c.receipt("BEGIN", {"transaction": "t"})
        assert anyio.current_time() - start < 0.15


async def test_delayed_disconnect_receipt_comes_before_the_close(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/dd")
        stomp_broker.delay_receipts(0.1)
        start = anyio.current_time()
        await c.send("DISCONNECT", {"receipt": "bye"})
        # the session ended at DISCONNECT: nothing is delivered while the receipt waits
        await stomp_broker.wait_for(lambda: stomp_broker.consumers("/queue/dd") == 0)
        stomp_broker.publish("/queue/dd", b"kept")
        assert stomp_broker.queue_depth("/queue/dd") == 1
        assert [f.headers["receipt-id"] for f in await c.expect_closed()] == ["bye"]
        assert anyio.current_time() - start >= 0.09


# ------------------------------------------------------------------ send_error


async def test_send_error_to_every_client_then_close(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker, "1.0") as b:
        await subscribe(a, "/queue/se", ack="client")
        stomp_broker.publish("/queue/se", b"x")
        await a.expect("MESSAGE")
        stomp_broker.send_error("boom", body="details")
        for c in (a, b):
            frames = await c.expect_closed()
            assert frames == [Frame("ERROR", {"message": "boom", "content-type": "text/plain",
                                              "content-length": "7"}, b"details")]
        assert stomp_broker.queue_depth("/queue/se") == 1
    assert stomp_broker.stats.frames_out["ERROR"] == 2


async def test_send_error_without_close(stomp_broker):
    async with await connect(stomp_broker) as c:
        stomp_broker.send_error("just a warning", close=False)
        await c.expect("ERROR", message="just a warning")
        await c.sync()  # the session goes on


# ------------------------------------------------------------------ heart-beats


@pytest.mark.stomp_broker(heart_beat=(40, 0))
async def test_stop_and_resume_heartbeats(stomp_broker):
    async with await connect(stomp_broker, heart_beat="0,40") as c:
        await c.read_for(0.15)
        assert c.eols >= 2
        stomp_broker.stop_heartbeats()
        await c.read_for(0.05)  # one may have been in flight
        before = c.eols
        await c.read_for(0.25)
        assert c.eols == before
        await c.sync()  # the socket is open and the broker still reads
        stomp_broker.resume_heartbeats()
        await c.read_for(0.15)
        assert c.eols >= before + 2


# ------------------------------------------------------------------ send_raw


async def test_send_raw_writes_bytes_as_they_are(stomp_broker):
    async with await connect(stomp_broker) as c, await connect(stomp_broker) as d:
        stomp_broker.send_raw(b"MESSAGE\nfoo:bar\n\nraw\0")
        assert await c.recv() == Frame("MESSAGE", {"foo": "bar"}, b"raw")
        assert await d.recv() == Frame("MESSAGE", {"foo": "bar"}, b"raw")
        stomp_broker.send_raw(b"GARBAGE\n\n\0")
        with pytest.raises(RemoteProtocolError):
            await c.recv()


# ------------------------------------------------------------------ refusing connections


async def test_refuse_connections_for_the_next_n(stomp_broker):
    stomp_broker.refuse_connections(2)
    for _ in range(2):
        async with await RawClient.open(stomp_broker.port) as c:
            assert await c.expect_closed() == []
            assert c.raw == b""
    async with await connect(stomp_broker):
        pass
    stats = stomp_broker.stats
    assert (stats.connections_accepted, stats.connections_refused) == (3, 2)


async def test_refuse_connections_until_cleared(stomp_broker):
    stomp_broker.refuse_connections()
    for _ in range(3):
        async with await RawClient.open(stomp_broker.port) as c:
            assert await c.expect_closed() == []
    stomp_broker.clear_faults()
    async with await connect(stomp_broker):
        pass
    assert stomp_broker.stats.connections_refused == 3


async def test_answer_connect_with_error(stomp_broker):
    stomp_broker.answer_connect_with_error("maintenance", n=2, body="come back later")
    for _ in range(2):
        async with await RawClient.open(stomp_broker.port) as c:
            await c.send("CONNECT", {"accept-version": "1.2"})
            frame = await c.expect_error("maintenance")
            assert frame.body == b"come back later"
    async with await connect(stomp_broker):
        pass


async def test_answer_connect_with_error_until_cleared(stomp_broker):
    stomp_broker.answer_connect_with_error("down", n=None)
    for _ in range(3):
        async with await RawClient.open(stomp_broker.port) as c:
            await c.send("CONNECT", {"accept-version": "1.2"})
            await c.expect_error("down")
    stomp_broker.clear_faults()
    async with await connect(stomp_broker):
        pass


async def test_clear_faults_turns_everything_off(stomp_broker):
    stomp_broker.withhold_receipts()
    stomp_broker.delay_receipts(5)
    stomp_broker.drop_mid_frame()
    stomp_broker.stop_heartbeats()
    stomp_broker.refuse_connections()
    stomp_broker.answer_connect_with_error("x", n=None)
    stomp_broker.clear_faults()
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/cf")
        stomp_broker.publish("/queue/cf", b"whole")
        assert (await c.expect("MESSAGE")).body == b"whole"


# ------------------------------------------------------------------ robustness


async def test_misbehaving_clients_never_hurt_the_broker(stomp_broker):
    port = stomp_broker.port
    async with await RawClient.open(port) as c:  # half a frame, then gone
        await c.send_raw(b"CONNECT\naccept-version:1.2\n\n\0SEND\ndestination:/queue/m\n\nhal")
        await c.expect("CONNECTED")
    async with await RawClient.open(port) as c:  # garbage before CONNECT
        await c.send_raw(b"\x00\xff\xfe hello\n\n\0")
        await c.expect_error("Malformed frame")
    async with await RawClient.open(port):  # connects and says nothing
        pass
    async with anyio.create_task_group() as tg:  # many at once, vanishing at once
        for _ in range(20):
            tg.start_soon(_connect_and_vanish, port)
    await stomp_broker.wait_for(lambda: stomp_broker.connections == 0)
    async with await connect(stomp_broker) as c:
        await c.sync()
    assert stomp_broker.queue_depth("/queue/m") == 0
    assert stomp_broker.errors == []


async def _connect_and_vanish(port):
    c = await RawClient.connected(port)
    await c.send("SUBSCRIBE", {"id": "0", "destination": "/queue/v", "ack": "client"})
    await c.aclose()


async def test_shutdown_closes_everything_promptly():
    async with Broker() as broker:
        clients = [await RawClient.connected(broker.port) for _ in range(3)]
        await subscribe(clients[0], "/queue/s", ack="client")
        broker.publish("/queue/s", b"x")
        await clients[0].expect("MESSAGE")
        start = anyio.current_time()
    assert anyio.current_time() - start < 1.0
    for c in clients:
        assert await c.expect_closed(timeout=1) == []
        await c.aclose()
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", broker.port)


async def test_broker_body_exception_propagates_unwrapped():
    with pytest.raises(KeyError):
        async with Broker():
            raise KeyError("mine")


async def test_client_that_never_reads_is_bounded(stomp_broker):
    """The broker stops reading a client that does not read its receipts (outbox bound), then catches up."""
    n = 10_000  # 40 MB of SENDs and as much of RECEIPTs: more than the outbox bound and socket buffers
    wire = encode_frame("SEND", {"destination": "/queue/nr", "receipt": "r" * 4000}, b"")
    done = anyio.Event()

    async def write_all(c):
        for _ in range(n // 100):
            await c.send_raw(wire * 100)
        done.set()

    async with await connect(stomp_broker) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_all, c)
            await anyio.sleep(0.3)
            # the client's writes are blocked because the broker stopped reading it
            assert not done.is_set()
            depth = stomp_broker.queue_depth("/queue/nr")
            assert 0 < depth < n
            with anyio.fail_after(20):  # reading the receipts lets the broker go on
                for _ in range(n):
                    await c.expect("RECEIPT")
        assert stomp_broker.queue_depth("/queue/nr") == n
    assert stomp_broker.errors == []


def test_scanner_module_is_the_projects():
    # the broker frames with the project's own scanner and encoder: the facade makes each
    # connection's scanner, the connection encodes what it sends
    from stompfast.testing import _broker, _broker_conn

    assert _broker.FrameScanner is FrameScanner
    assert _broker_conn.encode_frame is encode_frame
