"""The integration tests' broker URLs follow the ports scripts/brokers.sh takes.

A run that moved ActiveMQ (``STOMPFAST_ACTIVEMQ_PORT=62614 scripts/brokers.sh start``)
without ``eval "$(scripts/brokers.sh env)"`` must not test the broker on the default port:
the URL is derived from the port variable, and a URL naming another port is an error.
Each case imports tests/integration/conftest.py in a fresh interpreter with that
environment (no broker is contacted).
"""

from __future__ import annotations

import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
PRINT_BROKERS = (
    "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import conftest; "
    "print(conftest.BROKERS['rabbitmq'], conftest.BROKERS['activemq'])"
)


def integration_brokers(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", PRINT_BROKERS, os.path.join(TESTS, "integration"), TESTS],
        env=clean, capture_output=True, text=True, timeout=60,
    )


def test_the_defaults_are_the_scripts_default_ports() -> None:
    done = integration_brokers()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stomp://guest:guest@127.0.0.1:61613/", "stomp://guest:guest@127.0.0.1:61614/"]


def test_moved_ports_without_the_url_variables_move_the_urls() -> None:
    done = integration_brokers(STOMPFAST_RABBITMQ_PORT="62613", STOMPFAST_ACTIVEMQ_PORT="62614")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stomp://guest:guest@127.0.0.1:62613/", "stomp://guest:guest@127.0.0.1:62614/"]


def test_a_url_that_agrees_with_its_port_is_used() -> None:
    done = integration_brokers(STOMPFAST_ACTIVEMQ_PORT="62614",
                               STOMPFAST_ACTIVEMQ_URL="stomp://app:pw@127.0.0.1:62614/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "stomp://app:pw@127.0.0.1:62614/"


def test_a_url_that_names_another_port_than_its_port_variable_fails_loudly() -> None:
    done = integration_brokers(STOMPFAST_ACTIVEMQ_PORT="62614",
                               STOMPFAST_ACTIVEMQ_URL="stomp://guest:s3cret@127.0.0.1:61614/")
    assert done.returncode != 0 and done.stdout == ""
    assert "STOMPFAST_ACTIVEMQ_URL=stomp://***@127.0.0.1:61614/ names another port than" \
           " STOMPFAST_ACTIVEMQ_PORT=62614" in done.stderr
    assert "brokers.sh env" in done.stderr and "s3cret" not in done.stderr
