"""Request/reply: a service answers requests; a client asks and gets each answer back.

    python examples/request_reply.py

``client.request(destination, body)`` sends with a ``reply-to`` naming this client's
reply destination (the kind the broker offers: a RabbitMQ or ActiveMQ temporary queue,
an Artemis topic of its own) and a fresh ``correlation-id``, and returns the reply; the
service answers with ``client.reply(request, body)``. The blocking client, with the
service's handlers in two threads (docs/recipes.md has the async version).
"""

from __future__ import annotations

from _where import broker_url

from stompfast import Client

if __name__ == "__main__":
    with broker_url() as url:
        with Client(url) as service, Client(url) as client:
            # The service: every request is answered, then acked
            service.consume("/queue/rpc.upper", lambda request: service.reply(request, request.text.upper()),
                            concurrency=2)
            for question in ("hello", "stomp", "world"):
                answer = client.request("/queue/rpc.upper", question, timeout=10)
                print(f"{question} -> {answer.text}")
            service.drain(timeout=5)
