"""Extra headers on ACK and NACK (``message.ack(headers=...)``, ``message.nack(headers=...)``), both clients.

The headers a broker reads on a settle (RabbitMQ's ``requeue:false`` on NACK) go out as given;
the ones the client writes itself (the message's id, the transaction, the receipt) cannot be
given, and a refused call leaves the message unsettled. On RabbitMQ itself:
tests/integration/test_settle_brokers.py.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client, LocalProtocolError
from stompfast._protocol import StompProtocol
from stompfast.testing import Broker

WAIT = 5


def connected() -> StompProtocol:
    protocol = StompProtocol(host="/", heart_beat=(0, 0))
    protocol.connect()
    protocol.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    protocol.subscribe("/queue/a", ack="client-individual", id="0")
    return protocol


def delivered(protocol: StompProtocol, ack_id: str = "a1"):
    [message] = protocol.receive_data(
        b"MESSAGE\nsubscription:0\nmessage-id:m1\nack:%s\ndestination:/queue/a\n\nbody\x00" % ack_id.encode()
    )
    return message


def test_nack_headers_are_written_after_the_clients_own():
    protocol = connected()
    data, _ = protocol.nack(delivered(protocol), headers={"requeue": "false"})
    assert data == b"NACK\nid:a1\nrequeue:false\n\n\x00"
    protocol = connected()
    data, receipt_id = protocol.ack(delivered(protocol), headers={"x-note": "done"}, receipt=True)
    assert data == b"ACK\nid:a1\nx-note:done\nreceipt:%s\n\n\x00" % receipt_id.encode()


@pytest.mark.parametrize("name", ["id", "message-id", "subscription", "transaction", "receipt"])
def test_a_header_the_client_writes_is_refused_and_the_message_stays_unsettled(name):
    protocol = connected()
    message = delivered(protocol)
    with pytest.raises(LocalProtocolError, match=repr(name)):
        protocol.nack(message, headers={name: "x"})
    with pytest.raises(LocalProtocolError, match=repr(name)):
        protocol.ack(message, headers={name: "x"})
    # nothing was settled: the ack without it goes out
    data, _ = protocol.ack(message)
    assert data == b"ACK\nid:a1\n\n\x00"


def test_a_header_value_the_version_cannot_carry_is_refused():
    protocol = connected()
    message = delivered(protocol)
    with pytest.raises(LocalProtocolError):
        protocol.nack(message, headers={"requeue": "fal\x00se"})
    data, _ = protocol.nack(message)
    assert data == b"NACK\nid:a1\n\n\x00"


def settles(broker: Broker, command: str):
    return [dict(f.headers) for f in broker.received if f.command == command]


@pytest.mark.anyio
async def test_async_ack_and_nack_carry_their_headers_to_the_broker():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False) as client:
            async with client.subscribe("/queue/h", ack="client-individual") as sub:
                for body in (b"1", b"2", b"3"):
                    await client.send("/queue/h", body)
                with anyio.fail_after(WAIT):
                    first, second, third = [await sub.receive() for _ in range(3)]
                await first.nack(headers={"requeue": "false"})
                await second.ack(headers={"x-note": "kept"}, receipt=True)
                await client.nack(third, headers={"requeue": "false"})
                await client.flush()
        nacks, acks = settles(broker, "NACK"), settles(broker, "ACK")
        assert [n.get("requeue") for n in nacks] == ["false", "false"]
        assert [a.get("x-note") for a in acks] == ["kept"]


def test_sync_ack_and_nack_carry_their_headers_to_the_broker(stomp_broker_thread: Broker):
    broker = stomp_broker_thread
    with Client(broker.url, heart_beat=(0, 0), reconnect=False) as client:
        with client.subscribe("/queue/hs", ack="client-individual") as sub:
            for body in (b"1", b"2", b"3"):
                client.send("/queue/hs", body)
            first, second, third = (sub.receive(timeout=WAIT) for _ in range(3))
            first.nack(headers={"requeue": "false"}, timeout=WAIT)
            # refused in the calling thread, nothing settled: the next ack goes out
            with pytest.raises(LocalProtocolError):
                second.ack(headers={"id": "other"}, timeout=WAIT)
            second.ack(headers={"x-note": "kept"}, timeout=WAIT)
            client.nack(third, headers={"requeue": "false"}, timeout=WAIT)
            client.flush(timeout=WAIT)
    nacks, acks = settles(broker, "NACK"), settles(broker, "ACK")
    assert [n.get("requeue") for n in nacks] == ["false", "false"]
    assert [a.get("x-note") for a in acks] == ["kept"]
