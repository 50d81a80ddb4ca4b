"""Bounded memory on every path where a client could pile up what it is sent or asked to send.

Each path of tests/memory_paths.py is pushed against for STOMPFAST_MEMORY_SECONDS
(default 4 s here; ``python bench/memory_table.py`` runs 60 s or 1,000,000
messages): the RSS of the process holding the client may not grow by 50 MB.
"""

from __future__ import annotations

import pytest
from memory_paths import LIMIT, MB, PATHS, seconds_from_env

pytestmark = [pytest.mark.timeout(120)]


@pytest.mark.parametrize("path", [pytest.param(p, id=p.__name__[5:]) for p in PATHS])
def test_rss_growth_is_bounded(path):
    result = path(seconds_from_env(), 1_000_000)
    print(result)
    assert result.pushed > 0, result
    assert result.growth < LIMIT, f"{result} (limit {LIMIT / MB:.0f} MB)"
