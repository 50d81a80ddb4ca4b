"""Fixtures for the in-process broker tests: every async test runs on asyncio, asyncio+uvloop and trio.

The broker is driven with raw anyio TCP sockets and the project's own
``encode_frame``/``FrameScanner`` (:mod:`rawstomp`), not with the client library,
so these tests pin the broker's wire behaviour on their own.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest):
    return request.param
