"""``instrument(client)``: traced methods installed on one client object, and its stats exported."""

from __future__ import annotations

import threading
import weakref
from typing import Any, List, Optional, Union

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.propagate import get_global_textmap
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import TracerProvider

from .. import AsyncClient, Client, __version__
from ..errors import ConfigurationError
from ._metrics import StatsRegistration, observe_stats
from ._tracing import Tracing, async_client_methods, sync_client_methods

_instrumented: "weakref.WeakKeyDictionary[Any, Instrumentation]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class Instrumentation:
    """What :func:`instrument` did to one client; :meth:`uninstrument` undoes it."""

    def __init__(self, client: Union[AsyncClient, Client], tracing: Optional[Tracing],
                 metrics: Optional[StatsRegistration], installed: List[str]) -> None:
        self.client = weakref.ref(client)
        #: the tracer, propagator and traced subscriptions (None with ``tracing=False``)
        self.tracing = tracing
        #: the client's registration with the metrics exporter (None with ``metrics=False``)
        self.metrics = metrics
        #: the names of the client's methods shadowed by traced ones
        self.installed = installed

    def uninstrument(self) -> None:
        """Remove the traced methods and stop exporting the client's stats.

        Subscriptions already made stay traced until they close.
        """
        client = self.client()
        if client is not None:
            for name in self.installed:
                # The class's method shows again
                client.__dict__.pop(name, None)
            with _lock:
                if _instrumented.get(client) is self:
                    del _instrumented[client]
        self.installed = []
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


def instrument(
    client: Union[AsyncClient, Client],
    *,
    tracing: bool = True,
    metrics: bool = True,
    tracer_provider: Optional[TracerProvider] = None,
    meter_provider: Optional[MeterProvider] = None,
    propagator: Optional[TextMapPropagator] = None,
    link_only: bool = False,
    name: Optional[str] = None,
) -> Instrumentation:
    """Trace what ``client`` sends and receives, and export its ``stats()`` as OpenTelemetry metrics.

    Works on :class:`~stompfast.AsyncClient` and :class:`~stompfast.Client`, before or
    after connecting; it changes that client object only. Subscriptions made from then
    on are traced.

    Args:
        tracing: SENDs carry the trace context (``traceparent``, ``tracestate``) and get
            PRODUCER spans; received messages get CONSUMER spans.
        metrics: export ``client.stats()`` through observable instruments.
        tracer_provider, meter_provider: default: the global ones.
        propagator: what writes and reads the context in the headers (default: the
            global text-map propagator, W3C trace context and baggage).
        link_only: a consumer span's parent is the ambient context, not the producer's
            span; the two are tied by a span link only (a new trace per message).
        name: the ``stomp.client.name`` attribute of the client's metrics (to tell
            clients apart; clients of the same name are added together).

    Raises:
        ConfigurationError: ``client`` is instrumented already.
        TypeError: ``client`` is not a stompfast client.
    """
    if not isinstance(client, (AsyncClient, Client)):
        raise TypeError(f"instrument() takes an AsyncClient or a Client, not {client!r}")
    with _lock:
        if client in _instrumented:
            raise ConfigurationError(f"{client!r} is instrumented already (Instrumentation.uninstrument() first)")
        installed: List[str] = []
        traced: Optional[Tracing] = None
        if tracing:
            tracer = trace.get_tracer("stompfast", __version__, tracer_provider=tracer_provider)
            traced = Tracing(client, tracer, propagator if propagator is not None else get_global_textmap(),
                             link_only)
            if isinstance(client, AsyncClient):
                methods = async_client_methods(client, traced)
            else:
                methods = sync_client_methods(client, traced)
            for method_name, method in methods.items():
                # An instance attribute: shadows the class's method
                setattr(client, method_name, method)
                installed.append(method_name)
        registration = None
        if metrics:
            registration = observe_stats(client, meter_provider=meter_provider,
                                         attributes={"stomp.client.name": name} if name is not None else None)
        instrumentation = _instrumented[client] = Instrumentation(client, traced, registration, installed)
    return instrumentation


def instrumentation_of(client: Union[AsyncClient, Client]) -> Optional[Instrumentation]:
    """The :class:`Instrumentation` of ``client``, or None."""
    return _instrumented.get(client)


def uninstrument(client: Union[AsyncClient, Client]) -> None:
    """Undo :func:`instrument` on ``client`` (nothing if it is not instrumented)."""
    instrumentation = _instrumented.get(client)
    if instrumentation is not None:
        instrumentation.uninstrument()
