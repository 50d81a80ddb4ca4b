"""pytest fixtures for code that talks STOMP: an in-process broker per test.

Registered as the ``stompfast`` entry point of ``pytest11``, so installing
stompfast makes these fixtures available everywhere:

``stomp_broker``
    an async fixture yielding a started :class:`~stompfast.testing.Broker`
    in the test's event loop; the test must run under anyio's pytest plugin
    (``@pytest.mark.anyio``, any ``anyio_backend``)::

        @pytest.mark.anyio
        async def test_send(stomp_broker):
            ...connect to stomp_broker.url...
            assert stomp_broker.queue_depth("/queue/a") == 1

``stomp_broker_thread``
    a synchronous fixture yielding a broker running in a thread of its own
    (:meth:`~stompfast.testing.Broker.in_thread`), for synchronous tests.

Both are function-scoped. Broker options come from the ``stomp_broker``
marker: ``@pytest.mark.stomp_broker(heart_beat=(100, 100), users={"guest":
"guest"})`` passes its keyword arguments to :class:`~stompfast.testing.Broker`.

This module imports nothing but pytest at import time (the broker, and with it
anyio and the scanner, are imported when a fixture is first used), because
pytest loads it in every session of an environment where stompfast is installed.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Dict, Iterator

import pytest

MARKER = "stomp_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): keyword arguments for the Broker of the stomp_broker and "
        "stomp_broker_thread fixtures (stompfast.testing)",
    )


def _options(request: pytest.FixtureRequest) -> Dict[str, Any]:
    options: Dict[str, Any] = {}
    # the closest marker wins: apply the farthest first
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if marker.args:
            raise TypeError(f"@pytest.mark.{MARKER} takes keyword arguments only")
        options.update(marker.kwargs)
    return options


@pytest.fixture
async def stomp_broker(request: pytest.FixtureRequest, anyio_backend: Any) -> AsyncIterator[Any]:
    """A started in-process STOMP broker in the test's event loop (anyio tests)."""
    from stompfast.testing import Broker

    options = _options(request)
    # Those choose the thread fixture's event loop; here it is the test's
    options.pop("backend", None)
    options.pop("backend_options", None)
    async with Broker(**options) as broker:
        yield broker


@pytest.fixture
def stomp_broker_thread(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A started in-process STOMP broker running in its own thread (synchronous tests).

    The marker may also give ``backend`` (``"asyncio"`` or ``"trio"``) and
    ``backend_options`` for the broker's event loop.
    """
    from stompfast.testing import Broker

    with Broker.in_thread(**_options(request)) as broker:
        yield broker
