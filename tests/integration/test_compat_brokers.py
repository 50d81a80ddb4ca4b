"""stompfast.compat.stomp on RabbitMQ, ActiveMQ Classic and Artemis, on STOMP 1.0, 1.1 and 1.2.

Written as a stomp.py user writes code (listeners, caller-chosen receipt and transaction
ids); ``STOMPFAST_COMPAT_IMPL=stomppy`` runs the same tests on the real stomp.py 8
(tests/compatimpl.py). What a broker does differently is asserted per broker:

- RabbitMQ reads 1.2's ``host`` header (stomp.py sends the host name connected to) as
  the virtual host, so a stomp.py user passes ``vhost="/"`` there;
- Artemis's stock acceptor makes a new ``/queue/...`` address multicast: the consumer
  subscribes (confirmed by a receipt) before anything is sent; a 1.0 session uses the
  prefixed acceptor (conftest's ``broker_url``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Tuple

import pytest
from compatimpl import Recorder, load, wait_until

from stompfast._config import parse_url

pytestmark = pytest.mark.integration

stomp = load()

CLASSES = {"1.0": "Connection10", "1.1": "Connection11", "1.2": "Connection12"}


def address(url: str) -> Tuple[str, int]:
    ep = parse_url(url)
    return (ep.host, ep.port)


def make(broker: str, url: str, version: str, **kwargs: Any) -> Any:
    if version != "1.0" and broker == "rabbitmq":
        kwargs.setdefault("vhost", "/")
    return getattr(stomp, CLASSES[version])([address(url)], **kwargs)


def open_conn(broker: str, url: str, version: str, **kwargs: Any) -> Tuple[Any, Recorder]:
    conn = make(broker, url, version, **kwargs)
    rec = Recorder()
    conn.set_listener("rec", rec)
    conn.connect("guest", "guest", wait=True)
    return conn, rec


def subscribe(conn: Any, rec: Recorder, version: str, queue: str, ack: str = "auto") -> None:
    receipt = f"sub-{uuid.uuid4().hex[:8]}"
    if version == "1.0":
        conn.subscribe(queue, id="s1", ack=ack, receipt=receipt)
    else:
        conn.subscribe(queue, "s1", ack=ack, receipt=receipt)
    wait_until(lambda: receipt in rec.of("receipt"), timeout=10, what="the SUBSCRIBE's receipt")


def close(conn: Any, rec: Recorder) -> None:
    conn.disconnect(receipt=f"bye-{uuid.uuid4().hex[:8]}")
    wait_until(lambda: not conn.is_connected(), timeout=10, what="the disconnect")
    wait_until(lambda: "disconnected" in rec.names(), timeout=10, what="on_disconnected")


def test_round_trip_with_receipts_and_acks(broker: str, broker_url: str, version: str, queue: str) -> None:
    conn, rec = open_conn(broker, broker_url, version)
    assert conn.is_connected()
    assert rec.of("connected")[0].headers.get("version", "1.0") == version
    subscribe(conn, rec, version, queue, ack="client-individual")
    body = "grüße, 世界 ✓ " + version
    conn.send(queue, body, headers={"x-test": "a"}, receipt="caller-receipt-1")
    wait_until(lambda: rec.of("message"), timeout=10, what="the message")
    wait_until(lambda: "caller-receipt-1" in rec.of("receipt"), timeout=10, what="the SEND's receipt")
    message = rec.of("message")[0]
    assert message.body == body and message.headers["x-test"] == "a"
    assert message.headers["destination"].endswith(queue.rsplit("/", 1)[1])
    h = message.headers
    if version == "1.0":
        conn.ack(h["message-id"], receipt="ack-receipt")
    elif version == "1.1":
        conn.ack(h["message-id"], h["subscription"], receipt="ack-receipt")
    else:
        conn.ack(h["ack"], receipt="ack-receipt")
    wait_until(lambda: "ack-receipt" in rec.of("receipt"), timeout=10, what="the ACK's receipt")
    assert rec.of("error") == []
    close(conn, rec)
    names = rec.names()
    assert names.index("connected") < names.index("before_message") < names.index("message")


def test_transactions_by_caller_id(broker: str, broker_url: str, version: str, queue: str) -> None:
    conn, rec = open_conn(broker, broker_url, version)
    subscribe(conn, rec, version, queue)
    tx = f"tx-{uuid.uuid4().hex[:8]}"
    assert conn.begin(tx) == tx
    conn.send(queue, "aborted", transaction=tx)
    conn.abort(tx, receipt="aborted")
    tx2 = conn.begin()
    conn.send(queue, "committed", transaction=tx2)
    conn.commit(tx2, receipt="committed")
    wait_until(lambda: "committed" in rec.of("receipt"), timeout=10, what="the COMMIT's receipt")
    wait_until(lambda: rec.of("message"), timeout=10, what="the committed message")
    # a receipted probe after the commit: anything else would have arrived before its receipt
    conn.send(queue, "probe", receipt="probe")
    wait_until(lambda: len(rec.of("message")) == 2, timeout=10, what="the probe")
    assert [m.body for m in rec.of("message")] == ["committed", "probe"]
    close(conn, rec)


def test_auto_decode_false_gives_the_bytes(broker: str, broker_url: str, queue: str) -> None:
    conn, rec = open_conn(broker, broker_url, "1.2", auto_decode=False)
    subscribe(conn, rec, "1.2", queue)
    payload = bytes(range(256)) * 4 + b"\x00\x00end"
    conn.send(queue, payload)
    wait_until(lambda: rec.of("message"), timeout=10, what="the message")
    assert rec.of("message")[0].body == payload
    close(conn, rec)


def test_reconnect_by_calling_connect_again(broker: str, broker_url: str, queue: str) -> None:
    conn = make(broker, broker_url, "1.1")
    rec = Recorder()
    conn.set_listener("rec", rec)
    for n in range(2):
        conn.connect("guest", "guest", wait=True)
        assert conn.is_connected()
        subscribe(conn, rec, "1.1", queue)
        conn.send(queue, f"round {n}")
        wait_until(lambda: len(rec.of("message")) == 1, timeout=10, what=f"message {n}")
        assert rec.of("message")[0].body == f"round {n}"
        conn.unsubscribe("s1")
        close(conn, rec)
        rec.events.clear()


def test_heartbeats_flow(broker: str, broker_url: str) -> None:
    # ActiveMQ spaces its heart-beats up to twice the agreed interval (AMQ-4710), which
    # stomp.py's default receive scale (1.5) takes for a dead broker: 2.5 covers it
    conn, rec = open_conn(broker, broker_url, "1.1", heartbeats=(500, 500), heart_beat_receive_scale=2.5)
    deadline = time.monotonic() + 4
    wait_until(lambda: rec.names().count("heartbeat") >= 2, timeout=10, what="two heart-beats")
    while time.monotonic() < deadline:
        time.sleep(0.1)
    assert "heartbeat_timeout" not in rec.names() and conn.is_connected()
    close(conn, rec)


def test_rabbitmq_reads_the_12_host_header_as_its_vhost(broker_url: str, broker: str) -> None:
    if broker != "rabbitmq":
        pytest.skip("RabbitMQ's rule (the other brokers ignore host)")
    conn = stomp.Connection12([address(broker_url)])
    rec = Recorder()
    conn.set_listener("rec", rec)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("guest", "guest", wait=True)
    error = rec.of("error")[0]
    assert "access denied" in (str(error.body) + error.headers.get("message", "")).lower()
