"""A URL that names another service's port: the answer to CONNECT is not STOMP.

Tiny loopback servers answer like RabbitMQ's AMQP port, an HTTP server, a mail
server's banner, or a broken STOMP server; both clients must raise one
NotStompError (a ConnectError, so ``except ConnectionError`` catches it) that
names the host and port and quotes the first bytes, promptly, on every backend.
One test points the client at the real RabbitMQ's AMQP port.
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import time
from typing import Any, List, Tuple

import anyio
import pytest
from hostile import Conn, HostileServer, answering

from stompfast import (
    AsyncClient,
    Client,
    ConnectError,
    ConnectionEvent,
    NotStompError,
    ReconnectPolicy,
)
from stompfast._config import parse_url

pytestmark = [pytest.mark.timeout(60)]

AMQP = b"AMQP\x00\x00\x09\x01"
HTTP = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n"
        b"connection: close\r\n\r\nBad Request")
#: a banner with no line end, kept open: only the first bytes can tell (no frame ever ends)
BANNER = b"220 mail.example.test ESMTP"
#: (name, bytes sent in answer to CONNECT, keep the connection open, the quote in the message)
ANSWERS = [
    ("amqp", AMQP, False, r"b'AMQP\x00\x00\t\x01'"),
    ("http", HTTP, False, r"b'HTTP/1.1 400 Bad Request\r\n'..."),
    ("banner kept open", BANNER, True, "b'220 mail.example.test ESMTP'"),
    ("a MESSAGE before CONNECTED", b"MESSAGE\nsubscription:1\nmessage-id:1\n\nx\x00", True, r"b'MESSAGE\n'..."),
    ("a broken ERROR frame", b"ERROR\nno colon here\n\n\x00", True, r"b'ERROR\n'..."),
]
#: far above how long a prompt failure takes, far below what waiting for a timeout would
CONNECT_TIMEOUT = 10.0
PROMPT = 3.0

def check(exc: BaseException, port: int, data: bytes, quote: str) -> None:
    assert isinstance(exc, NotStompError) and isinstance(exc, ConnectError) and isinstance(exc, ConnectionError)
    assert str(exc).startswith(f"the server at 127.0.0.1:{port} does not speak STOMP (it answered {quote})"), exc
    assert (exc.host, exc.port, exc.received) == ("127.0.0.1", port, data[:64])
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is NotStompError and str(again) == str(exc) and again.received == exc.received


@pytest.mark.anyio
@pytest.mark.parametrize("name,data,keep_open,quote", ANSWERS, ids=[a[0] for a in ANSWERS])
async def test_async_client_raises_not_stomp(name: str, data: bytes, keep_open: bool, quote: str) -> None:
    with HostileServer(answering(data, keep_open)) as server:
        start = time.monotonic()
        with pytest.raises(NotStompError) as caught:
            async with AsyncClient(server.url, heart_beat=(0, 0), connect_timeout=CONNECT_TIMEOUT):
                pass  # pragma: no cover
        assert time.monotonic() - start < PROMPT
    check(caught.value, server.port, data, quote)


@pytest.mark.parametrize("name,data,keep_open,quote", ANSWERS, ids=[a[0] for a in ANSWERS])
def test_blocking_client_raises_not_stomp(backend: Any, name: str, data: bytes, keep_open: bool, quote: str) -> None:
    backend_name, options = backend
    with HostileServer(answering(data, keep_open)) as server:
        start = time.monotonic()
        with pytest.raises(NotStompError) as caught:
            with Client(server.url, heart_beat=(0, 0), connect_timeout=CONNECT_TIMEOUT, backend=backend_name,
                        backend_options=options):
                pass  # pragma: no cover
        assert time.monotonic() - start < PROMPT
    check(caught.value, server.port, data, quote)


@pytest.mark.anyio
async def test_a_stomp_server_that_breaks_the_session_keeps_its_own_error() -> None:
    # a CONNECTED the session refuses came from a STOMP server: not "does not speak STOMP"
    def handler(conn: Conn) -> None:
        conn.read_frame()
        conn.send("CONNECTED", {"version": "3.0"})
        conn.sock.settimeout(30)
        while conn.sock.recv(65536):
            pass

    with HostileServer(handler) as server:
        with pytest.raises(Exception) as caught:
            async with AsyncClient(server.url, heart_beat=(0, 0)):
                pass  # pragma: no cover
    assert not isinstance(caught.value, NotStompError) and "did not offer" in str(caught.value)


@pytest.mark.anyio
async def test_the_first_connect_retries_it_as_the_policy_says_like_any_connect_failure() -> None:
    events: List[ConnectionEvent] = []
    with HostileServer(answering(AMQP, False)) as server:
        policy = ReconnectPolicy(connect_attempts=2, initial_delay=0.01, jitter=0)
        with pytest.raises(NotStompError):
            async with AsyncClient(server.url, heart_beat=(0, 0), reconnect=policy, on_event=events.append):
                pass  # pragma: no cover
        assert server.connections == 2
    failed = [e for e in events if e.kind == "connect_failed"]
    assert len(failed) == 2 and all(isinstance(e.error, NotStompError) for e in failed)


@pytest.mark.anyio
async def test_a_reconnect_to_a_server_that_is_no_longer_stomp_is_a_failed_attempt() -> None:
    # the first connection is a STOMP session the server then resets; every later one
    # is answered like an AMQP port: each is a connect_failed event until the policy gives up
    def handler(conn: Conn) -> None:
        if conn.number == 1:
            conn.connected()
            time.sleep(0.1)
            conn.reset()
        else:
            answering(AMQP, False)(conn)

    events: List[ConnectionEvent] = []
    with HostileServer(handler) as server:
        policy = ReconnectPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
        async with AsyncClient(server.url, heart_beat=(0, 0), reconnect=policy, on_event=events.append) as client:
            with anyio.fail_after(10):
                while client.error is None:
                    await anyio.sleep(0.02)
        assert isinstance(client.error, NotStompError)
        assert server.connections == 3
    kinds = [e.kind for e in events]
    assert kinds.count("connect_failed") == 2 and kinds[-1] == "gave_up", kinds
    assert all(isinstance(e.error, NotStompError) for e in events if e.kind == "connect_failed")


def _rabbitmq_amqp() -> Tuple[str, int]:
    """127.0.0.1 and RabbitMQ's AMQP port (5672 unless STOMPFAST_RABBITMQ_AMQP_PORT), or skip."""
    url = os.environ.get("STOMPFAST_RABBITMQ_URL")
    if not url:
        pytest.skip("STOMPFAST_RABBITMQ_URL is not set (eval \"$(scripts/brokers.sh env)\")")
    host, port = parse_url(url).host, int(os.environ.get("STOMPFAST_RABBITMQ_AMQP_PORT", "5672"))
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        message = f"nothing listens on RabbitMQ's AMQP port {host}:{port}: {exc}"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return host, port


@pytest.mark.integration
def test_real_rabbitmq_amqp_port(backend: Any) -> None:
    host, port = _rabbitmq_amqp()
    backend_name, options = backend
    with pytest.raises(NotStompError) as caught:
        with Client(f"stomp://guest:guest@{host}:{port}/", backend=backend_name, backend_options=options):
            pass  # pragma: no cover
    expected = rf"the server at {re.escape(host)}:{port} does not speak STOMP \(it answered b'AMQP"
    assert re.match(expected, str(caught.value))
    assert caught.value.received.startswith(b"AMQP")
