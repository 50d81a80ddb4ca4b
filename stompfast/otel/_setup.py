"""Tracing for the tools: a tracer provider from the environment, and one span for a batch of SENDs.

What ``stompfast send/listen/bench --trace``, :class:`~stompfast.loadgen.LoadConfig`'s
``trace`` and the Spark sink's ``trace`` option use (docs/observability.md, "The CLI, the
load generator and Spark"). They set no global provider: an application's own global
tracer provider wins, and otherwise each process builds one SDK provider of its own.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Dict, Optional

from opentelemetry import trace
from opentelemetry.propagate import get_global_textmap
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from .. import __version__
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("stompfast.otel")

#: What an exporter can be named: ``--trace=NAME``, ``OTEL_TRACES_EXPORTER``.
EXPORTERS = ("otlp", "console", "none")

SDK_HINT = "pip install 'stompfast[otel]' opentelemetry-sdk"

_providers: Dict[str, TracerProvider] = {}
_lock = threading.Lock()


def exporter_from_environment() -> str:
    """The exporter the environment asks for.

    ``OTEL_TRACES_EXPORTER`` (its first name) when set; else ``otlp`` when an OTLP endpoint
    is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
    else ``none``: spans are made and their context travels in the headers, nothing is exported.
    """
    named = os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")[0].strip().lower()
    if named:
        return named
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return "otlp"
    return "none"


def tracer_provider_from_environment(exporter: Optional[str] = None) -> Optional[TracerProvider]:
    """The tracer provider for a tool's spans: None when the application set a global one (use it).

    Otherwise an OpenTelemetry SDK ``TracerProvider``, one per process and exporter, made
    the first time: its resource from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``,
    its sampler from ``OTEL_TRACES_SAMPLER``, and the exporter ``exporter`` (default:
    :func:`exporter_from_environment`): ``console`` (each span as JSON on stderr when it
    ends), ``otlp`` (``opentelemetry-exporter-otlp``, configured by the ``OTEL_EXPORTER_OTLP_*``
    variables, batched), ``none`` (no export). It is not made the global provider.

    Raises:
        ConfigurationError: an unknown exporter, or a package it needs is not installed.
    """
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # The application's own provider
        return None
    name = (exporter or exporter_from_environment()).lower()
    if name not in EXPORTERS:
        raise ConfigurationError(f"unknown trace exporter {name!r}: one of {', '.join(EXPORTERS)}")
    with _lock:
        provider = _providers.get(name)
        if provider is None:
            provider = _providers[name] = _sdk_provider(name)
    return provider


def _sdk_provider(exporter: str) -> TracerProvider:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise ConfigurationError(
            f"tracing needs the OpenTelemetry SDK, or a tracer provider set by the application ({exc}): {SDK_HINT}"
        ) from None
    provider = SdkTracerProvider(resource=Resource.create())
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    elif exporter == "otlp":
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    return provider


def _otlp_exporter() -> "SpanExporter":
    """``opentelemetry-exporter-otlp``'s span exporter for the protocol the environment names (http by default)."""
    import importlib

    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    module = f"opentelemetry.exporter.otlp.proto.{'grpc' if protocol == 'grpc' else 'http'}.trace_exporter"
    try:
        exporter_class = importlib.import_module(module).OTLPSpanExporter
    except ImportError as exc:
        raise ConfigurationError(
            f"the otlp trace exporter needs opentelemetry-exporter-otlp ({exc}):"
            " pip install opentelemetry-exporter-otlp"
        ) from None
    # Configured by the OTEL_EXPORTER_OTLP_* variables
    exporter: SpanExporter = exporter_class()
    return exporter


def flush(provider: Optional[TracerProvider], timeout_millis: int = 5000) -> None:
    """Export what ``provider`` (an SDK one; None: the global) still holds; never raises."""
    target = provider if provider is not None else trace.get_tracer_provider()
    force_flush = getattr(target, "force_flush", None)
    if force_flush is None:
        return
    try:
        force_flush(timeout_millis)
    except Exception:
        log.debug("flushing the tracer provider failed", exc_info=True)


def finish_span(span: Span, error: Optional[BaseException] = None) -> None:
    """End ``span``, recording ``error`` first if there is one (the messaging conventions' ``error.type``).

    May raise what the tracer raises: callers catch it (a tracer never fails a send).
    """
    if error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
        if isinstance(error, Exception):
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()


class BatchSpan:
    """One PRODUCER span for a batch of SENDs (a Spark write task), not one per message.

    ``headers`` holds its context (``traceparent``, ``tracestate``) for every SEND of the
    batch; :meth:`end` sets ``messaging.batch.message_count``. A tracer that raises fails
    nothing: the batch goes on untraced (``headers`` empty) and the failure is logged.
    """

    def __init__(self, destination: Optional[str], *, tracer_provider: Optional[TracerProvider] = None,
                 propagator: Optional[TextMapPropagator] = None, server: Optional[str] = None) -> None:
        self.span: Optional[Span] = None
        self.headers: Dict[str, str] = {}
        try:
            tracer = trace.get_tracer("stompfast", __version__, tracer_provider=tracer_provider)
            attributes: Dict[str, str] = {
                "messaging.system": "stomp",
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
            }
            if destination:
                attributes["messaging.destination.name"] = destination
            if server:
                attributes["server.address"] = server
            self.span = tracer.start_span(f"send {destination}" if destination else "send",
                                          kind=SpanKind.PRODUCER, attributes=attributes)
            (propagator or get_global_textmap()).inject(self.headers, context=trace.set_span_in_context(self.span))
        except Exception:
            log.warning("the OpenTelemetry tracer raised while starting a batch span; the batch goes on untraced",
                        exc_info=True)
            self.headers = {}

    def end(self, message_count: int, error: Optional[BaseException] = None) -> None:
        """The batch is sent (``message_count`` messages), or failed with ``error``."""
        span = self.span
        if span is None:
            return
        self.span = None
        try:
            span.set_attribute("messaging.batch.message_count", message_count)
            finish_span(span, error)
        except Exception:
            log.warning("the OpenTelemetry tracer raised while ending a batch span", exc_info=True)
