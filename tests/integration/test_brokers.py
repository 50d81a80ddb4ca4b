"""AsyncClient against real brokers: every broker, every STOMP version, every anyio backend.

What differs between the brokers is asserted per broker, not papered over:
NACK (RabbitMQ redelivers at once, ActiveMQ dead-letters), authentication
(ActiveMQ as configured here accepts any login), and the 1.2 ``ack`` header
(ActiveMQ's differs from the message-id and holds escaped colons).
"""

from __future__ import annotations

import os

import anyio
import pytest

from stompfast import AsyncClient, AuthenticationError, LocalProtocolError, Message, RemoteProtocolError, ServerError

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10  # seconds any single broker round trip may take before the test fails


def client(url: str, version: str, **kwargs) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    kwargs.setdefault("reconnect", False)  # these tests pin single-connection semantics
    return AsyncClient(url, versions=[version], **kwargs)


async def receive(sub) -> Message:
    with anyio.fail_after(WAIT):
        return await sub.receive()


async def test_connect_and_negotiate(broker, broker_url, version):
    async with client(broker_url, version) as c:
        assert c.version == version
        if broker == "artemis" and version == "1.0":
            assert c.server is None  # Artemis names itself on 1.1 and 1.2 only
        else:
            assert c.server.startswith(
                {"rabbitmq": "RabbitMQ/", "activemq": "ActiveMQ/", "artemis": "ActiveMQ-Artemis/"}[broker]
            )
        assert c.session
        assert c.is_connected
    assert not c.is_connected


async def test_negotiates_the_highest_common_version(broker_url):
    async with AsyncClient(broker_url, heart_beat=(0, 0)) as c:
        assert c.version == "1.2"


@pytest.mark.parametrize(
    "body",
    [b"", b"text", bytes(range(256)) * 4, b"nul\x00in\x00the\x00middle\x00", b"\x00" * 10, os.urandom(1 << 20)],
    ids=["empty", "text", "all-bytes", "nuls", "only-nuls", "1MiB"],
)
async def test_binary_bodies_round_trip_unaltered(broker_url, version, queue, body):
    async with client(broker_url, version) as c:
        async with c.subscribe(queue) as sub:
            await c.send(queue, body, receipt=True)
            msg = await receive(sub)
            assert msg.body == body
            assert msg.destination == queue


async def test_text_body_is_utf8_with_content_type(broker_url, version, queue):
    async with client(broker_url, version) as c:
        async with c.subscribe(queue) as sub:
            await c.send(queue, "grüße, 世界")
            msg = await receive(sub)
            assert msg.body == "grüße, 世界".encode()
            assert msg.text == "grüße, 世界"
            assert msg.content_type == "text/plain;charset=utf-8"


async def test_special_characters_in_headers_round_trip(broker, broker_url, version, queue):
    value = "a:b\\c\nd"
    async with client(broker_url, version) as c:
        async with c.subscribe(queue) as sub:
            if version == "1.0" and broker in ("activemq", "artemis"):
                # ActiveMQ reads escapes on 1.0 but sends headers raw: a newline
                # would come back as a broken frame, so this one goes without. Artemis
                # names itself on 1.1+ only, so on 1.0 the client knows no escaping
                # rule for it and refuses a newline (STOMP 1.0 has no escapes).
                value = "a:b\\c"
            await c.send(queue, b"x", headers={"x-special": value, "x-plain": "ok"})
            msg = await receive(sub)
            assert msg.headers["x-special"] == value
            assert msg.headers["x-plain"] == "ok"


async def test_receipts_pipelined_and_flush(broker_url, version, queue):
    async with client(broker_url, version) as c:
        receipts = [await c.send(queue, b"%d" % i, receipt=True, wait=False) for i in range(50)]
        assert not all(r.done() for r in receipts)
        await c.send(queue, b"no receipt")
        with anyio.fail_after(WAIT):
            await c.flush()
        assert all(r.done() and r.error is None for r in receipts)
        async with c.subscribe(queue) as sub:
            bodies = [(await receive(sub)).body for _ in range(51)]
        assert bodies == [b"%d" % i for i in range(50)] + [b"no receipt"]


