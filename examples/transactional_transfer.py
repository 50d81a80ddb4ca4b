"""Move messages from one queue to another atomically: ack the input and send the output in one transaction.

    python examples/transactional_transfer.py

If anything fails before COMMIT, the broker rolls both back: the input message is
delivered again and the output never appears. (On RabbitMQ, transactions cover sends
and acks of one connection; ActiveMQ and Artemis the same.)
"""

from __future__ import annotations

from _where import broker_url

from stompfast import Client


def transfer(url: str, n: int = 50) -> int:
    moved = 0
    with Client(url) as client:
        for i in range(n):
            client.send("/queue/incoming", f"payment {i}")
        client.flush()
        with client.subscribe("/queue/incoming", ack="client-individual") as sub:
            for _ in range(n):
                message = sub.receive(timeout=5)
                with client.transaction() as tx:  # COMMIT on success, ABORT on an exception
                    tx.send("/queue/settled", message.text.upper())
                    tx.ack(message)
                moved += 1
        with client.subscribe("/queue/settled") as settled:
            assert [settled.receive(timeout=5).text for _ in range(n)] == [f"PAYMENT {i}" for i in range(n)]
    return moved


if __name__ == "__main__":
    with broker_url() as url:
        print(f"moved {transfer(url)} messages, each in its own transaction")
