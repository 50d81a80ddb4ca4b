"""``Client.consume``, ``health`` and ``drain``: the blocking twins, against the in-process broker.

Handlers are plain functions run in the consumer's threads (on each backend of the client's
own loop). The async client's are in tests/test_consume.py; the real brokers in
tests/integration/test_consume_brokers.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

import pytest

from stompfast import Client, ConfigurationError, Nack
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(30)]

WAIT = 5

BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]


@pytest.fixture(params=BACKENDS)
def client(request: pytest.FixtureRequest, stomp_broker_thread: Broker):
    name, options = request.param
    c = Client(stomp_broker_thread.url, heart_beat=(0, 0), reconnect=False, backend=name, backend_options=options)
    c.connect(timeout=WAIT)
    yield c
    c.close()


def frames(broker: Broker, command: str) -> List[Dict[str, str]]:
    return [dict(f.headers) for f in broker.received if f.command == command]


def until(predicate: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_one_thread_handles_in_order_and_acks_each(client: Client, stomp_broker_thread: Broker):
    seen: List[bytes] = []
    for i in range(20):
        client.send("/queue/s1", b"%d" % i)
    consumer = client.consume("/queue/s1", lambda message: seen.append(message.body), timeout=WAIT)
    until(lambda: consumer.stats().acked == 20)
    report = client.drain(timeout=WAIT)
    assert seen == [b"%d" % i for i in range(20)] and report.clean
    assert len(frames(stomp_broker_thread, "ACK")) == 20 and not client.is_connected


def test_at_most_concurrency_threads_handle_at_once(client: Client):
    lock = threading.Lock()
    state: Dict[str, int] = {"running": 0, "peak": 0}

    def handler(message):
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        time.sleep(0.01)
        with lock:
            state["running"] -= 1

    for i in range(40):
        client.send("/queue/s4", b"%d" % i)
    consumer = client.consume("/queue/s4", handler, concurrency=4, timeout=WAIT)
    until(lambda: consumer.stats().acked == 40)
    assert consumer.drain(WAIT) == 0
    assert state["peak"] == 4


def test_errors_are_settled_as_on_error_says_and_stop_is_raised_by_join(client: Client, stomp_broker_thread: Broker):
    def fail(message):
        raise ValueError("poison")

    client.send("/queue/se", b"x")
    consumer = client.consume("/queue/se", fail, on_error=lambda m, e: Nack({"requeue": "false"}), timeout=WAIT)
    until(lambda: consumer.stats().nacked >= 1)
    consumer.drain(WAIT)
    assert frames(stomp_broker_thread, "NACK")[0].get("requeue") == "false"

    client.send("/queue/ss", b"y")
    stopping = client.consume("/queue/ss", fail, on_error="stop", timeout=WAIT)
    with pytest.raises(ValueError, match="poison"):
        stopping.join(WAIT)
    assert stopping.stats().failed == 1 and not stopping.running
    stopping.stop()


def test_drain_reports_a_handler_that_did_not_finish(client: Client):
    release = threading.Event()
    client.send("/queue/sd", b"slow")
    client.consume("/queue/sd", lambda message: release.wait(), timeout=WAIT)
    until(lambda: client.health().handlers_running == 1)
    time.sleep(0.05)
    wedged = client.health(handler_limit=0.01)
    assert wedged.handlers_wedged == 1 and not wedged.ready
    report = client.drain(timeout=0.3)
    release.set()
    assert report.handlers_unfinished == 1 and not report.clean and not client.is_connected


def test_health_and_bad_options(client: Client):
    assert client.health().ready and client.health().connected
    for kwargs in ({"concurrency": 0}, {"concurrency": 3, "ack": "client"}, {"on_error": "later"}):
        with pytest.raises(ConfigurationError):
            client.consume("/queue/x", print, **kwargs)

    async def async_handler(message):
        pass

    with pytest.raises(ConfigurationError, match="AsyncClient.consume"):
        client.consume("/queue/x", async_handler)
    client.close()
    assert not client.health().connected and client.health().state == "closed"


def test_next_buffered_takes_without_waiting_and_the_message_acks(client: Client, stomp_broker_thread: Broker):
    with client.subscribe("/queue/snb", ack="client-individual") as sub:
        assert sub.next_buffered() is None
        client.send("/queue/snb", b"one", receipt=True)
        until(lambda: sub.pending == 1)
        message = sub.next_buffered()
        assert message is not None and message.body == b"one" and sub.pending == 0
        assert sub.next_buffered() is None
        message.ack(receipt=True)
    assert len(frames(stomp_broker_thread, "ACK")) == 1
