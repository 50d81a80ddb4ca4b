"""Send N orders, each confirmed by the broker, with up to 500 receipts in flight.

    python examples/producer.py [N]
"""

from __future__ import annotations

import json
import sys
import time

from _where import broker_url

from stompfast import Client


def produce(url: str, n: int, destination: str = "/queue/orders") -> int:
    with Client(url) as client:
        in_flight = []
        for i in range(n):
            order = {"id": i, "item": "widget", "quantity": 1 + i % 5}
            in_flight.append(client.send(destination, json.dumps(order), content_type="application/json",
                                         receipt=True, wait=False))  # pipelined: does not wait
            if len(in_flight) >= 500:
                client.wait_receipts(in_flight)  # raises if the broker refused one
                in_flight.clear()
        client.wait_receipts(in_flight)
    return n


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with broker_url() as url:
        started = time.monotonic()
        produce(url, n)
        print(f"sent {n} orders, all confirmed, in {time.monotonic() - started:.2f} s")
