"""The sync Client against real brokers: round trips, acks, receipts and callbacks.

Each test runs against RabbitMQ and ActiveMQ (the ``broker_url`` fixture) with the
client's own loop on asyncio and trio.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import List

import pytest

from stompfast import Client, ReceiptFuture, ReceiveTimeout, SyncMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10  # seconds any single broker round trip may take before the test fails


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def client(url: str, backend: str, **kwargs) -> Client:
    kwargs.setdefault("heart_beat", (0, 0))
    return Client(url, backend=backend, **kwargs)


def test_send_receive_ack_round_trip(broker_url, version, queue, backend):
    with client(broker_url, backend, versions=[version]) as c:
        assert c.version == version
        with c.subscribe(queue, ack="client-individual" if version != "1.0" else "client") as sub:
            confirmed = c.send(queue, "grüße", receipt=True, timeout=WAIT)
            assert isinstance(confirmed, ReceiptFuture) and confirmed.done() and confirmed.error is None
            c.send(queue, bytes(range(256)), receipt=True, timeout=WAIT)
            text, binary = sub.receive(timeout=WAIT), sub.receive(timeout=WAIT)
            assert (text.text, text.content_type) == ("grüße", "text/plain;charset=utf-8")
            assert binary.body == bytes(range(256)) and binary.destination == queue
            text.ack(receipt=True, timeout=WAIT)
            binary.ack(receipt=True, timeout=WAIT)
    # acknowledged: a new consumer finds the queue empty
    with client(broker_url, backend) as c:
        with c.subscribe(queue) as sub:
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=1)


def test_pipelined_receipts_flush_and_a_batch_receive(broker_url, queue, backend):
    with client(broker_url, backend) as c:
        with c.subscribe(queue) as sub:
            futures = [c.send(queue, b"%d" % i, receipt=True, wait=False) for i in range(50)]
            c.flush(timeout=WAIT)
            assert all(f.done() and f.error is None for f in futures)
            done, not_done = concurrent.futures.wait(futures, timeout=0)
            assert (len(done), not_done) == (50, set())
            got: List[bytes] = []
            while len(got) < 50:
                got += [m.body for m in sub.receive_many(50, timeout=WAIT)]
            assert got == [b"%d" % i for i in range(50)]


def test_callback_subscription_with_heart_beats(broker_url, queue, backend):
    got: List[bytes] = []
    done = threading.Event()

    def handle(message: SyncMessage) -> None:
        got.append(message.body)
        message.ack()
        if len(got) == 20:
            done.set()

    with client(broker_url, backend, heart_beat=(500, 500)) as c:
        with c.subscribe(queue, ack="client-individual", callback=handle):
            for i in range(20):
                c.send(queue, b"%d" % i)
            assert done.wait(WAIT)
        assert got == [b"%d" % i for i in range(20)]
        c.flush(timeout=WAIT)  # the acks went out before the probe
        assert c.is_connected and c.error is None
    with client(broker_url, backend) as c:
        with c.subscribe(queue) as sub:
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=1)


def test_transaction_commits(broker_url, queue, backend):
    with client(broker_url, backend) as c:
        with c.subscribe(queue) as sub:
            with c.transaction(timeout=WAIT) as tx:
                tx.send(queue, b"in a transaction")
            assert sub.receive(timeout=WAIT).body == b"in a transaction"
