"""Request/reply: a service answers on the queue each request names in its reply-to header.

    python examples/request_reply.py

The requester keeps one reply queue of its own and matches answers by correlation-id.
A named queue works on every broker. ActiveMQ's /temp-queue/ destinations work too
(subscribe to one explicitly). RabbitMQ's /temp-queue/ does not with stompfast yet:
RabbitMQ delivers the replies on a subscription it made itself, which the client does
not know and drops (docs/recipes.md, request/reply).
"""

from __future__ import annotations

import threading
import uuid

from _where import broker_url

from stompfast import Client


def service(url: str, ready: threading.Event, stop: threading.Event) -> None:
    with Client(url) as client:
        with client.subscribe("/queue/rpc.upper", ack="client-individual") as requests:
            ready.set()
            while not stop.is_set():
                for request in requests.receive_batch(100, timeout=60):
                    client.send(request.headers["reply-to"], request.text.upper(),
                                headers={"correlation-id": request.headers["correlation-id"]})
                    request.ack()


def ask(url: str, questions: list) -> dict:
    replies = f"/queue/replies-{uuid.uuid4().hex[:8]}"
    answers = {}
    with Client(url) as client, client.subscribe(replies) as inbox:
        asked = {}
        for question in questions:
            cid = uuid.uuid4().hex
            asked[cid] = question
            client.send("/queue/rpc.upper", question, headers={"reply-to": replies, "correlation-id": cid})
        while len(answers) < len(asked):
            reply = inbox.receive(timeout=10)
            answers[asked[reply.headers["correlation-id"]]] = reply.text
    return answers


if __name__ == "__main__":
    with broker_url() as url:
        ready, stop = threading.Event(), threading.Event()
        threading.Thread(target=service, args=(url, ready, stop), daemon=True).start()
        ready.wait(10)
        answers = ask(url, ["hello", "stomp", "world"])
        stop.set()
        for question, answer in answers.items():
            print(f"{question} -> {answer}")
