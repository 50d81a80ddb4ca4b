"""TLS and STOMP over WebSocket against real RabbitMQ, on every anyio backend.

``scripts/brokers.sh start`` opens RabbitMQ's STOMP TLS listener (127.0.0.1:61617,
a throwaway CA) and Web-STOMP (127.0.0.1:15674/ws); ``scripts/brokers.sh env``
exports STOMPFAST_RABBITMQ_TLS_URL, STOMPFAST_TLS_CA, STOMPFAST_TLS_BAD_CA and
STOMPFAST_RABBITMQ_WS_URL. Without them (or when the broker does not answer)
these tests skip, unless STOMPFAST_REQUIRE_BROKERS=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from typing import Dict, Optional

import anyio
import pytest
from brokerenv import broker_url, rabbitmq_node

from stompfast import AsyncClient, ConnectError, ConnectionLostError, Message, TLSError
from stompfast._config import parse_url

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10
_answers: Dict[str, Optional[str]] = {}


def _require(message: str) -> None:
    if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
        pytest.fail(message)
    pytest.skip(message)


#: URL variables derived from brokers.sh's port variables when not set (tests/brokerenv.py)
_DERIVED = {"STOMPFAST_RABBITMQ_TLS_URL": "rabbitmq_tls", "STOMPFAST_RABBITMQ_WS_URL": "rabbitmq_ws"}


def _env(*names: str) -> Dict[str, str]:
    found = {n: broker_url(_DERIVED[n]) if n in _DERIVED else os.environ.get(n, "") for n in names}
    missing = [n for n, value in found.items() if not value]
    if missing:
        _require(f"{', '.join(missing)} not set (eval \"$(scripts/brokers.sh env)\")")
    return found


def _tls_problem(url: str, cafile: str) -> Optional[str]:
    """None when a STOMP CONNECT over TLS is answered with CONNECTED, else why not."""
    ep = parse_url(url)
    try:
        ctx = ssl.create_default_context(cafile=cafile)
        with socket.create_connection((ep.host, ep.port), timeout=3) as raw:
            with ctx.wrap_socket(raw, server_hostname=ep.host) as s:
                s.settimeout(5)
                s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
                return None if s.recv(64).startswith(b"CONNECTED") else "no CONNECTED"
    except (OSError, ssl.SSLError) as exc:
        return str(exc)


@pytest.fixture(scope="module")
def tls() -> Dict[str, str]:
    """The TLS URL and CA files; the listener restored once if it went away.

    The listener is added to the running rabbitmq_stomp by brokers.sh; a restart of
    RabbitMQ's app by anything but brokers.sh (which adds it again) drops it.
    """
    env = _env("STOMPFAST_RABBITMQ_TLS_URL", "STOMPFAST_TLS_CA", "STOMPFAST_TLS_BAD_CA")
    url, ca = env["STOMPFAST_RABBITMQ_TLS_URL"], env["STOMPFAST_TLS_CA"]
    problem = _tls_problem(url, ca)
    script = os.environ.get("STOMPFAST_BROKERS_SCRIPT")
    if problem is not None and script:
        subprocess.run(["bash", script, "start", rabbitmq_node()], check=False, timeout=180)
        problem = _tls_problem(url, ca)
    if problem is not None:
        _require(f"RabbitMQ does not answer STOMP over TLS at {url}: {problem} (scripts/brokers.sh start)")
    return env


@pytest.fixture(scope="module")
def ws_url() -> str:
    url = _env("STOMPFAST_RABBITMQ_WS_URL")["STOMPFAST_RABBITMQ_WS_URL"]
    ep = parse_url(url)
    try:
        socket.create_connection((ep.host, ep.port), timeout=3).close()
    except OSError as exc:
        _require(f"RabbitMQ Web-STOMP does not answer at {url}: {exc} (scripts/brokers.sh start)")
    return url


def trusting(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


async def receive(sub) -> Message:
    with anyio.fail_after(WAIT):
        return await sub.receive()


# -- TLS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
async def test_tls_round_trip(tls, queue, version):
    async with AsyncClient(
        tls["STOMPFAST_RABBITMQ_TLS_URL"], ssl=trusting(tls["STOMPFAST_TLS_CA"]), versions=[version],
        heart_beat=(500, 500),
    ) as c:
        assert c.version == version
        assert c.server.startswith("RabbitMQ/")
        body = os.urandom(1 << 20)
        async with c.subscribe(queue, ack="client" if version == "1.0" else "client-individual") as sub:
            await c.send(queue, body, receipt=True)
            await c.send(queue, b"nul\x00inside", receipt=True)
            first = await receive(sub)
            assert first.body == body
            await first.ack(receipt=True)
            second = await receive(sub)
            assert second.body == b"nul\x00inside"
            await second.ack(receipt=True)
        await c.flush()


async def test_tls_localhost_name_is_in_the_certificate(tls, queue):
    async with AsyncClient(
        tls["STOMPFAST_RABBITMQ_TLS_URL"], ssl=trusting(tls["STOMPFAST_TLS_CA"]), server_hostname="localhost",
        heart_beat=(0, 0),
    ) as c:
        async with c.subscribe(queue) as sub:
            await c.send(queue, "hello", receipt=True)
            assert (await receive(sub)).text == "hello"


async def test_tls_certificate_of_an_untrusted_ca_is_refused(tls):
    with pytest.raises(TLSError) as info:
        async with AsyncClient(tls["STOMPFAST_RABBITMQ_TLS_URL"], ssl=trusting(tls["STOMPFAST_TLS_BAD_CA"])):
            pass
    assert info.value.reason == "CERTIFICATE_VERIFY_FAILED"
    # RabbitMQ sends its CA along: "self-signed certificate in certificate chain"
    assert info.value.verify_message
    assert "not signed by a CA this SSL context trusts" in str(info.value)


async def test_tls_default_context_refuses_the_test_ca(tls):
    # the URL scheme alone: ssl.create_default_context(), whose system CAs did not sign it
    with pytest.raises(TLSError, match="certificate was refused"):
        async with AsyncClient(tls["STOMPFAST_RABBITMQ_TLS_URL"]):
            pass


async def test_tls_host_name_mismatch_is_refused(tls):
    with pytest.raises(TLSError) as info:
        async with AsyncClient(
            tls["STOMPFAST_RABBITMQ_TLS_URL"], ssl=trusting(tls["STOMPFAST_TLS_CA"]), server_hostname="wrong.example"
        ):
            pass
    assert "wrong.example" in info.value.verify_message


async def test_plain_stomp_on_the_tls_port_is_told_so(tls):
    with pytest.raises(ConnectError, match="TLS port"):
        async with AsyncClient(tls["STOMPFAST_RABBITMQ_TLS_URL"], ssl=False, connect_timeout=5):
            pass


# -- WebSocket (rabbitmq_web_stomp) ----------------------------------------------------------


@pytest.mark.parametrize("version", ["1.1", "1.2"])
async def test_ws_round_trip(ws_url, queue, version):
    async with AsyncClient(ws_url, versions=[version], heart_beat=(500, 500)) as c:
        assert c.version == version
        assert c.server.startswith("RabbitMQ/")
        big = b"0123456789abcdef" * (1 << 16)  # 1 MiB
        nuls = b"\x00binary\x00with\x00NULs\x00\x01\x02\x7f"
        async with c.subscribe(queue, ack="client-individual") as sub:
            receipts = [
                await c.send(queue, big, receipt=True, wait=False),
                await c.send(queue, nuls, receipt=True, wait=False),
                await c.send(queue, "ünïcode ✓", receipt=True, wait=False),
            ]
            await c.wait_receipts(receipts)
            got = [await receive(sub) for _ in range(3)]
            assert [m.body for m in got] == [big, nuls, "ünïcode ✓".encode()]
            for m in got:
                await m.ack(receipt=True)
        # idle for two heart-beat intervals: EOLs travel as WebSocket messages both ways
        await anyio.sleep(1.2)
        assert c.is_connected
        await c.flush()


async def test_ws_many_frames_per_message(ws_url, queue):
    async with AsyncClient(ws_url, heart_beat=(0, 0)) as c:
        async with c.subscribe(queue) as sub:
            for i in range(200):
                await c.send(queue, b"m%d" % i)
            await c.flush()
            assert [(await receive(sub)).body for _ in range(200)] == [b"m%d" % i for i in range(200)]


async def test_ws_text_frames_cannot_carry_bytes_that_are_not_utf8(ws_url, queue):
    # RabbitMQ's Web-STOMP sends text frames unless web_stomp.ws_frame = binary; RFC 6455
    # text must be UTF-8, so such a body ends the connection with a clear error (docs/tls.md)
    async with AsyncClient(ws_url, heart_beat=(0, 0), reconnect=False) as c:
        async with c.subscribe(queue) as sub:
            await c.send(queue, bytes(range(256)))
            with pytest.raises(ConnectionLostError, match="1007"):
                await receive(sub)


async def test_ws_bad_path_is_refused_with_its_status(ws_url):
    ep = parse_url(ws_url)
    with pytest.raises(ConnectError) as info:
        async with AsyncClient(f"ws://guest:guest@{ep.host}:{ep.port}/not-stomp", connect_timeout=5):
            pass
    assert info.value.status_code == 404
    assert "HTTP 404" in str(info.value)


async def test_ws_close_ends_when_rabbitmq_closes_the_websocket(ws_url, queue):
    # RabbitMQ answers DISCONNECT by closing the WebSocket, without the RECEIPT: the close
    # must end then, not sit out disconnect_timeout (5 s by default)
    async with AsyncClient(ws_url, heart_beat=(0, 0)) as c:
        await c.send(queue, b"x", receipt=True)
        started = anyio.current_time()
    assert anyio.current_time() - started < 1.0
