"""The client's lifecycle table (stompfast/_lifecycle.py) on its own, then the states a real client passes through.

The table tests need no client. The client tests drive an AsyncClient against the
in-process broker through each way a life can go (closed unused, closed after use,
failed for good, lost and re-established, gave up reconnecting) and record every
state it is seen in: each recorded move must be one the table allows. They run on
asyncio, asyncio+uvloop and trio.
"""

from __future__ import annotations

import sys
from typing import List, Tuple

import anyio
import pytest
from hostile import Conn, HostileServer

from stompfast import AsyncClient, ClientClosedError, ConnectError, ReconnectPolicy, ServerError
from stompfast._lifecycle import TRANSITIONS, ClientState, advance, describe
from stompfast._scanner import encode_frame
from stompfast.testing import Broker

S = ClientState
FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)


# -- the table ---------------------------------------------------------------------------


def test_every_state_has_a_row_and_every_move_ends_in_a_state() -> None:
    assert set(TRANSITIONS) == set(ClientState)
    for targets in TRANSITIONS.values():
        assert targets <= set(ClientState)


def test_closed_is_the_only_end_and_every_state_can_reach_it() -> None:
    assert [s for s, targets in TRANSITIONS.items() if not targets] == [S.CLOSED]
    for start in ClientState:
        seen, todo = {start}, [start]
        while todo:
            for nxt in TRANSITIONS[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert S.CLOSED in seen, start


def test_every_state_is_reachable_from_new() -> None:
    seen, todo = {S.NEW}, [S.NEW]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(ClientState)


def test_a_client_is_used_once_nothing_goes_back_to_new_or_connecting() -> None:
    for targets in TRANSITIONS.values():
        assert S.NEW not in targets
    assert [s for s, targets in TRANSITIONS.items() if S.CONNECTING in targets] == [S.NEW]


@pytest.mark.parametrize("current", list(ClientState))
@pytest.mark.parametrize("target", list(ClientState))
def test_advance_allows_exactly_the_moves_of_the_table(current: ClientState, target: ClientState) -> None:
    if target in TRANSITIONS[current]:
        assert advance(current, target) is target
    else:
        with pytest.raises(RuntimeError, match=f"from {current.name} to {target.name}"):
            advance(current, target)


def test_describe_says_the_state_as_a_person_would() -> None:
    assert describe(S.NEW) == "not connected"
    assert describe(S.OPEN) == "connected"
    assert describe(S.RECONNECTING) == "reconnecting"
    assert describe(S.FAILED, ServerError("boom")) == "failed: ServerError"
    assert describe(S.CLOSED, ServerError("boom")) == "closed"


# -- a real client's life ----------------------------------------------------------------


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[ClientState, ClientState]]:
    """Every move any client makes during the test, in order, as (from, to).

    The client's modules call ``advance`` for each move; each module that imported
    it gets a spy that records the move and makes it.
    """
    seen: List[Tuple[ClientState, ClientState]] = []

    def spy(current: ClientState, target: ClientState) -> ClientState:
        moved = advance(current, target)
        seen.append((current, target))
        return moved

    users = [
        m for name, m in list(sys.modules.items())
        if name.startswith("stompfast.") and name != "stompfast._lifecycle" and getattr(m, "advance", None) is advance
    ]
    # The client alone moves its lifecycle (the supervisor asks it to, through callbacks).
    assert [m.__name__ for m in users] == ["stompfast._client"], users
    for module in users:
        monkeypatch.setattr(module, "advance", spy)
    return seen


def path(moves: List[Tuple[ClientState, ClientState]]) -> List[ClientState]:
    """The states one client went through, checked to be a chain of its own moves."""
    states = [S.NEW]
    for before, after in moves:
        assert before is states[-1], moves
        states.append(after)
    return states


pytestmark = [pytest.mark.timeout(30)]


@pytest.mark.anyio
async def test_closed_before_it_ever_connected(moves: List[Tuple[ClientState, ClientState]]) -> None:
    client = AsyncClient("stomp://127.0.0.1:1")
    await client.aclose()
    assert path(moves) == [S.NEW, S.CLOSED]
    assert client._state is S.CLOSED
    with pytest.raises(ClientClosedError):
        await client.connect()


