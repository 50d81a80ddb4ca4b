"""STOMP over WebSocket against the real brokers: RabbitMQ's Web-STOMP and Artemis, on every anyio backend.

The client sends each write as WebSocket messages of at most
``websocket_max_message_bytes`` (default 65,536): a burst, and a STOMP frame longer
than that, span several messages. Artemis closes the connection on a WebSocket frame
whose payload is over 65,536 bytes (its default ``webSocketMaxFramePayloadLength``);
both brokers read the messages as one byte stream. These tests send large bodies and
bursts through both, and show what happens on Artemis without the cap.

``scripts/brokers.sh env`` exports STOMPFAST_RABBITMQ_WS_URL and STOMPFAST_ARTEMIS_WS_URL
(derived from the port variables when unset: tests/brokerenv.py). A broker that does not
answer a STOMP CONNECT over WebSocket is a skip, or a failure when
STOMPFAST_REQUIRE_BROKERS=1 (CI).
"""

from __future__ import annotations

import os
import socket
from typing import Dict, Optional

import anyio
import pytest
from brokerenv import broker_url as url_of

from stompfast import AsyncClient, ConnectionLostError
from stompfast._config import parse_url

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = 20
ARTEMIS_FRAME_LIMIT = 65536
#: broker -> its WebSocket URL's name in tests/brokerenv.py
WS_BROKERS = {"artemis": "artemis_ws", "rabbitmq": "rabbitmq_ws"}
_problems: Dict[str, Optional[str]] = {}


def _ws_problem(url: str) -> Optional[str]:
    """None when a STOMP CONNECT over a WebSocket at ``url`` is answered with CONNECTED, else why not."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, BytesMessage, Request, TextMessage

    ep = parse_url(url)
    ws = WSConnection(ConnectionType.CLIENT)
    received = b""
    try:
        with socket.create_connection((ep.host, ep.port), timeout=3) as s:
            s.settimeout(5)
            s.sendall(ws.send(Request(host=f"{ep.host}:{ep.port}", target=ep.path, subprotocols=["v12.stomp"])))
            accepted = False
            while b"\x00" not in received:
                data = s.recv(65536)
                if not data:
                    return "closed the connection"
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, AcceptConnection):
                        accepted = True
                        s.sendall(ws.send(BytesMessage(
                            data=b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")))
                    elif isinstance(event, (BytesMessage, TextMessage)):
                        received += event.data if isinstance(event.data, bytes) else event.data.encode()
                if not accepted and ws.state.name not in ("CONNECTING", "OPEN"):
                    return "the WebSocket upgrade was refused"
    except OSError as exc:
        return str(exc)
    return None if received.startswith(b"CONNECTED") else f"no CONNECTED: {received[:80]!r}"


@pytest.fixture(params=sorted(WS_BROKERS))
def ws_broker(request: pytest.FixtureRequest) -> "tuple[str, str]":
    """``(name, ws_url)`` of a broker that answers STOMP over WebSocket."""
    name = request.param
    url = url_of(WS_BROKERS[name])
    if url not in _problems:
        _problems[url] = _ws_problem(url)
    problem = _problems[url]
    if problem is not None:
        message = f"{name} does not answer STOMP over WebSocket at {url}: {problem} (scripts/brokers.sh start)"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return name, url


def _body(i: int, size: int) -> bytes:
    # ASCII (RabbitMQ sends text WebSocket messages), and different at every offset,
    # so that a lost, repeated or reordered piece cannot compare equal
    pattern = b"".join(b"%d:%07d;" % (i, n) for n in range(size // 10 + 1))
    return pattern[:size]


async def test_ws_large_bodies_round_trip(ws_broker, queue):
    name, url = ws_broker
    bodies = [_body(i, 200 * 1024) for i in range(3)]
    async with AsyncClient(url, heart_beat=(0, 0), reconnect=False) as client:
        assert client.server.startswith({"artemis": "ActiveMQ-Artemis/", "rabbitmq": "RabbitMQ/"}[name])
        async with client.subscribe(queue, ack="client-individual") as sub:
            for body in bodies:
                await client.send(queue, body, receipt=True)
            with anyio.fail_after(WAIT):
                for body in bodies:
                    message = await sub.receive()
                    assert message.body == body
                    await message.ack(receipt=True)


async def test_ws_burst_of_small_messages(ws_broker, queue):
    _, url = ws_broker
    n = 2000
    bodies = [b"burst %05d " % i + b"." * 100 for i in range(n)]
    async with AsyncClient(url, heart_beat=(0, 0), reconnect=False) as client:
        async with client.subscribe(queue, buffer_size=n) as sub:
            # sent without receipts, so that they leave as bursts of many frames per write
            for body in bodies:
                await client.send(queue, body)
            await client.send(queue, b"end", receipt=True)
            with anyio.fail_after(WAIT):
                assert [(await sub.receive()).body for _ in range(n)] == bodies
                assert (await sub.receive()).body == b"end"


async def test_ws_cap_raised_past_the_frame_limit(ws_broker, queue):
    # The risk the default cap removes: a 200 KiB SEND written as one WebSocket
    # frame. Artemis drops the connection (no close frame); RabbitMQ takes it.
    name, url = ws_broker
    body = _body(7, 200 * 1024)
    async with AsyncClient(
        url, heart_beat=(0, 0), reconnect=False, websocket_max_message_bytes=256 * 1024
    ) as client:
        async with client.subscribe(queue) as sub:
            await client.send(queue, b"small", receipt=True)  # under the limit: fine everywhere
            with anyio.fail_after(WAIT):
                assert (await sub.receive()).body == b"small"
            if name == "artemis":
                with pytest.raises(ConnectionLostError):
                    with anyio.fail_after(WAIT):
                        await client.send(queue, body, receipt=True)
                assert not client.is_connected
            else:
                await client.send(queue, body, receipt=True)
                with anyio.fail_after(WAIT):
                    assert (await sub.receive()).body == body
