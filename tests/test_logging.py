"""What the client logs for operators: connects, failed connects, losses, reconnects, giving up, closing.

Loggers ``stompfast.client`` and ``stompfast.reconnect`` (docs/client.md, Logging);
never a passcode (tests/test_security.py checks the same records for it).
"""

from __future__ import annotations

import logging
from typing import List, Tuple

import anyio
import pytest

from stompfast import AsyncClient, ConnectError, ReconnectPolicy
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(30)]


def _records(caplog: pytest.LogCaptureFixture) -> List[Tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("stompfast")]


@pytest.mark.anyio
async def test_a_session_lost_and_reestablished_is_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="stompfast")
    async with Broker() as broker:
        client = AsyncClient(broker.url, heart_beat=(0, 0),
                             reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0))
        async with client:
            broker.drop_connections()
            with anyio.fail_after(10):
                while client.reconnects < 1:
                    await anyio.sleep(0.01)
    records = _records(caplog)
    kinds = [(name, level) for name, level, _ in records]
    messages = [m for _, _, m in records]
    assert ("stompfast.client", logging.INFO) in kinds
    assert any(m.startswith("connected to " + broker.url.rstrip("/")) and "STOMP 1.2" in m for m in messages)
    lost = [m for name, level, m in records if level == logging.WARNING and "lost after" in m]
    assert lost and "closed the connection" in lost[0]
    assert any(name == "stompfast.reconnect" and m.startswith("reconnecting in") for name, _, m in records)
    assert any(m.startswith("reconnected to") for m in messages)
    assert any(m.startswith("closing the connection to") for m in messages)


@pytest.mark.anyio
async def test_a_refused_connect_and_giving_up_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="stompfast")
    with pytest.raises(ConnectError):
        async with AsyncClient("stomp://127.0.0.1:1/", connect_timeout=2, reconnect=False):
            pass
    assert [(n, lvl) for n, lvl, m in _records(caplog) if m.startswith("could not connect to")] == [
        ("stompfast.client", logging.WARNING)
    ]
    caplog.clear()
    async with Broker() as broker:
        client = AsyncClient(broker.url, heart_beat=(0, 0),
                             reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.01, jitter=0, max_attempts=2))
        async with client:
            broker.refuse_connections()  # from now on: two attempts, then the client gives up
            broker.drop_connections()
            with anyio.fail_after(10):
                while client.error is None:
                    await anyio.sleep(0.01)
    assert any(n == "stompfast.reconnect" and lvl == logging.ERROR and m.startswith("gave up reconnecting")
               for n, lvl, m in _records(caplog))


@pytest.mark.anyio
async def test_a_session_failing_without_reconnect_is_logged(caplog):
    caplog.set_level(logging.INFO, logger="stompfast")
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False) as client:
            broker.drop_connections()
            with anyio.fail_after(10):
                while client.error is None:
                    await anyio.sleep(0.01)
    assert any(lvl == logging.WARNING and m.startswith("connection to") and "failed" in m
               for _, lvl, m in _records(caplog))


@pytest.mark.anyio
async def test_frames_are_logged_at_debug_without_passcodes_or_whole_bodies(caplog):
    from stompfast._framelog import BODY_PREVIEW

    caplog.set_level(logging.DEBUG, logger="stompfast.frames")
    body = b"B" * (BODY_PREVIEW * 4)
    async with Broker() as broker:
        async with AsyncClient(broker.url, login="guest", passcode="s3cret-pass", heart_beat=(0, 0)) as client:
            async with client.subscribe("/queue/logged", ack="client-individual") as sub:
                await client.send("/queue/logged", body, headers={"x-id": "7"}, receipt=True)
                with anyio.fail_after(10):
                    message = await sub.receive()
                await message.ack(receipt=True)
    lines = [m for name, _, m in _records(caplog) if name == "stompfast.frames"]
    text = "\n".join(lines)
    assert "s3cret-pass" not in text and "passcode:***" in text
    sent = [m for m in lines if " > SEND " in m]
    assert len(sent) == 1 and "x-id:7" in sent[0] and f"({len(body)} bytes: " in sent[0]
    assert ("B" * (BODY_PREVIEW + 1)) not in text  # bodies never in full
    for command in ("CONNECT", "SUBSCRIBE", "ACK", "DISCONNECT"):
        assert any(f" > {command} " in m for m in lines), command
    for command in ("CONNECTED", "MESSAGE", "RECEIPT"):
        assert any(f" < {command} " in m for m in lines), command


@pytest.mark.anyio
async def test_frames_are_not_logged_below_debug(caplog):
    caplog.set_level(logging.INFO, logger="stompfast")
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            await client.send("/queue/quiet", b"x", receipt=True)
    assert not [r for r in caplog.records if r.name == "stompfast.frames"]
