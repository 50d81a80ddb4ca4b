"""The hostile-server table (tests/hostile.py CASES): every misbehaviour ends as documented.

Each case runs on the AsyncClient (asyncio, asyncio+uvloop, trio) and on the
blocking Client (each portal backend): the documented typed error (or, for
harmless junk, a client that goes on working), within the case's deadline, with
the memory traced over the run under a small multiple of the frame limit.
``python bench/hostile_table.py`` prints the same cases as a table.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import pytest
from hostile import CASES, Case, HostileServer, run_async, run_blocking

pytestmark = [pytest.mark.timeout(60)]

SYNC_BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]
CASE_PARAMS = [pytest.param(case, id=case.name.replace(" ", "-")) for case in CASES]


@pytest.mark.anyio
@pytest.mark.parametrize("case", CASE_PARAMS)
async def test_async_client(case: Case) -> None:
    with HostileServer(case.handler) as server:
        outcome = await run_async(case, server.url)
    outcome.check(case)
    assert not server.errors


@pytest.mark.parametrize("backend", SYNC_BACKENDS)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_blocking_client(case: Case, backend: Tuple[str, Optional[Dict[str, Any]]]) -> None:
    with HostileServer(case.handler) as server:
        outcome = run_blocking(case, server.url, *backend)
    outcome.check(case)
    assert not server.errors


# -- random server byte streams ------------------------------------------------------------------

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    given = None


if given is not None:
    from hostile import FRAGMENTS, check_stream_outcome, run_stream

    STREAMS = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=48)), max_size=40).map(b"".join)

    @pytest.mark.anyio
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=STREAMS, chunks=st.integers(1, 8))
    async def test_random_server_streams_end_in_a_typed_error(data: bytes, chunks: int) -> None:
        # Whatever a server writes after CONNECTED, the client never crashes (a non-Stomp
        # exception), never hangs, and never holds more than its limits allow; the
        # server's close ends it at the latest, as ConnectionLostError.
        check_stream_outcome(await run_stream(data, chunks), data)
