"""Real brokers on loopback: RabbitMQ (rabbitmq_stomp), ActiveMQ Classic and ActiveMQ Artemis.

``scripts/brokers.sh start`` starts both (``.ci/run`` does); the URLs come from
``STOMPFAST_RABBITMQ_URL`` and ``STOMPFAST_ACTIVEMQ_URL``, or, when those are not set,
from the ports the script takes (``STOMPFAST_RABBITMQ_PORT``, ``STOMPFAST_ACTIVEMQ_PORT``;
defaults 61613 and 61614, guest/guest on 127.0.0.1); a URL that names another port
than its port variable is an error (tests/brokerenv.py). A broker that does not answer is a test *error* when
``STOMPFAST_REQUIRE_BROKERS=1`` (CI sets it: an interoperability claim must never
pass by skipping) and a skip otherwise (a developer machine without brokers).
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Dict

import pytest
from brokerenv import broker_url

from stompfast._config import parse_url

BROKERS: Dict[str, str] = {name: broker_url(name) for name in ("rabbitmq", "activemq", "artemis")}
ARTEMIS: Dict[str, str] = {name: broker_url(name) for name in ("artemis", "artemis_prefix", "artemis_ws")}
_answers: Dict[str, bool] = {}


def _stomp_answers(url: str) -> bool:
    if url not in _answers:
        ep = parse_url(url)
        try:
            with socket.create_connection((ep.host, ep.port), timeout=3) as s:
                s.settimeout(5)
                s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
                _answers[url] = s.recv(64).startswith(b"CONNECTED")
        except OSError:
            _answers[url] = False
    return _answers[url]


@pytest.fixture(params=sorted(BROKERS))
def broker(request: pytest.FixtureRequest) -> str:
    """The name of a real broker that answers STOMP (``activemq``, ``artemis`` or ``rabbitmq``).

    Artemis is its stock acceptor (no prefixes: stompfast's routing headers make
    ``/queue/`` a queue); a test of STOMP 1.0 on Artemis gets the prefixed acceptor
    (``broker_url``). What Artemis does differently is asserted per broker, and its
    own differences have tests of their own (test_artemis.py, docs/brokers.md).
    """
    name = request.param
    _require(name, BROKERS[name])
    return name


def _require(name: str, url: str) -> None:
    if not _stomp_answers(url):
        message = f"{name} does not answer STOMP at {url} (scripts/brokers.sh start)"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def artemis_url() -> str:
    """Artemis's stock STOMP acceptor (no anycast/multicast prefixes), as ``artemis create`` writes it."""
    _require("artemis", ARTEMIS["artemis"])
    return ARTEMIS["artemis"]


@pytest.fixture
def artemis_prefix_url() -> str:
    """Artemis's acceptor with ``anycastPrefix=/queue/;multicastPrefix=/topic/``."""
    _require("artemis (prefixed acceptor)", ARTEMIS["artemis_prefix"])
    return ARTEMIS["artemis_prefix"]


@pytest.fixture
def broker_url(request: pytest.FixtureRequest, broker: str) -> str:
    if broker == "artemis" and "version" in request.fixturenames and request.getfixturevalue("version") == "1.0":
        # Artemis names itself on 1.1 and 1.2 only, so on a 1.0 session the client cannot
        # add its routing headers: 1.0 tests use the acceptor whose prefixes route
        # /queue/ and /topic/ (docs/brokers.md, "STOMP 1.0")
        _require("artemis (prefixed acceptor)", ARTEMIS["artemis_prefix"])
        return ARTEMIS["artemis_prefix"]
    return BROKERS[broker]


@pytest.fixture
def queue() -> str:
    """A fresh queue name, so tests never see each other's messages."""
    return f"/queue/stompfast-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["1.0", "1.1", "1.2"])
def version(request: pytest.FixtureRequest) -> str:
    return request.param
