"""An in-process STOMP broker for tests and demos, with fault injection.

::

    from stompfast.testing import Broker

    async with Broker(heart_beat=(100, 100)) as broker:   # in the current event loop
        ...connect a client to broker.url...
        broker.drop_connections()                         # then see how the client copes

    with Broker.in_thread() as broker:                    # for synchronous code
        ...

It speaks STOMP 1.0, 1.1 and 1.2 over TCP on loopback, serves ``/queue/``
(point to point) and ``/topic/`` (fan-out) destinations with the three ack
modes, transactions, receipts, heart-beats and prefetch, and can misbehave on
demand (drop connections, cut a frame, withhold or delay receipts, send ERROR or
raw bytes, stop heart-beating, refuse connections). Like a real broker it bounds
the memory its messages take (``max_bytes``, 256 MiB by default) and then holds
producers until consumers catch up (or, with ``when_full="error"``, refuses their
SENDs). It is a test double, not a production broker: nothing is persisted and
everything lives in one process.

:class:`FaultProxy` is a TCP proxy to put between a client and any broker (this
one or a real one) that adds latency, throttles, splits writes into 1-byte
segments, stalls a direction, half-closes, and resets the connection at a
chosen byte, time or frame (:class:`Trigger`)::

    async with FaultProxy(broker_url, latency=0.05) as proxy:
        ...connect a client to proxy.rewrite(broker_url)...
        proxy.set(stall="down")                           # change faults at run time
        proxy.reset_all()                                 # RST every link now

The pytest plugin (``stompfast.testing.pytest_plugin``, registered as the
``stompfast`` pytest11 entry point) provides the ``stomp_broker`` and
``stomp_broker_thread`` fixtures.
"""

from typing import TYPE_CHECKING, Any

__all__ = ["Broker", "BrokerStats", "FaultProxy", "ProxyStats", "Trigger"]

_MODULES = {"Broker": "_broker", "BrokerStats": "_broker", "FaultProxy": "_proxy", "ProxyStats": "_proxy",
            "Trigger": "_faults"}

if TYPE_CHECKING:
    from ._broker import Broker, BrokerStats
    from ._faults import Trigger
    from ._proxy import FaultProxy, ProxyStats


def __getattr__(name: str) -> Any:
    # imported on first use, so that pytest loading the plugin module of this package
    # (in every session of an environment with stompfast) does not import the broker
    if name in _MODULES:
        import importlib

        return getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
