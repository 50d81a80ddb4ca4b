"""``send(..., content_length=False)`` on the real brokers, both clients.

Every broker delivers the body whole. ActiveMQ Classic shows what it made of the SEND: a
TextMessage reaches a STOMP consumer without ``content-length``, a BytesMessage with it.
Artemis stores a SEND without ``content-length`` as a TextMessage too (its STOMP docs) but
delivers both kinds with the header, so over STOMP only the body can be checked there.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client

WAIT = 10
BODY = "héllo, TextMessage"


@pytest.mark.anyio
async def test_a_send_without_length_arrives_whole_and_as_text_on_activemq(broker, broker_url, queue):
    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        async with client.subscribe(queue) as sub:
            await client.send(queue, BODY, receipt=True)
            await client.send(queue, BODY, receipt=True, content_length=False)
            with anyio.fail_after(WAIT):
                as_bytes, as_text = await sub.receive(), await sub.receive()
    assert as_bytes.text == as_text.text == BODY
    if broker == "activemq":
        assert "content-length" in as_bytes.headers and "content-length" not in as_text.headers


def test_the_blocking_client_sends_without_length(broker, broker_url, queue):
    with Client(broker_url, heart_beat=(0, 0)) as client:
        with client.subscribe(queue) as sub:
            client.send(queue, BODY, content_length=False)
            client.send(queue, BODY, content_length=False, receipt=True, timeout=WAIT)
            received = [sub.receive(timeout=WAIT) for _ in range(2)]
    assert [m.text for m in received] == [BODY, BODY]
    if broker == "activemq":
        assert all("content-length" not in m.headers for m in received)
