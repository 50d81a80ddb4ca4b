"""One SparkSession (local[2]) for the whole test session, and the brokers Spark's workers reach.

Spark's Python workers are other processes, so the in-process broker runs with
``Broker.in_thread`` on a fixed loopback port and workers connect by URL. Without
pyspark or Java the tests skip (with the reason), unless ``STOMPFAST_REQUIRE_SPARK=1``.
RabbitMQ follows the integration tests' rule (``STOMPFAST_REQUIRE_BROKERS``).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from typing import Any, Iterator, Optional

import pytest
from brokerenv import broker_url

REQUIRE = os.environ.get("STOMPFAST_REQUIRE_SPARK") == "1"
RABBITMQ_URL = broker_url("rabbitmq")
ACTIVEMQ_URL = broker_url("activemq")
ARTEMIS_URL = broker_url("artemis")

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _missing() -> Optional[str]:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark/pyarrow not installed ({exc}); pip install 'stompfast[spark]'"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java not on PATH, JAVA_HOME unset)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    reason = _missing()
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)
            if reason is not None and not REQUIRE:
                item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark_tmp() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="stompfast-spark-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(spark_tmp: str) -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if REQUIRE:
            pytest.fail(reason)
        pytest.skip(reason)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = os.path.join(spark_tmp, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(LOG4J2)
    from pyspark.sql import SparkSession

    java_opts = f"-Dlog4j.configurationFile=file:{log4j} -Dlog4j2.configurationFile=file:{log4j}"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("stompfast-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from stompfast.spark import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker_thread() -> Iterator[Any]:
    """The in-process broker on a fixed loopback port (Spark's workers connect by URL)."""
    from stompfast.testing import Broker

    with Broker.in_thread(port=_free_port(), record=False) as broker:
        yield broker


def _answers(url: str) -> bool:
    from stompfast._config import parse_url

    ep = parse_url(url)
    try:
        with socket.create_connection((ep.host, ep.port), timeout=3) as s:
            s.settimeout(5)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
            return s.recv(64).startswith(b"CONNECTED")
    except OSError:
        return False


def _real(name: str) -> "Target":
    url = {"rabbitmq": RABBITMQ_URL, "activemq": ACTIVEMQ_URL, "artemis": ARTEMIS_URL}[name]
    if not _answers(url):
        message = f"{name} does not answer STOMP at {url} (scripts/brokers.sh start)"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return Target(name, url)


@pytest.fixture(params=["inprocess", "rabbitmq", "activemq", "artemis"])
def target(request: pytest.FixtureRequest, broker_thread: Any) -> "Target":
    """A broker as Spark's workers see it: a URL, and a way to count what is left in a queue."""
    if request.param == "inprocess":
        return Target("inprocess", broker_thread.url, broker=broker_thread)
    return _real(request.param)


@pytest.fixture(params=["rabbitmq", "activemq"])
def real_broker(request: pytest.FixtureRequest) -> "Target":
    """RabbitMQ and ActiveMQ only: for what the in-process broker cannot show (their own refusals)."""
    return _real(request.param)


class Target:
    def __init__(self, name: str, url: str, broker: Any = None) -> None:
        self.name = name
        self.url = url
        self.broker = broker

    def queue(self) -> str:
        return f"/queue/stompfast-spark-{uuid.uuid4().hex[:12]}"

    def publish(self, destination: str, bodies: Any) -> None:
        from stompfast import Client

        with Client(self.url) as client:
            for body in bodies:
                client.send(destination, body, receipt=True, wait=False)
            client.flush(timeout=30)

    def drain(self, destination: str, timeout: float = 1.0, ack: bool = True, expect: Optional[int] = None,
              patience: float = 15.0) -> list:
        """Everything left on ``destination`` (consumed and acked): what the broker still holds.

        Ends after ``timeout`` without a message; with ``expect``, not before that many
        arrived or ``patience`` seconds passed (a broker hands a closed consumer's
        messages back when it has noticed the close, which a loaded machine delays).
        """
        from stompfast import Client, ReceiveTimeout

        out: list = []
        deadline = time.monotonic() + patience
        with Client(self.url) as client:
            with client.subscribe(destination, ack="client-individual") as sub:
                while True:
                    try:
                        batch = sub.receive_many(500, timeout=timeout)
                    except ReceiveTimeout:
                        if expect is not None and len(out) < expect and time.monotonic() < deadline:
                            continue
                        break
                    for m in batch:
                        out.append(m.body)
                        if ack:
                            m.ack()
        return out

    def depth(self, destination: str) -> Optional[int]:
        """Messages the broker holds for a queue: ready plus delivered-but-unacked (None: cannot tell).

        Artemis cannot tell over STOMP (it ignores ``browser:true`` and consumes; these
        tests run it without its management acceptor): None.
        """
        if self.name == "artemis":
            return None
        if self.name == "activemq":  # a queue browser (non-destructive; it counts unacked deliveries too)
            from stompfast import Client

            with Client(self.url) as client, client.subscribe(destination, headers={"browser": "true"}) as sub:
                n = 0
                while True:
                    for m in sub.receive_batch(1000, timeout=10):
                        if m.headers.get("browser") == "end":
                            return n
                        n += 1
        if self.broker is not None:
            try:
                return self.broker.queue_depth(destination) + self.broker.unacked(destination)
            except ValueError:
                return 0
        ctl = shutil.which("rabbitmqctl")
        if ctl is None:
            return None
        import subprocess

        name = destination.split("/")[-1]
        out = subprocess.run([ctl, "-q", "list_queues", "name", "messages"], capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == name:
                return int(parts[1])
        return 0

    def wait_depth(self, destination: str, expected: int, timeout: float = 20.0) -> Optional[int]:
        """Wait until :meth:`depth` is ``expected``; return the last value seen.

        Where the depth cannot be told (Artemis), wait out a few micro-batches instead
        (the source acks a batch once Spark commits it, when it plans the next one).
        """
        deadline = time.monotonic() + timeout
        if self.name == "artemis":
            time.sleep(3.0)
            return None
        while True:
            depth = self.depth(destination)
            if depth is None or depth == expected or time.monotonic() > deadline:
                return depth
            time.sleep(0.3)
