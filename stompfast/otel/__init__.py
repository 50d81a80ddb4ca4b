"""OpenTelemetry for stompfast: traces across the broker and the client's metrics (``pip install stompfast[otel]``).

::

    import stompfast.otel

    client = AsyncClient(url)            # or the blocking Client
    stompfast.otel.instrument(client)    # before or after connecting

With :func:`instrument`, every SEND of that client carries the W3C trace context
(``traceparent``, ``tracestate``) in its headers and gets a PRODUCER span; every
message taken from its subscriptions gets a CONSUMER span that starts from the
context the producer put in the message (a child of the producer's span, and linked
to it); ACK, NACK and receipts are events on the spans. Its ``client.stats()`` is
exported through OpenTelemetry metrics with observable instruments, read only when
the metrics are collected.

Nothing in the client checks whether it is instrumented: :func:`instrument`
installs the traced methods on that one client object (instance attributes, which
shadow the class's methods) and re-classes the subscriptions it returns. A client
that is not instrumented runs exactly the code it runs without this package, and
sends the same bytes. See docs/observability.md.
"""

from __future__ import annotations

import types as _types

try:
    import opentelemetry.metrics  # noqa: F401
    import opentelemetry.trace  # noqa: F401
# The optional part is missing: say how to get it
except ImportError as exc:
    raise ImportError(
        f"stompfast.otel needs the OpenTelemetry API ({exc}): pip install 'stompfast[otel]'"
    ) from exc

from ._instrument import Instrumentation, instrument, instrumentation_of, uninstrument
from ._metrics import METRICS, observe_stats
from ._setup import EXPORTERS, BatchSpan, exporter_from_environment, flush, tracer_provider_from_environment
from ._tracing import (
    TRACED_EVENTS,
    TracedAsyncSubscription,
    TracedSubscription,
    context_of,
    span_of,
)

__all__ = [
    "EXPORTERS",
    "METRICS",
    "BatchSpan",
    "TRACED_EVENTS",
    "Instrumentation",
    "TracedAsyncSubscription",
    "TracedSubscription",
    "context_of",
    "exporter_from_environment",
    "flush",
    "instrument",
    "instrumentation_of",
    "observe_stats",
    "span_of",
    "tracer_provider_from_environment",
    "uninstrument",
]

# Each public class and function shows as stompfast.otel.X, the name users import (reprs,
# help(), pickles), not as the private module that defines it: as in stompfast/__init__.py.
# The constants keep theirs.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, (type, _types.FunctionType)) and _obj.__module__.startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
