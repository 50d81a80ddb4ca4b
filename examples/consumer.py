"""Take orders one by one, acknowledging each after handling it; stop when idle for 2 s.

    python examples/consumer.py

With ack="client-individual", a message that was not acked (the process died, the
connection dropped) is delivered again: handling must tolerate seeing one twice.
"""

from __future__ import annotations

import json

from _where import broker_url
from producer import produce

from stompfast import Client, ReceiveTimeout


def consume(url: str, destination: str = "/queue/orders") -> int:
    handled = 0
    with Client(url) as client:
        with client.subscribe(destination, ack="client-individual") as sub:
            while True:
                try:
                    message = sub.receive(timeout=2.0)
                except ReceiveTimeout:
                    return handled  # idle: done
                order = json.loads(message.body)
                assert order["quantity"] >= 1
                message.ack()  # after handling: at-least-once
                handled += 1


if __name__ == "__main__":
    with broker_url() as url:
        produce(url, 200)  # something to consume (the in-process broker starts empty)
        print(f"handled {consume(url)} orders")
