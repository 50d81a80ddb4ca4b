"""A destination that is not a ``str`` is refused with TypeError, before anything is sent.

An ``int`` used to go out as ``destination:5`` (and ``bytes`` as ``destination:b'/queue/a'``):
the broker then refused it, or worse, created it. Both clients, every call that
takes a destination, every backend; the client goes on working afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest

from stompfast import AsyncClient, Client
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

QUEUE = "/queue/typed"
#: what is not a destination, and how the error names its type
BAD = [(5, "int"), (b"/queue/a", "bytes"), (None, "NoneType"), (["/queue/a"], "list")]
IDS = [name for _, name in BAD]

def refused(type_name: str) -> Any:
    return pytest.raises(TypeError, match=f"^destination must be a str, not {type_name}$")


@pytest.mark.anyio
@pytest.mark.parametrize("bad,type_name", BAD, ids=IDS)
async def test_async_client_refuses_before_sending(bad: Any, type_name: str) -> None:
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            with refused(type_name):
                await client.send(bad, b"x")
            with refused(type_name):
                await client.send(bad, "x", receipt=True)
            with refused(type_name):
                await client.send(bad, b"x", headers={"x-a": "1"})
            with refused(type_name):
                client.send_nowait(bad, b"x")
            with refused(type_name):
                client.subscribe(bad)
            async with client.transaction() as tx:
                with refused(type_name):
                    await tx.send(bad, b"x")
            await client.send(QUEUE, b"fine", receipt=True)  # the client goes on working
        frames = broker.stats.frames_in
    assert frames.get("SEND") == 1 and "SUBSCRIBE" not in frames
    assert broker.queue_depth(QUEUE) == 1


@pytest.mark.parametrize("bad,type_name", BAD, ids=IDS)
def test_blocking_client_refuses_before_sending(backend: Any, bad: Any, type_name: str) -> None:
    name, options = backend
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options) as client:
            with refused(type_name):
                client.send(bad, b"x")
            with refused(type_name):
                client.send(bad, "x", receipt=True)
            with refused(type_name):
                client.send(bad, b"x", receipt=True, wait=False)
            with refused(type_name):
                client.subscribe(bad)
            with client.transaction() as tx:
                with refused(type_name):
                    tx.send(bad, b"x")
            client.send(QUEUE, b"fine", receipt=True)
            client.flush()
        frames = broker.stats.frames_in
        assert frames.get("SEND") == 1 and "SUBSCRIBE" not in frames
        assert broker.queue_depth(QUEUE) == 1
