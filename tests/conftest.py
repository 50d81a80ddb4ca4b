"""Fixtures shared by the scanner and encoder tests.

``impl`` runs a test once per implementation (ids ``c`` and ``py``). The ``c`` one
fails when the extension cannot be imported: a normal install must have built it.
With ``STOMPFAST_NO_EXTENSIONS`` set (a pure build) it is skipped instead.

Tests marked ``slow`` (bigger hypothesis runs) are skipped unless ``--run-slow`` is
given, so that ``pytest tests`` stays well under two minutes. Tests marked ``soak``
(tests/soak/: minutes against real brokers, restarting RabbitMQ) are skipped unless
``--run-soak`` is given; ``.ci/run`` runs them as a step of their own.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

from helpers import feed_all_ways, load_impl  # noqa: F401  (re-exported for tests)

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("slow", parent=settings.get_profile("default"), max_examples=2000)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="run tests marked slow")
    parser.addoption("--run-soak", action="store_true", default=False,
                     help="run the soak and chaos suite (tests marked soak; restarts RabbitMQ)")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for marker in ("slow", "soak"):
        if config.getoption(f"--run-{marker}"):
            continue
        skip = pytest.mark.skip(reason=f"{marker}: run with --run-{marker}")
        for item in items:
            if item.get_closest_marker(marker) is not None:  # (keywords would match the tests/soak/ package)
                item.add_marker(skip)


@pytest.fixture(params=["c", "py"], scope="session")
def impl(request: pytest.FixtureRequest):
    """The module of one implementation: ``FrameScanner`` and ``encode_frame``."""
    return load_impl(request.param)


# Every async test runs on asyncio, asyncio with uvloop, and trio.
ANYIO_BACKENDS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", {}), id="trio"),
]


@pytest.fixture(params=ANYIO_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest):
    return request.param


# The blocking client's own event loop thread: (backend name, backend_options), every backend.
# A test module that wants fewer (real brokers: asyncio and trio) defines its own ``backend``.
SYNC_BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]


@pytest.fixture(params=SYNC_BACKENDS)
def backend(request: pytest.FixtureRequest):
    """The anyio backend of a blocking Client's own loop: (name, backend_options)."""
    return request.param