@pytest.mark.parametrize("mode", ["auto", "client", "client-individual"])
async def test_ack_modes_and_redelivery_after_a_consumer_leaves(broker, broker_url, version, queue, mode):
    # A consumer "leaves" by closing its connection: RabbitMQ requeues the unacked
    # messages of a cancelled subscription only when its connection closes.
    if mode == "client-individual" and version == "1.0":
        pytest.skip("client-individual does not exist in STOMP 1.0")
    async with client(broker_url, version) as producer:
        for i in range(4):
            await producer.send(queue, b"m%d" % i)
        await producer.flush()
    async with client(broker_url, version) as first:
        async with first.subscribe(queue, ack=mode, buffer_size=10) as sub:
            got = [await receive(sub) for _ in range(4)]
            assert [m.body for m in got] == [b"m0", b"m1", b"m2", b"m3"]
            assert not any(m.redelivered for m in got)
            if mode == "client":
                await got[1].ack()  # cumulative: m0 and m1
                await got[0].ack()  # already covered: sends nothing
            elif mode == "client-individual":
                await got[0].ack()
                await got[2].ack()
            await first.flush()
    expected = {"auto": [], "client": [b"m2", b"m3"], "client-individual": [b"m1", b"m3"]}[mode]
    async with client(broker_url, version) as second:
        async with second.subscribe(queue, ack="client", buffer_size=10) as sub:
            again = [await receive(sub) for _ in expected]
            assert [m.body for m in again] == expected
            if broker != "artemis":
                # (Artemis sets redelivered:true only on some redeliveries: not asserted there)
                assert all(m.redelivered for m in again)
            with anyio.move_on_after(0.5):
                extra = await sub.receive()
                pytest.fail(f"an acknowledged message came back: {extra!r}")
            if again:
                await again[-1].ack()
            await second.flush()


async def test_nack(broker, broker_url, version, queue):
    if version == "1.0":
        async with client(broker_url, version) as c:
            async with c.subscribe(queue, ack="client") as sub:
                await c.send(queue, b"x")
                msg = await receive(sub)
                with pytest.raises(LocalProtocolError):
                    await msg.nack()
                await msg.ack()
        return
    async with client(broker_url, version) as c:
        async with c.subscribe(queue, ack="client-individual") as sub:
            await c.send(queue, b"refused")
            first = await receive(sub)
            await first.nack(receipt=True)
            if broker == "rabbitmq":  # requeued and redelivered at once
                again = await receive(sub)
                assert (again.body, again.redelivered) == (b"refused", True)
                await again.ack(receipt=True)
            else:  # ActiveMQ dead-letters a NACKed message: it does not come back
                with anyio.move_on_after(1):
                    extra = await sub.receive()
                    pytest.fail(f"ActiveMQ redelivered a NACKed message: {extra!r}")


async def test_transaction_commit_and_abort(broker_url, version, queue):
    async with client(broker_url, version) as c:
        async with c.subscribe(queue, ack="client") as sub:
            async with c.transaction() as tx:
                await tx.send(queue, b"committed")
                with anyio.move_on_after(0.5):
                    early = await sub.receive()
                    pytest.fail(f"a transactional send was delivered before COMMIT: {early!r}")
            assert (await receive(sub)).body == b"committed"

            with pytest.raises(RuntimeError):
                async with c.transaction() as tx:
                    await tx.send(queue, b"aborted")
                    raise RuntimeError("roll back")
            await c.send(queue, b"after")
            msg = await receive(sub)
            assert msg.body == b"after"
            await msg.ack(receipt=True)


async def test_transactional_ack_takes_effect_on_commit(broker, broker_url, version, queue):
    async with client(broker_url, version) as c:
        await c.send(queue, b"once")
        async with c.subscribe(queue, ack="client") as sub:
            msg = await receive(sub)
            async with c.transaction() as tx:
                if broker == "artemis" and version != "1.0":
                    # Artemis acts on an ACK at once whatever its transaction: refused
                    # (test_artemis.py); the message is acked outside instead
                    with pytest.raises(LocalProtocolError, match="Artemis"):
                        await tx.ack(msg)
                    await msg.ack()
                else:
                    await tx.ack(msg)
        async with c.subscribe(queue, ack="client") as sub:
            with anyio.move_on_after(1):
                extra = await sub.receive()
                pytest.fail(f"an acked (committed) message came back: {extra!r}")