@pytest.mark.anyio
async def test_a_first_connect_that_fails_ends_closed(moves: List[Tuple[ClientState, ClientState]]) -> None:
    async with Broker() as broker:
        url = broker.url
    client = AsyncClient(url, heart_beat=(0, 0), reconnect=False, connect_timeout=2)
    with pytest.raises(ConnectError):
        await client.connect()
    assert path(moves) == [S.NEW, S.CONNECTING, S.CLOSED]


@pytest.mark.anyio
async def test_connected_then_closed(moves: List[Tuple[ClientState, ClientState]]) -> None:
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            await client.send("/queue/a", b"x", receipt=True)
            assert client.is_connected
    assert path(moves) == [S.NEW, S.CONNECTING, S.OPEN, S.CLOSING, S.CLOSED]


@pytest.mark.anyio
async def test_a_failure_it_does_not_retry_is_failed_until_closed(
    moves: List[Tuple[ClientState, ClientState]],
) -> None:
    async with Broker() as broker:
        client = AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False)
        await client.connect()
        broker.send_error("no more")
        with anyio.fail_after(5):
            while client._state is S.OPEN:
                await anyio.sleep(0.005)
        assert client._state is S.FAILED
        assert repr(client).endswith("failed: ServerError>")
        assert not client.is_connected
        with pytest.raises(ServerError):
            await client.send("/queue/a", b"x")
        await client.aclose()
    assert path(moves) == [S.NEW, S.CONNECTING, S.OPEN, S.FAILED, S.CLOSING, S.CLOSED]


@pytest.mark.anyio
async def test_lost_and_re_established_then_closed(moves: List[Tuple[ClientState, ClientState]]) -> None:
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST) as client:
            broker.drop_connections()
            with anyio.fail_after(5):
                while client.reconnects == 0:
                    await anyio.sleep(0.001)
            await client.send("/queue/a", b"x", receipt=True)
    assert path(moves) == [S.NEW, S.CONNECTING, S.OPEN, S.RECONNECTING, S.OPEN, S.CLOSING, S.CLOSED]


@pytest.mark.anyio
async def test_gave_up_reconnecting_is_failed(moves: List[Tuple[ClientState, ClientState]]) -> None:
    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0, max_attempts=2)
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=policy) as client:
            broker.refuse_connections()
            broker.drop_connections()
            with anyio.fail_after(10):
                while client._state is not S.FAILED:
                    await anyio.sleep(0.005)
            assert repr(client).endswith("failed: ConnectError>")
    assert path(moves) == [S.NEW, S.CONNECTING, S.OPEN, S.RECONNECTING, S.FAILED, S.CLOSING, S.CLOSED]


@pytest.mark.anyio
async def test_an_error_in_the_same_read_as_connected_leaves_the_client_failed_not_open(
    moves: List[Tuple[ClientState, ClientState]],
) -> None:
    # CONNECTED and an ERROR in one write: the ERROR is dispatched while connect() is
    # still completing. The client must not be OPEN with an error recorded: a plain
    # send would then be queued on a dead connection instead of raising.
    def handler(conn: Conn) -> None:
        connect = conn.read_frame()
        assert connect is not None
        conn.send_raw(
            encode_frame("CONNECTED", {"version": "1.2", "heart-beat": "0,0"}, b"")
            + encode_frame("ERROR", {"message": "go away"}, b"")
        )
        conn.read_frame(timeout=5)

    with HostileServer(handler) as server:
        client = AsyncClient(f"stomp://127.0.0.1:{server.port}", heart_beat=(0, 0), reconnect=False)
        try:
            await client.connect()
        except ServerError:
            assert path(moves) == [S.NEW, S.CONNECTING, S.CLOSED]
            return
        try:
            with anyio.fail_after(5):
                while client.error is None:
                    await anyio.sleep(0.001)
            assert not client.is_connected
            with pytest.raises(ServerError):
                await client.send("/queue/a", b"x")
        finally:
            await client.aclose()
        assert path(moves) == [S.NEW, S.CONNECTING, S.OPEN, S.FAILED, S.CLOSING, S.CLOSED]
