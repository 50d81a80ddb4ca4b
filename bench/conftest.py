"""Fixtures for the pytest-benchmark micro benches in this folder.

These benches are not part of the test suite: the project's ``testpaths`` is
``tests``, so a plain ``pytest`` never collects them. Run them with
``python -m pytest bench/test_bench_scanner.py --benchmark-only``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, List, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scanner_compare, whatever the import mode

import scanner_compare as sc  # noqa: E402

SMALL_FRAMES = 2000  # ~0.9 MB of 100-byte-body MESSAGE frames
LARGE_FRAMES = 32  # 2 MiB of 64 KiB-body MESSAGE frames

_MODULES = {"c": "stompfast._scanner_c", "py": "stompfast._scanner_py"}


@pytest.fixture(scope="session", params=[pytest.param("c", id="c"), pytest.param("py", id="py")])
def impl(request: pytest.FixtureRequest) -> Any:
    """The scanner/encoder module: ``stompfast._scanner_c`` (id ``c``) or ``_scanner_py`` (id ``py``)."""
    name = _MODULES[request.param]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if request.param == "c":
            pytest.skip("C extension not built (%s): pip install -e . --no-build-isolation" % exc)
        raise


Stream = Tuple[List[bytes], List[sc.Expected], int]


def _stream(kind: str, n: int) -> Stream:
    data, expected = sc.build_stream(kind, n)
    return sc.chunked(data, sc.CHUNK), expected, sum(len(e[2]) for e in expected)


@pytest.fixture(scope="session")
def small_stream() -> Stream:
    """64 KiB chunks of SMALL_FRAMES ActiveMQ-style MESSAGE frames (11 headers, 100-byte body)."""
    return _stream("small", SMALL_FRAMES)


@pytest.fixture(scope="session")
def large_stream() -> Stream:
    """64 KiB chunks of LARGE_FRAMES MESSAGE frames with 64 KiB bodies."""
    return _stream("large", LARGE_FRAMES)