async def test_heart_beats_keep_an_idle_connection_alive(broker, broker_url, version, queue):
    async with client(broker_url, version, heart_beat=(500, 500)) as c:
        send_ms, receive_ms = c.heart_beat
        if broker == "artemis" and version == "1.0":
            # Artemis answers a 1.0 CONNECT without heart-beat (1.0 has none); RabbitMQ
            # and ActiveMQ beat on 1.0 too
            assert (send_ms, receive_ms) == (0, 0)
        else:
            assert send_ms > 0 and receive_ms > 0
        # 5 s: with our beats switched off, ActiveMQ dropped the client within 2.5 s, but
        # RabbitMQ and Artemis only later (measured), so a shorter idle would not catch a
        # silent client there
        await anyio.sleep(5)
        assert c.is_connected
        async with c.subscribe(queue) as sub:
            await c.send(queue, b"still here")
            assert (await receive(sub)).body == b"still here"


async def test_authentication_failure_is_surfaced(broker, broker_url, version):
    if broker == "activemq":
        pytest.skip("ActiveMQ as configured for these tests has no authentication plugin: any login is accepted")
    bad = broker_url.replace("guest:guest@", "guest:wrong@")
    with pytest.raises(AuthenticationError) as info:
        async with client(bad, version):
            pass
    expected = {"rabbitmq": "Bad CONNECT", "artemis": "password is invalid"}[broker]
    assert expected in str(info.value)


async def test_activemq_1_2_ack_header_differs_from_message_id(broker, broker_url, queue):
    if broker != "activemq":
        pytest.skip("an ActiveMQ trait")
    async with client(broker_url, "1.2") as c:
        async with c.subscribe(queue, ack="client-individual") as sub:
            await c.send(queue, b"x")
            msg = await receive(sub)
            assert msg.ack_id != msg.message_id and ":" in msg.ack_id
            await msg.ack(receipt=True)


async def test_an_error_in_the_middle_of_a_busy_subscription_is_the_brokers_error(broker, broker_url, queue):
    # ActiveMQ answers a SEND naming an unknown transaction with ERROR and keeps the
    # connection and its MESSAGE flow open, so the ERROR arrives in one read with
    # MESSAGEs before and after it. The messages before it must be delivered in
    # order, the error raised must be the broker's (not "MESSAGE while the session
    # is failed"), and nothing after it delivered. RabbitMQ closes after its ERROR.
    total = 3000
    if broker == "artemis":
        pytest.skip("Artemis drops a SEND naming an unknown transaction without an ERROR (measured): no ERROR to test")
    async with client(broker_url, "1.2") as producer:
        for i in range(total):
            await producer.send(queue, b"%d" % i)
        await producer.flush()
    async with client(broker_url, "1.2") as consumer:
        async with consumer.subscribe(queue, buffer_size=total) as sub:
            first = await receive(sub)
            assert first.body == b"0"
            await consumer.send(queue, b"bad", headers={"transaction": "no-such-transaction"})
            received = [first.body]
            with anyio.fail_after(WAIT):
                with pytest.raises((ServerError, RemoteProtocolError)) as info:
                    async for message in sub:
                        received.append(message.body)
            if isinstance(info.value, RemoteProtocolError):
                # ActiveMQ writes this ERROR and the MESSAGEs from two threads into one
                # buffer, and now and then one frame is written over another at any byte.
                # Caught on a raw socket, 4 runs in 40: "...1199\0\nROR\n...", a MESSAGE
                # written into the middle of the ERROR's stack trace, a content-length
                # body with no NUL after it. A framing fault wherever the damage lands is
                # then the right answer; what must never come back is "the broker sent
                # MESSAGE while the session is failed".
                assert broker == "activemq", info.value
                assert "while the session is" not in str(info.value), info.value
                ended_by = RemoteProtocolError
            else:
                assert "transaction" in str(info.value).lower(), info.value
                ended_by = ServerError
            # In order, nothing skipped. ActiveMQ itself sometimes sends the message
            # just before its ERROR twice (seen with a raw socket too: 3,001 MESSAGE
            # frames for 3,000 sends), so one duplicate is the broker's, not ours.
            distinct = list(dict.fromkeys(received))
            assert distinct == [b"%d" % i for i in range(len(distinct))]
            assert len(received) - len(distinct) <= 1
        assert isinstance(consumer.error, ended_by), consumer.error
