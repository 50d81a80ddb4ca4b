"""The in-process broker's messaging: queues, topics, MESSAGE headers, ack modes, redelivery,
NACK, prefetch, transactions and the introspection API."""

from __future__ import annotations

import anyio
import pytest
from rawstomp import RawClient, ack_headers

from stompfast.frames import Frame

pytestmark = pytest.mark.anyio

VERSIONS = ["1.0", "1.1", "1.2"]


async def connect(broker, version="1.2", **headers):
    return await RawClient.connected(broker.port, version, **headers)


async def subscribe(c, destination, sub_id="0", **headers):
    h = {"id": sub_id, "destination": destination}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    await c.receipt("SUBSCRIBE", h, rid=f"sub-{sub_id}", keep_messages=True)


def bodies(frames):
    return [f.body for f in frames]


# ------------------------------------------------------------------ queues and topics


async def test_queue_round_robin_gives_each_message_to_exactly_one_consumer(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b, \
            await connect(stomp_broker) as producer:
        await subscribe(a, "/queue/rr")
        await subscribe(b, "/queue/rr")
        for i in range(6):
            await producer.send("SEND", {"destination": "/queue/rr"}, b"m%d" % i)
        await producer.sync()
        assert bodies(await a.messages(3)) == [b"m0", b"m2", b"m4"]
        assert bodies(await b.messages(3)) == [b"m1", b"m3", b"m5"]
        await a.sync()
        await b.sync()  # nothing more for either
    assert stomp_broker.stats.frames_out["MESSAGE"] == 6


async def test_queue_keeps_messages_until_a_consumer_subscribes(stomp_broker):
    async with await connect(stomp_broker) as c:
        for i in range(3):
            await c.send("SEND", {"destination": "/queue/keep"}, b"k%d" % i)
        await c.sync()
        assert stomp_broker.queue_depth("/queue/keep") == 3
        await c.send("SUBSCRIBE", {"id": "0", "destination": "/queue/keep"})
        assert bodies(await c.messages(3)) == [b"k0", b"k1", b"k2"]
    assert stomp_broker.queue_depth("/queue/keep") == 0


async def test_topic_fans_out_to_every_subscriber_and_keeps_nothing(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b:
        await a.receipt("SEND", {"destination": "/topic/t"}, b"lost")  # nobody listens: gone
        await subscribe(a, "/topic/t")
        await subscribe(b, "/topic/t")
        await subscribe(b, "/topic/t", sub_id="1")  # a second subscription gets its own copy
        assert stomp_broker.consumers("/topic/t") == 3
        await a.send("SEND", {"destination": "/topic/t"}, b"one")
        await a.send("SEND", {"destination": "/topic/t"}, b"two")
        got_a = await a.messages(2)
        got_b = await b.messages(4)
        assert bodies(got_a) == [b"one", b"two"]
        assert sorted(bodies(got_b)) == [b"one", b"one", b"two", b"two"]
        ids = [f.headers["message-id"] for f in got_a + got_b]
        assert len(set(ids)) == 6  # every copy has its own message-id
        assert sorted(f.headers["subscription"] for f in got_b) == ["0", "0", "1", "1"]
        await a.sync()
        await b.sync()
    assert stomp_broker.stats.messages_discarded == 1
    assert stomp_broker.queue_depth("/topic/t") == 0


async def test_amq_queue_is_the_queue_and_exchange_is_a_topic(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/amq/queue/q1", "0")
        await subscribe(c, "/exchange/amq.topic/k", "1")
        await c.send("SEND", {"destination": "/queue/q1"}, b"via queue")
        await c.send("SEND", {"destination": "/exchange/amq.topic/k"}, b"via exchange")
        m1, m2 = await c.messages(2)
        assert (m1.headers["destination"], m1.headers["subscription"]) == ("/queue/q1", "0")
        assert m1.body == b"via queue"
        assert (m2.headers["subscription"], m2.body) == ("1", b"via exchange")
    await stomp_broker.wait_for(lambda: stomp_broker.consumers("/queue/q1") == 0)


# ------------------------------------------------------------------ MESSAGE headers


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
async def test_message_headers(stomp_broker, version, ack):
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/h", "s1", ack=ack)
        await c.send("BEGIN", {"transaction": "tx"})
        await c.send(
            "SEND",
            [("destination", "/queue/h"), ("content-type", "text/plain"), ("receipt", "r1"),
             ("transaction", "tx"), ("custom", "value"), ("message-id", "forged")],
            b"hello",
        )
        await c.expect("RECEIPT", receipt_id="r1")
        await c.send("COMMIT", {"transaction": "tx"})
        m = await c.expect("MESSAGE")
        message_id = m.headers["message-id"]
        expected = [("destination", "/queue/h"), ("message-id", message_id), ("subscription", "s1")]
        if version == "1.2" and ack != "auto":
            ack_id = m.headers["ack"]
            assert ":" in ack_id and ack_id != message_id
            expected.append(("ack", ack_id))
        expected += [("content-type", "text/plain"), ("custom", "value"), ("content-length", "5")]
        assert m.header_list == expected
        assert message_id != "forged" and m.body == b"hello"


async def test_empty_body_has_no_content_length(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/e")
        await c.send("SEND", {"destination": "/queue/e"})
        m = await c.expect("MESSAGE")
        assert "content-length" not in m.headers and m.body == b""


async def test_binary_body_with_nul_bytes_survives(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/bin")
        body = bytes(range(256)) * 4
        await c.send("SEND", {"destination": "/queue/bin"}, body)
        assert (await c.expect("MESSAGE")).body == body


async def test_header_escaping_per_version(stomp_broker):
    tricky = "a:b\nc\\d"
    async with await connect(stomp_broker, "1.2") as p, await connect(stomp_broker, "1.1") as c11, \
            await connect(stomp_broker, "1.0") as c10:
        await subscribe(c11, "/topic/esc")
        await c10.receipt("SUBSCRIBE", {"destination": "/topic/esc"})
        await p.send("SEND", {"destination": "/topic/esc", "x": tricky, "y": "cr\r"}, b"z")
        m11 = await c11.expect("MESSAGE")
        assert m11.headers["x"] == tricky  # escaped by the broker, unescaped by the 1.1 scanner
        assert m11.headers["y"] == "cr "  # 1.1 cannot express a CR: blanked
        m10 = await c10.expect("MESSAGE")
        assert m10.headers["x"] == "a:b c\\d"  # 1.0 cannot express a LF: blanked; nothing escaped


# ------------------------------------------------------------------ ack modes


async def test_auto_ack_needs_no_ack(stomp_broker):
    async with await connect(stomp_broker, "1.1") as c:
        await subscribe(c, "/queue/auto")
        await c.send("SEND", {"destination": "/queue/auto"}, b"x")
        m = await c.expect("MESSAGE")
        assert stomp_broker.unacked("/queue/auto") == 0
        await c.send("ACK", {"message-id": m.headers["message-id"], "subscription": "0"})
        await c.expect_error("Unknown message")


@pytest.mark.parametrize("version", VERSIONS)
async def test_client_ack_is_cumulative(stomp_broker, version):
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/cum", ack="client")
        for i in range(4):
            await c.send("SEND", {"destination": "/queue/cum"}, b"%d" % i)
        ms = await c.messages(4)
        assert stomp_broker.unacked("/queue/cum") == 4
        await c.receipt("ACK", ack_headers(version, ms[2]))
        assert stomp_broker.unacked("/queue/cum") == 1  # 0, 1 and 2 acked
        await c.send("ACK", ack_headers(version, ms[0]))  # already acked by the cumulative ACK
        await c.expect_error("Unknown message")
    # the connection ended: the last one is redelivered to the next consumer
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/cum", ack="client")
        m = await c.expect("MESSAGE", redelivered="true")
        assert (m.body, m.headers["message-id"]) == (b"3", ms[3].headers["message-id"])


@pytest.mark.parametrize("version", VERSIONS)
async def test_client_individual_ack_is_not_cumulative(stomp_broker, version):
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/ind", ack="client-individual")
        for i in range(3):
            await c.send("SEND", {"destination": "/queue/ind"}, b"%d" % i)
        ms = await c.messages(3)
        await c.receipt("ACK", ack_headers(version, ms[1]))
        assert stomp_broker.unacked("/queue/ind") == 2
        await c.receipt("ACK", ack_headers(version, ms[0]))
        await c.receipt("ACK", ack_headers(version, ms[2]))
        assert stomp_broker.unacked("/queue/ind") == 0
        await c.send("ACK", ack_headers(version, ms[1]))
        await c.expect_error("Unknown message")
    assert stomp_broker.queue_depth("/queue/ind") == 0


async def test_ack_of_a_message_of_another_subscription_is_refused(stomp_broker):
    async with await connect(stomp_broker, "1.1") as c:
        await subscribe(c, "/queue/x1", "a", ack="client")
        await subscribe(c, "/queue/x2", "b", ack="client")
        await c.send("SEND", {"destination": "/queue/x1"}, b"x")
        m = await c.expect("MESSAGE")
        await c.send("ACK", {"message-id": m.headers["message-id"], "subscription": "b", "receipt": "r"})
        await c.expect_error("Unknown message", receipt_id="r")


async def test_ack_from_another_session_is_refused(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b:
        await subscribe(a, "/queue/other", ack="client")
        await a.send("SEND", {"destination": "/queue/other"}, b"x")
        m = await a.expect("MESSAGE")
        await b.send("ACK", {"id": m.headers["ack"]})
        await b.expect_error("Unknown message")
        assert stomp_broker.unacked("/queue/other") == 1


# ------------------------------------------------------------------ redelivery


async def _end(c, how):
    if how == "unsubscribe":
        await c.receipt("UNSUBSCRIBE", {"id": "0"})
    elif how == "disconnect":
        await c.send("DISCONNECT", {"receipt": "bye"})
        await c.expect_closed()
    elif how == "drop":
        await c.aclose()  # no DISCONNECT: the socket just closes
    elif how == "error":
        await c.send("UNSUBSCRIBE", {"id": "nope"})
        await c.expect_error("Unknown subscription")


@pytest.mark.parametrize("how", ["unsubscribe", "disconnect", "drop", "error"])
async def test_unacked_messages_go_back_to_the_front_and_are_redelivered(stomp_broker, how):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b:
        await subscribe(a, "/queue/re", ack="client-individual", prefetch_count="2")
        for i in range(3):
            await b.send("SEND", {"destination": "/queue/re"}, b"%d" % i)
        first = await a.messages(2)
        assert [m.headers.get("redelivered") for m in first] == [None, None]
        await b.sync()
        assert (stomp_broker.queue_depth("/queue/re"), stomp_broker.unacked("/queue/re")) == (1, 2)
        await _end(a, how)
        await stomp_broker.wait_for(lambda: stomp_broker.queue_depth("/queue/re") == 3)
        assert stomp_broker.unacked("/queue/re") == 0
        await subscribe(b, "/queue/re", ack="client-individual")
        again = await b.messages(3)
        assert bodies(again) == [b"0", b"1", b"2"]
        assert [m.headers.get("redelivered") for m in again] == ["true", "true", None]
        assert [m.headers["message-id"] for m in again[:2]] == [m.headers["message-id"] for m in first]
        assert [m.headers["ack"] for m in again[:2]] != [m.headers["ack"] for m in first]


async def test_unacked_topic_copies_end_with_the_subscription(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/topic/gone", ack="client")
        await c.send("SEND", {"destination": "/topic/gone"}, b"x")
        await c.expect("MESSAGE")
        assert stomp_broker.unacked("/topic/gone") == 1
        await c.receipt("UNSUBSCRIBE", {"id": "0"})
        assert stomp_broker.unacked("/topic/gone") == 0
        await subscribe(c, "/topic/gone", "1")
        await c.sync()  # nothing redelivered
    assert stomp_broker.stats.messages_discarded == 1


# ------------------------------------------------------------------ NACK


@pytest.mark.parametrize("version", ["1.1", "1.2"])
async def test_nack_requeues_and_redelivers(stomp_broker, version):
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/n", ack="client-individual")
        await c.send("SEND", {"destination": "/queue/n"}, b"a")
        await c.send("SEND", {"destination": "/queue/n"}, b"b")
        ma, mb = await c.messages(2)
        await c.send("NACK", ack_headers(version, mb))
        again = await c.expect("MESSAGE", redelivered="true")
        assert (again.body, again.headers["message-id"]) == (b"b", mb.headers["message-id"])
        await c.receipt("ACK", ack_headers(version, again))
        assert stomp_broker.unacked("/queue/n") == 1  # "a" is still unacked
        await c.receipt("ACK", ack_headers(version, ma))
        assert stomp_broker.unacked("/queue/n") == 0


async def test_nack_in_client_mode_is_cumulative(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/nc", ack="client", prefetch_count="3")
        for i in range(3):
            await c.send("SEND", {"destination": "/queue/nc"}, b"%d" % i)
        ms = await c.messages(3)
        await c.send("NACK", {"id": ms[1].headers["ack"]})
        again = await c.messages(2)
        assert bodies(again) == [b"0", b"1"]
        assert [m.headers.get("redelivered") for m in again] == ["true", "true"]
        assert stomp_broker.unacked("/queue/nc") == 3


@pytest.mark.stomp_broker(nack="drop")
async def test_nack_drop_discards(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/nd", ack="client-individual")
        await c.send("SEND", {"destination": "/queue/nd"}, b"x")
        m = await c.expect("MESSAGE")
        await c.receipt("NACK", {"id": m.headers["ack"]})
        assert (stomp_broker.queue_depth("/queue/nd"), stomp_broker.unacked("/queue/nd")) == (0, 0)
        assert stomp_broker.stats.messages_discarded == 1


# ------------------------------------------------------------------ prefetch


@pytest.mark.parametrize("header", ["prefetch-count", "activemq.prefetchSize"])
async def test_prefetch_limits_unacked_messages(stomp_broker, header):
    async with await connect(stomp_broker) as c:
        await c.receipt("SUBSCRIBE", {"id": "0", "destination": "/queue/pf", "ack": "client-individual",
                                      header: "2"})
        for i in range(5):
            await c.send("SEND", {"destination": "/queue/pf"}, b"%d" % i)
        ms = await c.messages(2)
        await c.sync()  # no third message
        assert (stomp_broker.queue_depth("/queue/pf"), stomp_broker.unacked("/queue/pf")) == (3, 2)
        await c.send("ACK", {"id": ms[1].headers["ack"]})
        assert (await c.expect("MESSAGE")).body == b"2"
        await c.sync()
        assert (stomp_broker.queue_depth("/queue/pf"), stomp_broker.unacked("/queue/pf")) == (2, 2)


async def test_prefetch_moves_messages_to_the_consumer_with_room(stomp_broker):
    async with await connect(stomp_broker) as a, await connect(stomp_broker) as b:
        await subscribe(a, "/queue/room", ack="client", prefetch_count="1")
        await subscribe(b, "/queue/room", ack="client", prefetch_count="0")  # 0 = unlimited
        for i in range(4):
            await a.send("SEND", {"destination": "/queue/room"}, b"%d" % i)
        assert bodies(await a.messages(1)) == [b"0"]
        assert bodies(await b.messages(3)) == [b"1", b"2", b"3"]


async def test_prefetch_does_not_apply_to_auto(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/pfa", prefetch_count="1")
        for i in range(3):
            await c.send("SEND", {"destination": "/queue/pfa"}, b"%d" % i)
        assert bodies(await c.messages(3)) == [b"0", b"1", b"2"]


# ------------------------------------------------------------------ transactions


async def test_transactional_sends_wait_for_commit(stomp_broker):
    async with await connect(stomp_broker) as c, await connect(stomp_broker) as consumer:
        await subscribe(consumer, "/queue/tx")
        await c.send("BEGIN", {"transaction": "t1"})
        await c.send("SEND", {"destination": "/queue/tx", "transaction": "t1"}, b"1")
        await c.send("SEND", {"destination": "/queue/tx"}, b"outside")
        await c.receipt("SEND", {"destination": "/queue/tx", "transaction": "t1"}, b"2")
        assert bodies(await consumer.messages(1)) == [b"outside"]
        await consumer.sync()
        await c.receipt("COMMIT", {"transaction": "t1"})
        assert bodies(await consumer.messages(2)) == [b"1", b"2"]


async def test_abort_discards_sends(stomp_broker):
    async with await connect(stomp_broker) as c:
        await c.send("BEGIN", {"transaction": "t1"})
        await c.send("SEND", {"destination": "/queue/ab", "transaction": "t1"}, b"1")
        await c.receipt("ABORT", {"transaction": "t1"})
        await c.receipt("BEGIN", {"transaction": "t1"})  # the id can be used again
        assert stomp_broker.queue_depth("/queue/ab") == 0


async def test_disconnect_aborts_open_transactions(stomp_broker):
    async with await connect(stomp_broker) as c:
        await c.send("BEGIN", {"transaction": "t1"})
        await c.send("SEND", {"destination": "/queue/dab", "transaction": "t1"}, b"1")
        await c.send("DISCONNECT", {"receipt": "bye"})
        await c.expect_closed()
    assert stomp_broker.queue_depth("/queue/dab") == 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_transactional_acks_wait_for_commit_and_abort_leaves_them_unacked(stomp_broker, version):
    async with await connect(stomp_broker, version) as c:
        await subscribe(c, "/queue/tack", ack="client-individual")
        await c.send("SEND", {"destination": "/queue/tack"}, b"a")
        await c.send("SEND", {"destination": "/queue/tack"}, b"b")
        ma, mb = await c.messages(2)
        await c.send("BEGIN", {"transaction": "t"})
        await c.receipt("ACK", {**ack_headers(version, ma), "transaction": "t"})
        assert stomp_broker.unacked("/queue/tack") == 2
        await c.receipt("COMMIT", {"transaction": "t"})
        assert stomp_broker.unacked("/queue/tack") == 1
        await c.send("BEGIN", {"transaction": "u"})
        await c.send("ACK", {**ack_headers(version, mb), "transaction": "u"})
        await c.receipt("ABORT", {"transaction": "u"})
        assert stomp_broker.unacked("/queue/tack") == 1
        await c.receipt("ACK", ack_headers(version, mb))  # still ackable after the abort
        assert stomp_broker.unacked("/queue/tack") == 0


async def test_transactional_nack_waits_for_commit(stomp_broker):
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/tn", ack="client-individual")
        await c.send("SEND", {"destination": "/queue/tn"}, b"a")
        m = await c.expect("MESSAGE")
        await c.send("BEGIN", {"transaction": "t"})
        await c.receipt("NACK", {"id": m.headers["ack"], "transaction": "t"})
        await c.send("COMMIT", {"transaction": "t"})
        await c.expect("MESSAGE", redelivered="true")


# ------------------------------------------------------------------ introspection and server-side actions


async def test_introspection(stomp_broker):
    assert stomp_broker.url == f"stomp://127.0.0.1:{stomp_broker.port}/"
    async with await connect(stomp_broker) as c:
        assert stomp_broker.connections == 1
        assert stomp_broker.sessions == ["session-1"]
        await subscribe(c, "/queue/i", ack="client")
        stomp_broker.publish("/queue/i", "from the broker", {"k": "v", "receipt": "dropped"})
        m = await c.expect("MESSAGE", k="v")
        assert m.body == b"from the broker" and "receipt" not in m.headers
        assert stomp_broker.unacked("/queue/i") == 1
        assert stomp_broker.consumers("/queue/i") == 1
        await c.send("DISCONNECT", {"receipt": "bye"})
        await c.expect_closed()
    await stomp_broker.wait_for(lambda: stomp_broker.connections == 0)
    assert stomp_broker.queue_depth("/queue/i") == 1 and stomp_broker.unacked("/queue/i") == 0
    assert stomp_broker.purge("/queue/i") == 1 and stomp_broker.queue_depth("/queue/i") == 0
    stats = stomp_broker.stats
    assert stats.frames_in == {"CONNECT": 1, "SUBSCRIBE": 1, "DISCONNECT": 1}
    assert stats.frames_out == {"CONNECTED": 1, "RECEIPT": 2, "MESSAGE": 1}
    assert stats.connections_accepted == 1
    assert [f.command for f in stomp_broker.received] == ["CONNECT", "SUBSCRIBE", "DISCONNECT"]
    assert stomp_broker.received[1] == Frame(
        "SUBSCRIBE", {"id": "0", "destination": "/queue/i", "ack": "client", "receipt": "sub-0"}
    )
    stomp_broker.clear_received()
    assert stomp_broker.received == []
    with pytest.raises(ValueError):
        stomp_broker.queue_depth("nowhere")
    with pytest.raises(ValueError):
        stomp_broker.publish("nowhere", b"")
    assert stomp_broker.errors == []


async def test_wait_for_times_out(stomp_broker):
    with pytest.raises(TimeoutError):
        await stomp_broker.wait_for(lambda: stomp_broker.connections == 5, timeout=0.1)


@pytest.mark.stomp_broker(record=False)
async def test_recording_can_be_off(stomp_broker):
    async with await connect(stomp_broker) as c:
        await c.sync()
    assert stomp_broker.received == []
    assert stomp_broker.stats.frames_in["BEGIN"] == 1


@pytest.mark.stomp_broker(record_limit=3)
async def test_recording_is_bounded(stomp_broker):
    async with await connect(stomp_broker) as c:
        for i in range(5):
            await c.send("SEND", {"destination": "/queue/rec"}, b"%d" % i)
        await c.sync()
    assert [f.command for f in stomp_broker.received] == ["SEND", "BEGIN", "ABORT"]


async def test_slow_consumer_is_throttled_and_loses_nothing(stomp_broker):
    """A consumer that does not read stops getting messages (they wait in the queue) until it reads."""
    async with await connect(stomp_broker) as c:
        await subscribe(c, "/queue/slow")
        chunk = b"x" * 65536
        n = 160  # 10 MiB: more than the outbox bound plus any loopback socket buffers
        for i in range(n):
            stomp_broker.publish("/queue/slow", chunk, {"n": str(i)})
        await anyio.sleep(0.05)
        assert stomp_broker.queue_depth("/queue/slow") > 0
        got = [int(m.headers["n"]) for m in await c.messages(n, timeout=10)]
        assert got == list(range(n))
        assert stomp_broker.queue_depth("/queue/slow") == 0
