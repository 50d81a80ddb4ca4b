"""The client against misbehaving servers and faults: each defect found by hostile testing stays fixed.

Async tests run on asyncio, asyncio+uvloop and trio; the blocking client's on
each portal backend. The servers are the in-process broker's fault injection
and the scripted raw servers of ``hostile.py``; the ActiveMQ case (a non-fatal
ERROR in the middle of a busy subscription) is in tests/integration.
"""

from __future__ import annotations

import gc
import socket
import time
import weakref
from typing import Any, List, Optional

import anyio
import pytest
from hostile import Conn, HostileServer, endless_frame

import stompfast._inbox
from stompfast import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConnectionEvent,
    ReconnectPolicy,
    ServerError,
    encode_frame,
)
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

WAIT = 5
MiB = 1024 * 1024

def rss() -> int:
    """This process's resident set size in bytes (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


async def wait_until(predicate: Any, timeout: float = WAIT) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def wait_until_blocking(predicate: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


# -- a frame that never ends, across reconnects ----------------------------------------------


@pytest.mark.anyio
async def test_endless_frames_across_reconnects_leave_memory_bounded():
    # Each session costs up to max_frame_bytes of scanner buffer; with reconnect on,
    # that memory must be given back when the session fails (the scanner frees it,
    # and the failed session dies by reference counting, not at a rare gen-2
    # collection), so RSS stays near one max_frame_bytes however many sessions fail.
    limit = 16 * MiB
    sessions: List[weakref.ref] = []
    client: Optional[AsyncClient] = None

    def on_event(event: ConnectionEvent) -> None:
        if event.kind == "connected":
            assert client is not None
            sessions.append(weakref.ref(client._link.protocol))

    gc.collect()
    gc.disable()  # a session that only a collection would free counts as leaked
    try:
        with HostileServer(endless_frame) as server:
            client = AsyncClient(
                server.url,
                heart_beat=(0, 0),
                max_frame_bytes=limit,
                reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0),
                on_event=on_event,
            )
            async with client:
                await wait_until(lambda: len(sessions) >= 2, 20)
                base = rss()
                await wait_until(lambda: len(sessions) >= 10, 40)
                grown = rss() - base
            assert not server.errors
        leaked = [i for i, ref in enumerate(sessions[:-2]) if ref() is not None]
        assert leaked == [], f"failed sessions still alive: {leaked}"
        assert grown < 3 * limit, f"RSS grew {grown / MiB:.0f} MiB over 8 sessions of a {limit // MiB} MiB limit"
    finally:
        gc.enable()


# -- ERROR followed by other frames in one read ------------------------------------------------


def error_burst(sub_id: str, receipt_id: str) -> bytes:
    """What ActiveMQ does with a bad SEND on a busy connection: MESSAGE, RECEIPT, ERROR, more MESSAGEs."""
    message = lambda mid, body: encode_frame(  # noqa: E731
        "MESSAGE", {"subscription": sub_id, "message-id": mid, "destination": "/queue/e"}, body
    )
    return b"".join(
        [
            message("m-before", b"before"),
            encode_frame("RECEIPT", {"receipt-id": receipt_id}),
            encode_frame("ERROR", {"message": "Invalid transaction id"}, b"tx-9"),
            message("m-after", b"after"),
            encode_frame("RECEIPT", {"receipt-id": "r999"}),
        ]
    )


@pytest.mark.anyio
async def test_error_then_frames_in_one_read_async():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False) as c:
            async with c.subscribe("/queue/e") as sub:
                broker.withhold_receipts()
                pending = await c.send("/queue/other", b"x", receipt=True, wait=False)
                assert pending is not None
                broker.send_raw(error_burst(sub.id, pending.receipt_id))
                with anyio.fail_after(WAIT):
                    await pending  # the RECEIPT before the ERROR confirms the send
                    first = await sub.receive()
                    assert first.body == b"before"
                    with pytest.raises(ServerError, match="Invalid transaction id") as info:
                        await sub.receive()
                assert info.value.body == b"tx-9"
                assert isinstance(c.error, ServerError)


@pytest.mark.anyio
async def test_error_then_frames_in_one_read_reconnecting():
    events: List[ConnectionEvent] = []
    async with Broker() as broker:
        policy = ReconnectPolicy(initial_delay=0.01, jitter=0)
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=policy, on_event=events.append) as c:
            async with c.subscribe("/queue/e") as sub:
                broker.withhold_receipts()
                pending = await c.send("/queue/other", b"x", receipt=True, wait=False)
                assert pending is not None
                broker.send_raw(error_burst(sub.id, pending.receipt_id))
                with anyio.fail_after(WAIT):
                    await pending
                    assert (await sub.receive()).body == b"before"
                broker.withhold_receipts(False)  # (the re-sent SUBSCRIBE waits for its receipt)
                await wait_until(lambda: c.reconnects == 1)
        (lost,) = [e for e in events if e.kind == "disconnected"]
        assert type(lost.error) is ServerError and "Invalid transaction id" in str(lost.error)


def test_error_then_frames_in_one_read_blocking(backend):
    name, options = backend
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=False, backend=name, backend_options=options) as c:
            with c.subscribe("/queue/e") as sub:
                broker.withhold_receipts()
                pending = c.send("/queue/other", b"x", receipt=True, wait=False)
                broker.send_raw(error_burst(sub.id, pending.receipt_id))
                pending.result(timeout=WAIT)
                assert sub.receive(timeout=WAIT).body == b"before"
                with pytest.raises(ServerError, match="Invalid transaction id"):
                    sub.receive(timeout=WAIT)
            assert isinstance(c.error, ServerError)


# -- a call made while the broker's later ERRORs are read ------------------------------------------

# After an ERROR that ends the session the client reads on for the broker's later
# ERRORs (up to ERROR_GRACE) before it fails; a call made in that window must fail
# with the broker's ERROR, not with "cannot send X while the session is failed".
# The grace is made long so that every call surely lands in the window.


def assert_the_brokers_error(info: Any) -> None:
    assert type(info.value) is ServerError and str(info.value) == "Queue not allowed: /queue/x"


@pytest.mark.anyio
async def test_calls_while_later_errors_are_read_raise_the_brokers_error(monkeypatch):
    monkeypatch.setattr(stompfast._inbox, "ERROR_GRACE", 60)
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=False) as c:
            async with c.subscribe("/queue/e", ack="client-individual") as sub:
                await c.send("/queue/e", b"m")
                with anyio.fail_after(WAIT):
                    message = await sub.receive()
                broker.send_raw(encode_frame("ERROR", {"message": "Queue not allowed"}, b"/queue/x"))
                await wait_until(lambda: c._link.protocol.reading_errors)

                async def in_a_transaction() -> None:
                    async with c.transaction():
                        pass  # pragma: no cover

                async def subscribe() -> None:
                    async with c.subscribe("/queue/other"):
                        pass  # pragma: no cover

                calls = [
                    lambda: c.send("/queue/e", b"plain"),
                    lambda: c.send("/queue/e", b"r", receipt=True),
                    c.flush,
                    in_a_transaction,
                    subscribe,
                    message.ack,
                ]
                for call in calls:
                    with pytest.raises(ServerError) as info:
                        with anyio.fail_after(WAIT):
                            await call()
                    assert_the_brokers_error(info)


def test_calls_while_later_errors_are_read_raise_the_brokers_error_blocking(backend, monkeypatch):
    # The Spark sink's flush met "cannot send BEGIN while the session is failed" this way.
    monkeypatch.setattr(stompfast._inbox, "ERROR_GRACE", 60)
    name, options = backend
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=False, backend=name, backend_options=options) as c:
            c.send("/queue/e", b"m", receipt=True)
            broker.send_raw(encode_frame("ERROR", {"message": "Queue not allowed"}, b"/queue/x"))
            wait_until_blocking(lambda: c.async_client._link.protocol.reading_errors)
            # A plain send is queued for the loop and returns; its refusal is raised by the next call
            c.send("/queue/e", b"plain")
            for call in (c.flush, lambda: c.send("/q", b"r", receipt=True)):
                with pytest.raises(ServerError) as info:
                    call()
                assert_the_brokers_error(info)
            c.send("/queue/e", b"queued again")
            with pytest.raises(ServerError) as info:
                c.flush()
            assert_the_brokers_error(info)


def refuse_then_chatter(conn: Conn) -> None:
    """Answer CONNECT with ERROR and, in the same write, frames that must be ignored."""
    conn.read_frame()
    conn.send_raw(
        encode_frame("ERROR", {"message": "Bad CONNECT"}, b"Access refused for user 'x'")
        + encode_frame("MESSAGE", {"subscription": "1", "message-id": "1"}, b"late")
        + b"garbage\x00"
    )


@pytest.mark.anyio
async def test_error_answering_connect_with_frames_after_it_is_an_authentication_error():
    with HostileServer(refuse_then_chatter) as server:
        with pytest.raises(AuthenticationError, match="Bad CONNECT"):
            async with AsyncClient(server.url, heart_beat=(0, 0)):
                pass  # pragma: no cover


def test_error_answering_connect_with_frames_after_it_is_an_authentication_error_blocking(backend):
    name, options = backend
    with HostileServer(refuse_then_chatter) as server:
        with pytest.raises(AuthenticationError, match="Bad CONNECT"):
            Client(server.url, heart_beat=(0, 0), backend=name, backend_options=options).connect()


# -- a flapping broker --------------------------------------------------------------------------


def flapping(conn: Conn) -> None:
    """CONNECTED; confirm the SUBSCRIBE; then ERROR and close, every time."""
    conn.connected()
    subscribe = conn.expect("SUBSCRIBE")
    receipt = subscribe.headers.get("receipt")
    if receipt:
        conn.send("RECEIPT", {"receipt-id": receipt})
    time.sleep(0.005)
    conn.send("ERROR", {"message": "flap"})


@pytest.mark.anyio
async def test_a_flapping_broker_sees_the_backoff_grow_to_its_cap():
    # Every session dies right after it came up: without counting those as failed
    # attempts the backoff started over each time (about nine reconnects a second
    # for ever); now the delay doubles to max_delay.
    events: List[ConnectionEvent] = []
    policy = ReconnectPolicy(initial_delay=0.02, max_delay=0.16, multiplier=2, jitter=0, stable_after=5)
    with HostileServer(flapping) as server:
        async with AsyncClient(server.url, heart_beat=(0, 0), reconnect=policy, on_event=events.append) as c:
            async with c.subscribe("/queue/flap"):
                await wait_until(lambda: sum(e.kind == "reconnecting" for e in events) >= 6, 10)
    delays = [e.delay for e in events if e.kind == "reconnecting"][:6]
    assert delays == [0.02, 0.04, 0.08, 0.16, 0.16, 0.16]
    attempts = [e.attempt for e in events if e.kind == "reconnecting"][:6]
    assert attempts == [1, 2, 3, 4, 5, 6]
    lost = [e for e in events if e.kind == "disconnected"]
    assert lost and all(e.uptime is not None and e.uptime < 1 for e in lost)


@pytest.mark.anyio
async def test_a_session_that_lasted_starts_the_backoff_over():
    events: List[ConnectionEvent] = []
    policy = ReconnectPolicy(initial_delay=0.02, max_delay=1, jitter=0, stable_after=0.2)
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=policy, on_event=events.append) as c:
            broker.drop_connections()
            await wait_until(lambda: c.reconnects == 1)
            broker.drop_connections()  # young: the delay grows
            await wait_until(lambda: c.reconnects == 2)
            await anyio.sleep(0.3)
            broker.drop_connections()  # it lasted stable_after: the delay starts over
            await wait_until(lambda: c.reconnects == 3)
    assert [e.delay for e in events if e.kind == "reconnecting"] == [0.02, 0.04, 0.02]


# -- acks of messages delivered while the re-sent SUBSCRIBE is unconfirmed ----------------------


@pytest.mark.anyio
async def test_a_message_delivered_before_the_resubscribe_receipt_can_be_acked():
    # A broker may deliver on the new connection before it confirms the re-sent
    # SUBSCRIBE: the message came on the live connection, so its ack goes out. (The
    # message itself confirms the SUBSCRIBE, so the reconnect may be complete by the
    # time it is taken, or not yet: either way is right.)
    policy = ReconnectPolicy(initial_delay=0.01, jitter=0)
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=policy) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                broker.delay_receipts(1.0)
                broker.drop_connections()
                broker.publish("/queue/a", b"early")
                with anyio.fail_after(WAIT):
                    message = await sub.receive()
                assert message.body == b"early"
                await message.ack()
                await wait_until(lambda: c.reconnects == 1)
                broker.delay_receipts(0)
                await c.flush()
                assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


def test_a_message_delivered_before_the_resubscribe_receipt_can_be_acked_blocking(backend):
    name, options = backend
    policy = ReconnectPolicy(initial_delay=0.01, jitter=0)
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=policy, backend=name, backend_options=options) as c:
            with c.subscribe("/queue/a", ack="client-individual") as sub:
                broker.delay_receipts(1.0)
                broker.drop_connections()
                broker.publish("/queue/a", b"early")
                message = sub.receive(timeout=WAIT)
                assert message.body == b"early"
                message.ack()
                wait_until_blocking(lambda: c.reconnects == 1)
                broker.delay_receipts(0)
                c.flush(timeout=WAIT)
                assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


# -- closing against a broker that stopped reading ---------------------------------------------


def stops_reading(conn: Conn) -> None:
    """CONNECTED, confirm a SUBSCRIBE, then never read again (TCP flow control, as in a memory alarm)."""
    conn.connected()
    subscribe = conn.expect("SUBSCRIBE")
    conn.send("RECEIPT", {"receipt-id": subscribe.headers["receipt"]})
    time.sleep(30)


@pytest.mark.parametrize("closing", ["client", "subscription-then-client"])
def test_close_is_bounded_when_the_broker_stops_reading_blocking(backend, closing):
    # Sends without a receipt are queued in the client while the broker reads
    # nothing: close() (and Subscription.close()) used to wait for them without
    # bound. Now the whole close takes at most about disconnect_timeout.
    name, options = backend
    with HostileServer(stops_reading) as server:
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by the accepted socket
        c = Client(
            server.url, heart_beat=(0, 0), reconnect=False, disconnect_timeout=1.0, send_buffer_bytes=256 * 1024,
            backend=name, backend_options=options,
        )
        c.connect(timeout=WAIT)
        sub = c.subscribe("/queue/s", ack="client-individual")
        body = b"x" * 16384
        deadline = time.monotonic() + 20
        full_since = None
        while True:  # until the client's own queue holds sends that the loop cannot write
            while c._outbox.queued_bytes < 128 * 1024:  # (below send_buffer_bytes: send itself does not wait)
                c.send("/queue/s", body)
            time.sleep(0.01)
            now = time.monotonic()
            if c._outbox.queued_bytes < 128 * 1024:
                full_since = None  # the loop took them: the socket still has room
            elif full_since is None:
                full_since = now
            elif now - full_since > 0.2:
                break  # queued for 0.2 s: the socket and the async client's queue are full
            assert now < deadline, "the socket never filled"
        took = []
        for close in ([sub.close] if closing == "subscription-then-client" else []) + [c.close]:
            started = time.monotonic()
            close()
            took.append(time.monotonic() - started)
    assert max(took) < 1.0 + 0.5, f"closing took {took} s with disconnect_timeout=1"


# -- a broker that ends our close without the DISCONNECT's RECEIPT ------------------------------


def close_without_receipt(conn: Conn) -> None:
    """Answer CONNECT; on DISCONNECT close the connection without a RECEIPT (RabbitMQ's Web-STOMP)."""
    conn.connected()
    while True:
        frame = conn.read_frame(30)
        if frame is None or frame.command == "DISCONNECT":
            return


@pytest.mark.anyio
async def test_a_close_the_broker_ends_without_a_receipt_is_prompt():
    with HostileServer(close_without_receipt) as server:
        async with AsyncClient(server.url, heart_beat=(0, 0), disconnect_timeout=5) as c:
            started = time.monotonic()
            assert c.is_connected
        assert time.monotonic() - started < 1.0
        assert not server.errors


def test_a_close_the_broker_ends_without_a_receipt_is_prompt_blocking(backend):
    name, options = backend
    with HostileServer(close_without_receipt) as server:
        with Client(server.url, heart_beat=(0, 0), disconnect_timeout=5, backend=name, backend_options=options):
            started = time.monotonic()
        assert time.monotonic() - started < 1.0
        assert not server.errors
