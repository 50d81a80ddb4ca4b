"""A MESSAGE over max_frame_bytes on the in-process broker: skipped, delivered as an
OversizedMessage to ack or nack, and the connection goes on (issue 21, item 4).

Async tests run on asyncio, asyncio+uvloop and trio (``anyio_backend``); the blocking
client's on the same three as its loop thread's backend.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any, List, Optional, Tuple

import anyio
import pytest

from stompfast import AsyncClient, Client, MessageTooLargeError, OversizedMessage, SyncMessage
from stompfast.testing import Broker

LIMIT = 64 * 1024
BIG = b"x" * (300 * 1024)

BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]


def check_oversized(message: Any, destination: str) -> None:
    assert message.oversized is True
    assert isinstance(message, OversizedMessage)
    assert message.size == len(BIG)
    with pytest.raises(MessageTooLargeError) as info:
        _ = message.body
    exc = info.value
    assert (exc.size, exc.limit, exc.limit_name) == (len(BIG), LIMIT, "max_frame_bytes")
    assert exc.destination == destination and exc.subscription == message.subscription
    assert exc.message_id == message.message_id and exc.ack_id == message.ack_id
    assert exc.headers["content-length"] == str(len(BIG))
    assert exc.skipped_message is message
    with pytest.raises(MessageTooLargeError):
        _ = message.text
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.size, copy.message_id, copy.skipped_message) == (exc.size, exc.message_id, None)


@pytest.mark.anyio
@pytest.mark.timeout(30)
@pytest.mark.parametrize("ack", ["client-individual", "client", "auto"])
async def test_async_oversized_message_between_two_good_ones(ack):
    async with Broker(nack="drop") as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False, max_frame_bytes=LIMIT) as c:
            async with c.subscribe("/queue/big", ack=ack) as sub:
                await c.send("/queue/big", b"first", receipt=True)
                await c.send("/queue/big", BIG, receipt=True)
                await c.send("/queue/big", b"third", receipt=True)
                with anyio.fail_after(5):
                    first = await sub.receive()
                    assert first.body == b"first" and first.oversized is False
                    if ack != "auto":
                        await first.ack()
                    skipped = await sub.receive()
                    check_oversized(skipped, "/queue/big")
                    if ack == "client-individual":
                        await skipped.nack()  # refused: the broker drops or dead-letters it
                    elif ack == "client":
                        await skipped.ack()
                    third = await sub.receive()
                    assert third.body == b"third"
                    if ack != "auto":
                        await third.ack(receipt=True)
            assert c.is_connected
            assert c.stats().reconnects == 0 and c.error is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.timeout(30)
def test_sync_oversized_message_between_two_good_ones(backend, stomp_broker_thread):
    name, options = backend
    with Client(
        stomp_broker_thread.url, backend=name, backend_options=options, heart_beat=(0, 0), reconnect=False,
        max_frame_bytes=LIMIT,
    ) as c:
        with c.subscribe("/queue/big-sync", ack="client-individual") as sub:
            c.send("/queue/big-sync", b"first", receipt=True)
            c.send("/queue/big-sync", BIG, receipt=True)
            c.send("/queue/big-sync", b"third", receipt=True)
            first = sub.receive(timeout=5)
            assert first.body == b"first"
            first.ack()
            skipped = sub.receive(timeout=5)
            assert isinstance(skipped, SyncMessage)
            check_oversized(skipped, "/queue/big-sync")
            skipped.nack(receipt=True)  # blocks: the SyncMessage's nack
            third = sub.receive(timeout=5)
            assert third.body == b"third"
            third.ack(receipt=True)
            assert c.stats().reconnects == 0 and c.error is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.timeout(30)
def test_sync_callback_sees_the_error_with_the_message_to_nack(backend, stomp_broker_thread):
    name, options = backend
    bodies: List[bytes] = []
    errors: List[Tuple[BaseException, Optional[Any]]] = []
    done = threading.Event()

    def on_message(message: Any) -> None:
        bodies.append(message.body)  # raises for the oversized one: on_error gets it
        message.ack()
        if len(bodies) == 2:
            done.set()

    def on_error(error: BaseException, message: Optional[Any]) -> None:
        errors.append((error, message))
        assert message is not None
        message.ack()  # (a NACK would have the in-process broker requeue it: redelivered again)

    with Client(
        stomp_broker_thread.url, backend=name, backend_options=options, heart_beat=(0, 0), reconnect=False,
        max_frame_bytes=LIMIT,
    ) as c:
        with c.subscribe("/queue/big-cb", ack="client-individual", callback=on_message, on_error=on_error):
            c.send("/queue/big-cb", b"first", receipt=True)
            c.send("/queue/big-cb", BIG, receipt=True)
            c.send("/queue/big-cb", b"third", receipt=True)
            assert done.wait(5)
            assert c.stats().reconnects == 0 and c.error is None
        assert bodies == [b"first", b"third"]
        ((error, message),) = errors
        assert isinstance(error, MessageTooLargeError) and error.skipped_message is message


