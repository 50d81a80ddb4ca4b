"""``send(..., content_length=False)``: a SEND without ``content-length``, both clients.

ActiveMQ and Artemis make a JMS TextMessage of a SEND without ``content-length`` and a
BytesMessage of one with it. Without the header the frame ends at the first NUL, so a body
holding one is refused before anything is sent. On the real brokers:
tests/integration/test_content_length_brokers.py.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client, LocalProtocolError
from stompfast._protocol import StompProtocol
from stompfast.testing import Broker

WAIT = 5


def connected(version: str = "1.2") -> StompProtocol:
    protocol = StompProtocol(host="/", heart_beat=(0, 0))
    protocol.connect()
    protocol.receive_data(b"CONNECTED\nversion:%s\n\n\x00" % version.encode())
    return protocol


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_the_frame_has_every_header_but_content_length(version):
    protocol = connected(version)
    data, receipt_id = protocol.send(
        "/queue/a", b"hello", {"x-kind": "greeting"}, content_type="text/plain", receipt=True, content_length=False
    )
    assert data == b"SEND\ndestination:/queue/a\ncontent-type:text/plain\nreceipt:%s\nx-kind:greeting\n\nhello\x00" % (
        receipt_id.encode()
    )
    # the frame the broker reads back is the body, whole
    assert protocol.send("/queue/a", b"", content_length=False)[0] == b"SEND\ndestination:/queue/a\n\n\x00"


def test_a_body_with_a_nul_or_a_content_length_header_is_refused():
    protocol = connected()
    with pytest.raises(LocalProtocolError, match="offset 3"):
        protocol.send("/queue/a", b"abc\x00def", content_length=False)
    with pytest.raises(LocalProtocolError, match="contradict"):
        protocol.send("/queue/a", b"abc", {"content-length": "3"}, content_length=False)
    # with the header (the default) the same body goes out whole
    data, _ = protocol.send("/queue/a", b"abc\x00def")
    assert b"content-length:7\n" in data


def test_a_transactional_send_without_length_names_its_transaction():
    protocol = connected()
    _, tx, _ = protocol.begin()
    data, _ = protocol.send("/queue/a", b"x", transaction=tx, content_length=False)
    assert data == b"SEND\ndestination:/queue/a\ntransaction:%s\n\nx\x00" % tx.encode()


def sends(broker: Broker):
    return [f for f in broker.received if f.command == "SEND"]


@pytest.mark.anyio
async def test_the_async_client_sends_without_length_and_refuses_a_nul():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False) as client:
            async with client.subscribe("/queue/t") as sub:
                await client.send("/queue/t", "héllo", content_length=False)
                await client.send("/queue/t", b"second", content_length=False, receipt=True)
                with pytest.raises(LocalProtocolError):
                    await client.send("/queue/t", b"a\x00b", content_length=False)
                with anyio.fail_after(WAIT):
                    bodies = [(await sub.receive()).body for _ in range(2)]
        assert bodies == ["héllo".encode(), b"second"]
        assert [dict(f.headers).get("content-length") for f in sends(broker)] == [None, None]


def test_the_blocking_client_sends_without_length_in_order(stomp_broker_thread: Broker):
    broker = stomp_broker_thread
    with Client(broker.url, heart_beat=(0, 0), reconnect=False) as client:
        with client.subscribe("/queue/ts") as sub:
            client.send("/queue/ts", b"1")
            client.send("/queue/ts", b"2", content_length=False)
            client.send("/queue/ts", b"3", content_length=False, receipt=True, timeout=WAIT)
            client.send("/queue/ts", b"4", content_length=False, receipt=True, wait=False).result(WAIT)
            with pytest.raises(LocalProtocolError):
                client.send("/queue/ts", b"a\x00b", content_length=False, timeout=WAIT)
            assert [sub.receive(timeout=WAIT).body for _ in range(4)] == [b"1", b"2", b"3", b"4"]
    assert [dict(f.headers).get("content-length") for f in sends(broker)] == ["1", None, None, None]
