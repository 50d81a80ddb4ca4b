"""Probes of a live RabbitMQ node for docs/brokers.md's "RabbitMQ 4.x": prints what it sees.

Usage: python scripts/rabbitmq_facts.py NODE [quorum] [exclusive] (default: both), NODE being
``rabbitmq`` (3.10, STOMP on 61613) or ``rabbitmq4`` (4.x, 61623), as scripts/brokers.sh names them.

- quorum: one message on a quorum queue NACKed 45 times: its x-delivery-count on each delivery,
  and whether the broker stopped redelivering it.
- exclusive: a /topic/ and an /exchange/ subscription: their queues' durable, auto_delete and
  exclusive flags (``brokers.sh rabbitmqctl NODE list_queues``).

Not a test: evidence for docs and notes. Leaves no queue but the quorum one, whose name starts
with stompfast-test- (``brokers.sh clean NODE`` deletes it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from stompfast import Client, ReceiveTimeout

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brokers.sh")
PORTS = {"rabbitmq": 61613, "rabbitmq4": 61623}
QUORUM = {"x-queue-type": "quorum", "durable": "true", "auto-delete": "false"}
NACKS = 45


def quorum(url: str) -> None:
    queue = f"/queue/stompfast-test-quorum-{uuid.uuid4().hex[:8]}"
    counts = []
    with Client(url, reconnect=False) as client:
        client.send(queue, b"job", headers=QUORUM, receipt=True)
        with client.subscribe(queue, ack="client-individual", headers=QUORUM) as sub:
            for _ in range(NACKS):
                try:
                    message = sub.receive(timeout=3)
                except ReceiveTimeout:
                    break
                counts.append(message.headers.get("x-delivery-count"))
                message.nack()
    stopped = "stopped redelivering" if len(counts) < NACKS else "still redelivering"
    print(f"quorum: {len(counts)} deliveries in {NACKS} NACKs ({stopped}); x-delivery-count: {counts}")


def exclusive(url: str, node: str) -> None:
    with Client(url, reconnect=False) as client:
        with client.subscribe("/topic/stompfast-facts"), client.subscribe("/exchange/amq.topic/stompfast-facts"):
            time.sleep(0.5)
            done = subprocess.run(["bash", SCRIPT, "rabbitmqctl", node, "-q", "list_queues", "name", "durable",
                                   "auto_delete", "exclusive"], capture_output=True, text=True, timeout=60)
    rows = [line for line in done.stdout.splitlines() if line.startswith("stomp-subscription-")]
    print("exclusive: name, durable, auto_delete, exclusive of the two subscription queues:")
    for row in rows:
        print("   ", row.replace("\t", "  "))


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in PORTS:
        print(__doc__)
        return 2
    node, which = sys.argv[1], sys.argv[2:] or ["quorum", "exclusive"]
    url = f"stomp://guest:guest@127.0.0.1:{PORTS[node]}/"
    with Client(url, reconnect=False) as client:
        print(f"{node}: {client.server}")
    if "quorum" in which:
        quorum(url)
    if "exclusive" in which:
        exclusive(url, node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
