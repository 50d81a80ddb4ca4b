"""`scripts/brokers.sh clean` on the real RabbitMQ: the test queues go, a user's queue stays.

RabbitMQ's ``/queue/`` destinations are durable, so the queues test runs name pile up in
the node (thousands made a node boot for minutes); ``clean`` deletes the ones whose names
the project's code generates and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from typing import List

import pytest
from brokerenv import rabbitmq_node, rabbitmqctl

import stompfast

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "brokers.sh")

pytestmark = [pytest.mark.timeout(120)]


def rabbitmq_queues() -> List[str]:
    done = rabbitmqctl("-q", "list_queues", "name")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
def test_clean_deletes_the_test_queues_and_keeps_the_others(broker_url: str) -> None:
    if rabbitmq_node() == "rabbitmq" and shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not on PATH: the RabbitMQ answering is not one this machine runs")
    suffix = uuid.uuid4().hex[:12]
    ours = [f"stompfast-test-{suffix}", f"stompfast-lg-{suffix}", f"sf-bench-{suffix}"]
    theirs = f"orders-stompfast-test-{suffix}"
    with stompfast.Client(broker_url) as client:
        for name in ours + [theirs]:
            client.send(f"/queue/{name}", b"x", receipt=True)
    try:
        before = rabbitmq_queues()
        assert set(ours + [theirs]) <= set(before)
        done = subprocess.run(["bash", SCRIPT, "clean", rabbitmq_node()], capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        assert "deleted" in done.stderr
        after = set(rabbitmq_queues())
        assert not after & set(ours)
        assert theirs in after
    finally:
        rabbitmqctl("-q", "delete_queue", theirs)
