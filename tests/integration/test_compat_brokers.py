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

import os
import subprocess
import sys
import time
import uuid
from typing import Any, Tuple

import pytest
from compatimpl import IMPL, Recorder, load, wait_until

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


def test_a_non_fatal_error_keeps_the_session(broker: str, broker_url: str, queue: str) -> None:
    # A SEND in a transaction never begun: RabbitMQ ("Bad transaction") and ActiveMQ
    # ("Invalid transaction id") answer ERROR and keep the connection, and stomp.py keeps
    # the session; Artemis accepts the SEND (its receipt arrives, no ERROR)
    conn, rec = open_conn(broker, broker_url, "1.2")
    conn.send(queue, "x", transaction="never-begun", receipt="in-unknown-tx")
    if broker == "artemis":
        wait_until(lambda: "in-unknown-tx" in rec.of("receipt"), timeout=10, what="Artemis's receipt")
        assert rec.of("error") == []
    else:
        wait_until(lambda: rec.of("error"), timeout=10, what="the ERROR")
        expected = {"rabbitmq": "Bad transaction", "activemq": "Invalid transaction id"}[broker]
        assert rec.of("error")[0].headers["message"].startswith(expected)
    conn.send(queue, "after", receipt="after-error")
    wait_until(lambda: "after-error" in rec.of("receipt"), timeout=10, what="a receipt after the ERROR")
    assert conn.is_connected() and "disconnected" not in rec.names()
    close(conn, rec)


def test_nack_per_broker(broker: str, broker_url: str, version: str, queue: str) -> None:
    # RabbitMQ redelivers a NACKed message at once; ActiveMQ and Artemis do not (dead-letter)
    if version == "1.0":
        pytest.skip("NACK is 1.1 and 1.2 only (Connection10 has no nack)")
    conn, rec = open_conn(broker, broker_url, version)
    subscribe(conn, rec, version, queue, ack="client-individual")
    conn.send(queue, "nack me")
    wait_until(lambda: rec.of("message"), timeout=10, what="the message")
    h = rec.of("message")[0].headers
    if version == "1.1":
        conn.nack(h["message-id"], h["subscription"], receipt="nacked")
    else:
        conn.nack(h["ack"], receipt="nacked")
    wait_until(lambda: "nacked" in rec.of("receipt"), timeout=10, what="the NACK's receipt")
    if broker == "rabbitmq":
        wait_until(lambda: len(rec.of("message")) == 2, timeout=10, what="the redelivery")
        assert rec.of("message")[1].body == "nack me"
        last = rec.of("message")[1].headers
        if version == "1.1":
            conn.ack(last["message-id"], last["subscription"], receipt="acked")
        else:
            conn.ack(last["ack"], receipt="acked")
        wait_until(lambda: "acked" in rec.of("receipt"), timeout=10, what="the ACK's receipt")
    else:
        time.sleep(1.0)
        assert len(rec.of("message")) == 1
    assert rec.of("error") == []
    close(conn, rec)


PROGRAM = """
import sys, time
import stomp

class Listener(stomp.ConnectionListener):
    def __init__(self):
        self.bodies = []
    def on_message(self, frame):
        self.bodies.append(frame.body)

host, port, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3]
conn = stomp.Connection([(host, port)], heartbeats=(0, 0))
listener = Listener()
conn.set_listener("", listener)
conn.connect("guest", "guest", wait=True)
conn.subscribe(destination=queue, id=1, ack="auto", receipt="subscribed")
waiter = stomp.WaitingListener("sent")
conn.set_listener("waiter", waiter)
time.sleep(0.5)
conn.send(body="hello from a stomp.py program", destination=queue, receipt="sent")
waiter.wait_on_receipt()
deadline = time.time() + 10
while not listener.bodies and time.time() < deadline:
    time.sleep(0.01)
print(type(conn).__module__, listener.bodies)
conn.disconnect()
"""


def test_a_stomp_py_program_runs_unchanged_after_install(broker: str, broker_url: str, queue: str,
                                                          tmp_path: Any) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    runner: list = []
    if IMPL == "stompfast":
        runner = ["-c", "import sys, runpy, stompfast.compat; stompfast.compat.install();"
                  " sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"]
    host, port = address(broker_url)
    done = subprocess.run([sys.executable, *runner, str(program), host, str(port), queue], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    module, _, bodies = done.stdout.strip().partition(" ")
    assert bodies == "['hello from a stomp.py program']"
    assert module.startswith("stompfast.compat.stomp" if IMPL == "stompfast" else "stomp.")


@pytest.fixture
def rabbitmq_tls() -> Tuple[Tuple[str, int], str, str]:
    """RabbitMQ's TLS listener and the CA files brokers.sh made: ``(address, ca, bad_ca)``."""
    url = os.environ.get("STOMPFAST_RABBITMQ_TLS_URL")
    ca, bad = os.environ.get("STOMPFAST_TLS_CA"), os.environ.get("STOMPFAST_TLS_BAD_CA")
    if not (url and ca and bad and os.path.exists(ca)):
        message = "no RabbitMQ TLS listener configured (eval \"$(bash scripts/brokers.sh env)\")"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return address(url), ca, bad


def test_set_ssl_on_rabbitmq(rabbitmq_tls: Tuple[Tuple[str, int], str, str], queue: str) -> None:
    where, ca, bad = rabbitmq_tls
    conn = stomp.Connection11([where], vhost="/")
    conn.set_ssl(for_hosts=[where], ca_certs=ca)
    assert conn.get_ssl(where)["ca_certs"] == ca
    rec = Recorder()
    conn.set_listener("rec", rec)
    conn.connect("guest", "guest", wait=True)
    subscribe(conn, rec, "1.1", queue)
    conn.send(queue, "over TLS")
    wait_until(lambda: rec.of("message"), timeout=10, what="the message")
    assert rec.of("message")[0].body == "over TLS"
    close(conn, rec)
    # a CA that did not sign the broker's certificate: every attempt fails, then ConnectFailed
    refused = stomp.Connection11([where], vhost="/", reconnect_attempts_max=1)
    refused.set_ssl(for_hosts=[where], ca_certs=bad)
    with pytest.raises(stomp.exception.ConnectFailedException):
        refused.connect("guest", "guest", wait=True)


@pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLSv1 is deprecated:DeprecationWarning")
def test_set_ssl_ignores_ssl_version_on_rabbitmq(rabbitmq_tls: Tuple[Tuple[str, int], str, str]) -> None:
    # stomp.py 8 builds its context with PROTOCOL_TLS_CLIENT whatever ssl_version says
    import ssl

    where, ca, _ = rabbitmq_tls
    conn = stomp.Connection11([where], vhost="/", reconnect_attempts_max=1)
    conn.set_ssl(for_hosts=[where], ca_certs=ca, ssl_version=ssl.PROTOCOL_TLSv1)
    rec = Recorder()
    conn.set_listener("rec", rec)
    conn.connect("guest", "guest", wait=True)
    assert conn.is_connected()
    close(conn, rec)
