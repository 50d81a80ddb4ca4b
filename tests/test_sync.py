"""The sync Client against the in-process broker (running in a thread of its own).

Every test that talks to the broker runs with the client's own event loop on
asyncio, asyncio+uvloop and trio (the ``backend`` fixture). The parity test at
the end proves that the sync classes mirror the async ones, parameter by
parameter.
"""

from __future__ import annotations

import concurrent.futures
import gc
import inspect
import logging
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Tuple

import anyio
import anyio.from_thread
import pytest

from stompfast import (
    AsyncClient,
    AsyncSubscription,
    AsyncTransaction,
    AuthenticationError,
    Client,
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    LocalProtocolError,
    Message,
    Portal,
    Receipt,
    ReceiptFuture,
    ReceiptTimeout,
    ReceiveTimeout,
    ReconnectPolicy,
    ServerError,
    StompTimeout,
    Subscription,
    SyncMessage,
    Transaction,
    TransactionError,
)
from stompfast._sync_loop import SyncLoop
from stompfast._sync_outbox import ThreadOutbox
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(30)]

WAIT = 5  # seconds anything that should happen may take before the test fails

BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Tuple[str, Optional[Dict[str, Any]]]:
    """The anyio backend of the client's own event loop thread: (name, backend_options)."""
    return request.param


@pytest.fixture
def broker(stomp_broker_thread: Broker) -> Broker:
    return stomp_broker_thread


@pytest.fixture
def make(broker: Broker, backend):
    """Make a Client of ``broker`` on the test's backend (not connected); closed after the test."""
    clients: List[Client] = []

    def make(**kwargs: Any) -> Client:
        kwargs.setdefault("heart_beat", (0, 0))
        kwargs.setdefault("reconnect", False)  # single-connection semantics (reconnect: test_reconnect.py)
        name, options = backend
        client = Client(broker.url, backend=name, backend_options=options, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(make) -> Client:
    """A connected Client."""
    c = make()
    c.connect()
    return c


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT) -> None:
    """Poll client-side state that has no event to wait on (a buffer's length)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def run_threads(*targets: Callable[[], None]) -> None:
    """Run each target in a thread, join them all, and re-raise the first failure."""
    errors: List[BaseException] = []

    def guard(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: B036 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]


def new_threads(action: Callable[[], Any]) -> Tuple[Any, List[threading.Thread]]:
    """Run ``action`` and return its result and the threads it started that are still alive."""
    before = set(threading.enumerate())
    result = action()
    return result, [t for t in threading.enumerate() if t not in before]


# -- connecting and closing ---------------------------------------------------------------


@pytest.mark.stomp_broker(heart_beat=(200, 200))
def test_connect_negotiates_and_exposes_the_session(make, broker):
    c = make(heart_beat=(100, 100))
    assert not c.is_connected and c.version is None
    with c as entered:
        assert entered is c
        assert c.version == "1.2"
        assert c.server == broker.server
        assert c.session in broker.sessions
        assert c.heart_beat == (200, 200)
        assert c.is_connected and c.error is None
        assert (c.endpoint.host, c.endpoint.port) == ("127.0.0.1", broker.port)
    assert not c.is_connected
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert "DISCONNECT" in [f.command for f in broker.received]


def test_connect_and_close_without_with_and_close_is_idempotent(make, broker):
    c = make()
    c.connect()
    assert c.is_connected
    c.close()
    c.close()
    assert not c.is_connected
    with pytest.raises(ClientClosedError):
        c.send("/queue/a", b"x")
    with pytest.raises(ClientClosedError):
        c.connect()
    with pytest.raises(ClientClosedError):
        c.subscribe("/queue/a")


def test_close_stops_the_clients_own_loop_thread(broker, backend):
    name, options = backend
    c, threads = new_threads(
        lambda: Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options)
    )
    assert [t.name for t in threads] == ["stompfast-client"]
    assert all(t.daemon for t in threads)
    c.connect()
    c.close()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()


def test_refused_connection_is_a_connect_error_and_closes_the_client(make, broker):
    broker.refuse_connections(1)
    c = make()
    with pytest.raises(ConnectError):
        c.connect()
    with pytest.raises(ClientClosedError):
        c.connect()


@pytest.mark.stomp_broker(users={"alice": "right"})
def test_wrong_passcode_is_an_authentication_error(make):
    with pytest.raises(AuthenticationError) as info:
        with make(login="alice", passcode="wrong"):
            pass
    assert "Bad CONNECT" in str(info.value)


def test_no_connected_in_time_is_a_connect_timeout(backend):
    name, options = backend
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"stomp://127.0.0.1:{silent.getsockname()[1]}"
        for kwargs, connect_kwargs in (({}, {"timeout": 0.3}), ({"connect_timeout": 0.3}, {})):
            c = Client(url, heart_beat=(0, 0), backend=name, backend_options=options, **kwargs)
            started = time.monotonic()
            with pytest.raises(ConnectTimeout) as info:
                c.connect(**connect_kwargs)
            assert 0.25 < time.monotonic() - started < WAIT
            assert isinstance(info.value, TimeoutError) and isinstance(info.value, ConnectError)
            with pytest.raises(ClientClosedError):
                c.send("/queue/a", b"x")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"versions": ["3.0"]},
        {"heart_beat": (-1, 0)},
        {"port": 70000},
        {"backend": "curio"},
        {"backend": "trio", "portal": Portal()},
        {"backend_options": {"use_uvloop": True}, "portal": Portal()},
        {"portal": "not a portal"},
    ],
    ids=["versions", "heart_beat", "port", "backend", "backend+portal", "options+portal", "portal"],
)
def test_bad_options_are_configuration_errors_and_leave_no_thread(kwargs):
    (_, threads) = new_threads(
        lambda: pytest.raises(ConfigurationError, Client, "stomp://127.0.0.1", **kwargs)
    )
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()


def test_bad_timeouts_are_configuration_errors(client):
    for bad in (-1, "1", float("nan"), True):
        with pytest.raises(ConfigurationError):
            client.flush(timeout=bad)
    with client.subscribe("/queue/a") as sub:
        with pytest.raises(ConfigurationError):
            sub.receive_batch(0)
    with pytest.raises(ConfigurationError):
        client.subscribe("/queue/a", on_error=print)  # on_error without a callback


def test_the_loop_thread_cannot_call_the_sync_client(client):
    with pytest.raises(RuntimeError, match="own event loop thread"):
        client.portal.call(client.flush)


# -- sending and receipts -------------------------------------------------------------------


def test_send_and_receive_text_and_binary(client):
    with client.subscribe("/queue/a") as sub:
        client.send("/queue/a", "héllo")
        client.send("/queue/a", b"\x00\xff\x00", content_type="application/octet-stream")
        client.send("/queue/a", bytearray(b"ba"), headers={"k": "a:b\\c"})
        m1, m2, m3 = [sub.receive(timeout=WAIT) for _ in range(3)]
    assert isinstance(m1, SyncMessage) and isinstance(m1, Message)
    assert (m1.body, m1.text, m1.content_type) == ("héllo".encode(), "héllo", "text/plain;charset=utf-8")
    assert (m2.body, m2.content_type) == (b"\x00\xff\x00", "application/octet-stream")
    assert (m3.body, m3.headers["k"]) == (b"ba", "a:b\\c")
    assert m1.destination == "/queue/a" and m1.subscription == sub.id and m1.message_id
    assert not m1.redelivered


def test_a_blocking_subscriptions_messages_are_made_sync_by_the_session_and_an_async_ones_are_not(client):
    # The session builds each MESSAGE as the class its subscription asked for: the messages
    # buffered for a blocking subscription are SyncMessages before any thread takes them,
    # while a subscription of the same connection used from async code gets plain Messages.
    async def async_side() -> list:
        async with client.async_client.subscribe("/queue/plain") as sub:
            await client.async_client.send("/queue/plain", b"p", receipt=True)
            message = await sub.receive()
            return [type(message)]

    with client.subscribe("/queue/sync") as sub:
        client.send("/queue/sync", b"s", receipt=True)
        inlet = sub._async._inlet
        deadline = time.monotonic() + WAIT
        while not inlet.messages and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [type(m) for m in inlet.messages] == [SyncMessage]
        taken = sub.receive(timeout=WAIT)
        assert taken.owner.blocking is sub
    assert client.portal.call(async_side) == [Message]


def test_no_message_is_re_classed_anywhere_in_the_package():
    import ast
    from pathlib import Path

    import stompfast

    root = Path(stompfast.__file__).parent
    swaps = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr == "__class__":
                        swaps.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(target)}")
    # (otel's traced subscriptions re-class a subscription object, not a message: issue 35 is about events)
    assert [s for s in swaps if not s.startswith("otel/")] == []


def test_send_with_receipt_returns_a_confirmed_future(client, broker):
    r = client.send("/queue/a", b"x", receipt=True)
    assert isinstance(r, ReceiptFuture) and isinstance(r, concurrent.futures.Future)
    assert r.done() and r.error is None and r.exception(0) is None
    assert r.result(0) == r.receipt_id and r.wait() is r
    assert not r.cancel()
    assert broker.queue_depth("/queue/a") == 1
    assert client.send("/queue/a", b"y") is None


def test_a_confirmed_future_works_with_every_concurrent_futures_helper(client):
    # send(receipt=True) builds its future finished (no locking on the hot path): it
    # must behave exactly as one finished through set_result, alone and in company.
    confirmed = [client.send("/queue/a", b"%d" % i, receipt=True) for i in range(3)]
    pending = client.send("/queue/a", b"p", receipt=True, wait=False)
    reference: "concurrent.futures.Future[str]" = concurrent.futures.Future()
    reference.set_result("x")
    for r in confirmed:
        assert (r.done(), r.running(), r.cancelled()) == (reference.done(), reference.running(), reference.cancelled())
        assert r.result() == r.receipt_id and r.exception() is None and not r.cancel()
        assert repr(r).endswith("confirmed>")
        seen = []
        r.add_done_callback(seen.append)  # runs at once, as on any finished future
        assert seen == [r]
    done, not_done = concurrent.futures.wait(confirmed + [pending], timeout=WAIT)
    assert done == set(confirmed + [pending]) and not not_done
    assert set(concurrent.futures.as_completed(confirmed + [pending], timeout=WAIT)) == set(confirmed + [pending])
    first, _ = concurrent.futures.wait(confirmed, return_when=concurrent.futures.FIRST_COMPLETED)
    assert first == set(confirmed)
    # and from many threads at once (they share the condition of finished futures)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda r: r.result(0), confirmed * 50)) == [r.receipt_id for r in confirmed] * 50


def test_withheld_receipts_time_out_and_the_client_goes_on(client, broker):
    broker.withhold_receipts()
    pending = client.send("/queue/a", b"1", receipt=True, wait=False)
    broker.wait_for_blocking(lambda: broker.stats.receipts_withheld >= 1)
    started = time.monotonic()
    with pytest.raises(ReceiptTimeout) as info:
        pending.result(timeout=0.2)
    assert time.monotonic() - started >= 0.2
    assert info.value.receipt_id == pending.receipt_id and info.value.timeout == 0.2
    with pytest.raises(ReceiptTimeout):
        pending.wait(timeout=0.05)
    with pytest.raises(ReceiptTimeout):
        pending.exception(timeout=0.05)
    with pytest.raises(ReceiptTimeout):
        client.wait_receipts([pending, None], timeout=0.05)
    assert not pending.done() and pending.error is None and not pending.cancel()
    # waits that block in the loop are cancelled there at the deadline
    with pytest.raises(ReceiptTimeout):
        client.send("/queue/a", b"2", receipt=True, timeout=0.2)
    with pytest.raises(ReceiptTimeout):
        client.flush(timeout=0.2)
    with pytest.raises(ReceiptTimeout):
        with client.transaction(timeout=0.2) as tx:
            tx.send("/queue/b", b"in a transaction")
    broker.withhold_receipts(False)
    assert client.send("/queue/a", b"3", receipt=True, timeout=WAIT).done()
    assert client.is_connected and client.error is None
    assert broker.queue_depth("/queue/a") == 3
    assert not pending.done()  # a withheld receipt never comes


@pytest.mark.parametrize("ack", ["auto", "client-individual"])
def test_subscribe_to_a_deep_queue_whose_receipt_comes_late_does_not_stall(make, broker, ack):
    # The broker delivers before it confirms and the messages stop the reader with the
    # RECEIPT unread behind them: subscribe() returns on the first MESSAGE (before the
    # fix it waited for that RECEIPT until stall_timeout, FlowControlError, with nothing
    # draining the buffer). client-individual asks for a prefetch above buffer_size.
    deep = 2000
    queue = f"/queue/deep-{ack}"
    for i in range(deep):
        broker.publish(queue, b"%04d" % i + b"." * 996)
    broker.delay_receipts(3.0)
    client = make()
    client.connect()
    headers = None if ack == "auto" else {"prefetch-count": "500"}
    # timeout: well before the RECEIPT (3 s) and the stall (10 s)
    with client.subscribe(queue, ack=ack, headers=headers, buffer_size=10, timeout=2) as sub:
        assert broker.stats.frames_out.get("RECEIPT", 0) == 0
        got = []
        for _ in range(deep):
            message = sub.receive(timeout=WAIT)
            got.append(message.body[:4])
            if ack != "auto":
                message.ack()
        assert got == [b"%04d" % i for i in range(deep)]
        broker.delay_receipts(0)
        client.flush(timeout=WAIT)
        assert client.stats().receipts_failed == 0


def test_blocking_calls_wait_past_the_loop_check_interval(client, broker, monkeypatch):
    # subscribe(), flush() and a commit that take longer than one check interval of
    # the waiting thread go on waiting (timeout=None). Before Python 3.11 the
    # interval's own timeout is concurrent.futures.TimeoutError, not the builtin,
    # and each of these calls raised it after one interval (1 s in real use).
    import stompfast._sync_loop as sync_loop

    monkeypatch.setattr(sync_loop, "LOOP_CHECK_INTERVAL", 0.05)
    broker.delay_receipts(0.4)
    with client.subscribe("/queue/slow", ack="client-individual") as sub:
        client.send("/queue/slow", b"x", receipt=True, wait=False)
        client.flush()
        with client.transaction() as tx:
            tx.send("/queue/slow", b"y")
        assert [m.body for m in (sub.receive(timeout=WAIT), sub.receive(timeout=WAIT))] == [b"x", b"y"]
    broker.delay_receipts(0)


def test_pipelined_receipts_flush_and_wait_receipts(client, broker):
    broker.delay_receipts(0.5)
    receipts = [client.send("/queue/a", b"%d" % i, receipt=True, wait=False) for i in range(20)]
    client.send("/queue/a", b"plain")
    assert not any(r.done() for r in receipts)
    client.flush(timeout=WAIT)
    # flush settles every future it covered before it returns
    assert all(r.done() and r.error is None and r.result(0) == r.receipt_id for r in receipts)
    assert broker.queue_depth("/queue/a") == 21
    more = [client.send("/queue/b", b"x", receipt=True, wait=False) for _ in range(3)]
    client.wait_receipts(more + [None], timeout=WAIT)
    assert all(r.done() for r in more)
    last = client.send("/queue/b", b"y", receipt=True, wait=False)
    done, _ = concurrent.futures.wait([last], timeout=WAIT)
    assert done == {last}
    with pytest.raises(TypeError):
        client.wait_receipts(["r1"])


def test_a_refused_send_fails_its_future_with_server_error(client):
    with client.subscribe("/queue/ok") as sub:
        refused = client.send("/nowhere/x", b"x", receipt=True, wait=False)
        with pytest.raises(ServerError) as info:
            refused.result(timeout=WAIT)
        assert info.value.receipt_id == refused.receipt_id
        assert isinstance(refused.error, ServerError)
        assert isinstance(client.error, ServerError) and not client.is_connected
        with pytest.raises(ServerError):
            sub.receive(timeout=WAIT)
        with pytest.raises(ServerError):
            client.send("/queue/ok", b"after")
    client.close()


def test_connection_loss_fails_pending_receipts_and_receives(client, broker):
    with client.subscribe("/queue/a") as sub:
        broker.withhold_receipts()
        receipts = [client.send("/queue/a", b"x", receipt=True, wait=False) for _ in range(3)]
        wait_until(lambda: sub.pending == 3)  # delivered: a drop does not flush the broker's outbox
        broker.drop_connections()
        for r in receipts:
            with pytest.raises(ConnectionLostError):
                r.result(timeout=WAIT)
        # the three messages were delivered before the drop: handed out first, then the failure
        assert [m.body for m in sub.receive_batch(10, timeout=WAIT)] == [b"x"] * 3
        with pytest.raises(ConnectionLostError):
            sub.receive(timeout=WAIT)
        with pytest.raises(ConnectionLostError):
            for _ in sub:
                pass
    assert isinstance(client.error, ConnectionLostError) and not client.is_connected
    client.close()
    client.close()


def test_an_error_frame_reaches_receive_after_the_buffered_messages(client, broker):
    with client.subscribe("/queue/a") as sub:
        broker.publish("/queue/a", b"before")
        wait_until(lambda: sub.pending == 1)
        broker.send_error("boom", body="details")
        assert sub.receive(timeout=WAIT).body == b"before"
        with pytest.raises(ServerError) as info:
            sub.receive(timeout=WAIT)
        assert "boom" in str(info.value) and info.value.body == b"details"


# -- subscriptions ---------------------------------------------------------------------------


def test_subscribe_iterate_and_leave_unsubscribes(client, broker):
    with client.subscribe("/queue/a") as sub:
        assert isinstance(sub, Subscription) and broker.consumers("/queue/a") == 1
        assert (sub.destination, sub.ack_mode, sub.buffer_size, sub.closed) == (
            "/queue/a",
            "auto",
            1000,
            False,
        )
        for i in range(3):
            client.send("/queue/a", b"%d" % i)
        got = []
        for message in sub:
            got.append(message.body)
            if len(got) == 3:
                break
        assert got == [b"0", b"1", b"2"]
    assert sub.closed
    broker.wait_for_blocking(lambda: broker.consumers("/queue/a") == 0)
    with pytest.raises(ClientClosedError):
        sub.receive(timeout=WAIT)
    sub.close()  # idempotent


def test_subscribe_with_a_withheld_receipt_times_out_and_withdraws(client, broker):
    broker.withhold_receipts()
    with pytest.raises(ReceiptTimeout):
        client.subscribe("/queue/a", timeout=0.2)
    assert broker.stats.receipts_withheld == 1  # the broker did subscribe us...
    broker.wait_for_blocking(  # ...and the client withdrew
        lambda: "UNSUBSCRIBE" in [f.command for f in broker.received] and broker.consumers("/queue/a") == 0
    )


def test_auto_mode_needs_no_ack_and_refuses_one(client, broker):
    with client.subscribe("/queue/a") as sub:
        broker.publish("/queue/a", b"x")
        message = sub.receive(timeout=WAIT)
        with pytest.raises(LocalProtocolError):
            message.ack()
    assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


def test_client_mode_acks_are_cumulative(client, broker):
    with client.subscribe("/queue/a", ack="client") as sub:
        for i in range(3):
            broker.publish("/queue/a", b"%d" % i)
        messages = [sub.receive(timeout=WAIT) for _ in range(3)]
        messages[1].ack(receipt=True, timeout=WAIT)  # acks 0 and 1
        assert broker.unacked("/queue/a") == 1
        before = broker.stats.frames_in.get("ACK", 0)
        messages[0].ack()  # covered already: nothing is sent
        client.ack(messages[2], receipt=True, timeout=WAIT)
        assert broker.stats.frames_in.get("ACK", 0) == before + 1
        assert broker.unacked("/queue/a") == 0


def test_client_individual_ack_nack_and_redelivery(client, broker):
    with client.subscribe("/queue/a", ack="client-individual") as sub:
        broker.publish("/queue/a", b"keep")
        broker.publish("/queue/a", b"refuse")
        keep, refuse = sub.receive(timeout=WAIT), sub.receive(timeout=WAIT)
        keep.ack(receipt=True, timeout=WAIT)
        refuse.nack(receipt=True, timeout=WAIT)
        again = sub.receive(timeout=WAIT)  # requeued and redelivered
        assert (again.body, again.redelivered) == (b"refuse", True)
        client.nack(again, receipt=True, timeout=WAIT)
        last = sub.receive(timeout=WAIT)
        sub.ack_message(last, receipt=True, timeout=WAIT)
    assert broker.unacked("/queue/a") == 0 and broker.queue_depth("/queue/a") == 0


def test_receive_timeout_then_later_messages_all_arrive(client, broker):
    with client.subscribe("/queue/a") as sub:
        started = time.monotonic()
        with pytest.raises(ReceiveTimeout) as info:
            sub.receive(timeout=0.1)
        assert time.monotonic() - started >= 0.1
        assert info.value.destination == "/queue/a" and isinstance(info.value, StompTimeout)
        for i in range(3):
            broker.publish("/queue/a", b"%d" % i)
        assert [sub.receive(timeout=WAIT).body for _ in range(3)] == [b"0", b"1", b"2"]
        with pytest.raises(ReceiveTimeout):
            sub.receive(timeout=0)


def test_receives_racing_their_timeouts_lose_no_message(client, broker):
    n = 300
    with client.subscribe("/queue/a") as sub:
        with pytest.raises(ReceiveTimeout):
            sub.receive(timeout=0)  # at least one wait ends with a timeout
        got: List[bytes] = []

        def consume() -> None:
            while len(got) < n:
                try:
                    if len(got) % 2:
                        got.append(sub.receive(timeout=0.001).body)
                    else:
                        got.extend(m.body for m in sub.receive_many(7, timeout=0))
                except ReceiveTimeout:
                    pass

        def publish() -> None:
            for i in range(n):
                broker.publish("/queue/a", b"%d" % i)

        run_threads(consume, publish)
        assert got == [b"%d" % i for i in range(n)]
        with pytest.raises(ReceiveTimeout):
            sub.receive(timeout=0.1)  # and nothing twice


def test_receive_batch_returns_what_is_there_and_waits_only_for_the_first(client, broker):
    with client.subscribe("/queue/a") as sub:
        for i in range(50):
            broker.publish("/queue/a", b"%d" % i)
        wait_until(lambda: sub.pending == 50)
        batch = sub.receive_batch(40, timeout=0)
        assert [m.body for m in batch] == [b"%d" % i for i in range(40)]
        assert [m.body for m in sub.receive_many(40)] == [b"%d" % i for i in range(40, 50)]
        with pytest.raises(ReceiveTimeout):
            sub.receive_many(5, timeout=0.1)
        broker.publish("/queue/a", b"one")
        started = time.monotonic()
        assert [m.body for m in sub.receive_many(10, timeout=WAIT)] == [b"one"]
        assert time.monotonic() - started < WAIT / 2


def test_several_threads_send_while_one_iterates(client):
    senders, per_sender = 4, 200
    total = senders * per_sender
    with client.subscribe("/queue/a") as sub:
        got: List[str] = []

        def consume() -> None:
            for message in sub:
                got.append(message.text)
                if len(got) == total:
                    break

        def sender(k: int) -> Callable[[], None]:
            def send() -> None:
                for i in range(per_sender):
                    client.send("/queue/a", f"{k}-{i}")
                client.flush(timeout=WAIT)

            return send

        run_threads(consume, *[sender(k) for k in range(senders)])
    assert len(got) == total and len(set(got)) == total
    for k in range(senders):  # each sender's messages arrive in its order
        assert [int(t.split("-")[1]) for t in got if t.startswith(f"{k}-")] == list(range(per_sender))


def test_several_threads_receive_each_message_once(client, broker):
    n, consumers = 200, 3
    with client.subscribe("/queue/a") as sub:
        got: List[List[bytes]] = [[] for _ in range(consumers)]
        counted = threading.Semaphore(0)

        def consumer(k: int) -> Callable[[], None]:
            def consume() -> None:
                for message in sub:
                    got[k].append(message.body)
                    counted.release()

            return consume

        threads = [threading.Thread(target=consumer(k)) for k in range(consumers)]
        for t in threads:
            t.start()
        for i in range(n):
            broker.publish("/queue/a", b"%d" % i)
        for _ in range(n):
            assert counted.acquire(timeout=WAIT)
        sub.close()  # ends every iteration
        for t in threads:
            t.join(WAIT)
            assert not t.is_alive()
    every = [body for bodies in got for body in bodies]
    assert sorted(every) == sorted(b"%d" % i for i in range(n))


def test_iteration_ends_when_the_client_closes_from_another_thread(make, broker):
    c = make()
    c.connect()
    sub = c.subscribe("/queue/a")
    results: List[Any] = []
    first = threading.Event()

    def consume() -> None:
        for message in sub:
            results.append(message.body)
            first.set()
        results.append("end")

    consumer = threading.Thread(target=consume)
    consumer.start()
    broker.publish("/queue/a", b"one")
    assert first.wait(WAIT)
    c.close()
    consumer.join(WAIT)
    assert results == [b"one", "end"]


# -- transactions ------------------------------------------------------------------------------


def test_transaction_commits_on_exit(client, broker):
    with client.transaction() as tx:
        assert isinstance(tx, Transaction) and tx.id
        tx.send("/queue/a", b"1")
        tx.send("/queue/a", "2", headers={"k": "v"}, content_type="text/x")
        client.flush(timeout=WAIT)
        assert broker.queue_depth("/queue/a") == 0
    assert broker.queue_depth("/queue/a") == 2


def test_transaction_aborts_on_an_exception_and_explicitly(client, broker):
    with pytest.raises(KeyError):
        with client.transaction() as tx:
            tx.send("/queue/a", b"1")
            raise KeyError("boom")
    tx = client.transaction()
    tx.__enter__()
    tx.send("/queue/a", b"2")
    tx.abort()
    with pytest.raises(TransactionError):
        tx.send("/queue/a", b"3")
    client.flush(timeout=WAIT)
    assert broker.queue_depth("/queue/a") == 0
    assert len([f for f in broker.received if f.command == "ABORT"]) >= 2


def test_transactional_acks_and_explicit_commit(client, broker):
    with client.subscribe("/queue/a", ack="client-individual") as sub:
        broker.publish("/queue/a", b"x")
        broker.publish("/queue/a", b"y")
        x, y = sub.receive(timeout=WAIT), sub.receive(timeout=WAIT)
        tx = client.transaction()
        tx.__enter__()
        tx.ack(x)
        tx.nack(y)
        client.flush(timeout=WAIT)
        assert broker.unacked("/queue/a") == 2
        tx.commit(timeout=WAIT)
        again = sub.receive(timeout=WAIT)
        assert (again.body, again.redelivered) == (b"y", True)
        again.ack(receipt=True, timeout=WAIT)
    assert broker.unacked("/queue/a") == 0


# -- callback subscriptions -------------------------------------------------------------------


def test_callback_subscription_delivers_in_its_own_thread_and_close_stops_it(client, broker):
    got: List[bytes] = []
    threads = set()
    done = threading.Event()

    def handle(message: SyncMessage) -> None:
        threads.add(threading.current_thread())
        got.append(message.body)
        message.ack()
        if len(got) == 5:
            done.set()

    sub = client.subscribe("/queue/a", ack="client-individual", callback=handle)
    for i in range(5):
        client.send("/queue/a", b"%d" % i)
    assert done.wait(WAIT)
    assert got == [b"%d" % i for i in range(5)]
    (worker,) = threads
    assert worker is not threading.current_thread() and worker.name.startswith("stompfast-callback")
    assert worker.daemon
    client.flush(timeout=WAIT)  # the acks went out before the probe
    assert broker.unacked("/queue/a") == 0
    with pytest.raises(ConfigurationError):
        sub.receive(timeout=0)
    with pytest.raises(ConfigurationError):
        next(iter(sub))
    sub.close()
    assert not worker.is_alive()
    broker.wait_for_blocking(lambda: broker.consumers("/queue/a") == 0)
    client.send("/queue/a", b"after", receipt=True)
    assert broker.queue_depth("/queue/a") == 1 and len(got) == 5


@pytest.mark.stomp_broker(heart_beat=(100, 100), heartbeat_grace=0.05)
def test_a_slow_callback_stalls_neither_heart_beats_nor_the_reader(make, broker):
    c = make(heart_beat=(100, 100))
    c.connect()
    entered, release, second = threading.Event(), threading.Event(), threading.Event()
    got: List[bytes] = []

    def slow(message: SyncMessage) -> None:
        got.append(message.body)
        if message.body == b"first":
            entered.set()
            release.wait(WAIT * 2)
        else:
            second.set()

    with c.subscribe("/queue/a", callback=slow) as sub:
        c.send("/queue/a", b"first")
        assert entered.wait(WAIT)
        beats = broker.stats.heartbeats_in
        # ten beats take 0.5 s or more: past the broker's limit for a silent client (0.25 s)
        # and past the client's for a silent broker (0.3 s)
        broker.wait_for_blocking(lambda: broker.stats.heartbeats_in >= beats + 10)
        c.send("/queue/a", b"second", receipt=True, timeout=WAIT)  # the reader still reads
        wait_until(lambda: sub.pending == 1)
        assert c.is_connected and c.error is None
        release.set()
        assert second.wait(WAIT)
    assert got == [b"first", b"second"]
    assert c.is_connected


def test_callback_exceptions_go_to_on_error_and_delivery_goes_on(client):
    got: List[bytes] = []
    errors: List[Tuple[BaseException, Optional[SyncMessage]]] = []
    done = threading.Event()

    def handle(message: SyncMessage) -> None:
        if message.body == b"bad":
            raise ValueError("bad message")
        got.append(message.body)
        if message.body == b"last":
            done.set()

    with client.subscribe("/queue/a", callback=handle, on_error=lambda e, m: errors.append((e, m))) as sub:
        for body in (b"good", b"bad", b"last"):
            client.send("/queue/a", body)
        assert done.wait(WAIT)
        assert not sub.closed
    assert got == [b"good", b"last"]
    [(error, message)] = errors
    assert isinstance(error, ValueError) and message is not None and message.body == b"bad"


def test_callback_exceptions_without_on_error_are_logged(client, caplog):
    done = threading.Event()

    def handle(message: SyncMessage) -> None:
        if message.body == b"bad":
            raise ValueError("bad message")
        done.set()

    with caplog.at_level(logging.ERROR, logger="stompfast"):
        with client.subscribe("/queue/a", callback=handle):
            client.send("/queue/a", b"bad")
            client.send("/queue/a", b"good")
            assert done.wait(WAIT)
    [record] = [r for r in caplog.records if r.name == "stompfast"]
    assert "raised" in record.getMessage() and "delivery goes on" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError


def test_a_connection_failure_ends_a_callback_subscription_through_on_error(client, broker):
    failures: List[Tuple[BaseException, Optional[SyncMessage]]] = []
    ended = threading.Event()

    def on_error(error: BaseException, message: Optional[SyncMessage]) -> None:
        failures.append((error, message))
        ended.set()

    sub = client.subscribe("/queue/a", callback=lambda m: None, on_error=on_error)
    broker.drop_connections()
    assert ended.wait(WAIT)
    [(error, message)] = failures
    assert isinstance(error, ConnectionLostError) and message is None
    sub.close()
    assert sub.closed


def test_a_callback_may_close_its_subscription_and_its_client(client):
    closed = threading.Event()
    holder: Dict[str, Subscription] = {}

    def close_sub(message: SyncMessage) -> None:
        holder["sub"].close()
        closed.set()

    holder["sub"] = client.subscribe("/queue/a", callback=close_sub)
    client.send("/queue/a", b"x")
    assert closed.wait(WAIT)
    assert holder["sub"].closed

    done = threading.Event()

    def close_client(message: SyncMessage) -> None:
        client.close()
        done.set()

    client.subscribe("/queue/b", callback=close_client)
    client.send("/queue/b", b"x")
    assert done.wait(WAIT)
    assert not client.is_connected


# -- portals and lifetime ----------------------------------------------------------------------


def test_a_shared_portal_runs_two_clients_on_one_loop(broker, backend):
    name, options = backend
    with Portal(name, options) as portal:
        with (
            Client(broker.url, heart_beat=(0, 0), portal=portal) as a,
            Client(broker.url, heart_beat=(0, 0), portal=portal) as b,
        ):
            assert a.portal is b.portal is portal.portal
            assert a.portal.call(threading.get_ident) == portal.thread.ident
            with b.subscribe("/queue/a") as sub:
                a.send("/queue/a", b"from a", receipt=True, timeout=WAIT)
                assert sub.receive(timeout=WAIT).body == b"from a"
            a.close()
            assert portal.running and b.is_connected
            b.send("/queue/a", b"still", receipt=True, timeout=WAIT)
        with Client(broker.url, heart_beat=(0, 0), portal=portal) as c:  # the portal outlives its clients
            c.flush(timeout=WAIT)
    assert not portal.running and not portal.thread.is_alive()
    with pytest.raises(ClientClosedError):
        portal.start()


def test_an_anyio_blocking_portal_can_be_shared(broker, backend):
    name, options = backend
    with anyio.from_thread.start_blocking_portal(name, options) as portal:
        with Client(broker.url, heart_beat=(0, 0), portal=portal) as c:
            assert c.portal is portal
            c.send("/queue/a", b"x", receipt=True, timeout=WAIT)
        portal.call(anyio.sleep, 0)  # not stopped by the client


def test_closing_a_shared_portal_closes_its_clients(broker, backend):
    name, options = backend
    portal = Portal(name, options).start()
    c = Client(broker.url, heart_beat=(0, 0), portal=portal)
    c.connect()
    portal.close()  # closes its clients first, as their close() would
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert "DISCONNECT" in [f.command for f in broker.received]
    with pytest.raises(ClientClosedError):
        c.send("/queue/a", b"x")
    c.close()


def test_an_abandoned_client_is_disconnected_and_its_thread_ends(broker, backend):
    name, options = backend
    c, threads = new_threads(
        lambda: Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options)
    )
    c.connect()
    broker.wait_for_blocking(lambda: broker.connections == 1)
    del c
    gc.collect()
    broker.wait_for_blocking(lambda: broker.connections == 0)
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert "DISCONNECT" in [f.command for f in broker.received]


def test_the_interpreter_exits_with_a_client_left_open(broker, backend):
    name, options = backend
    code = f"""
import stompfast
c = stompfast.Client({broker.url!r}, heart_beat=(100, 100), backend={name!r}, backend_options={options!r})
c.connect()
c.subscribe("/queue/exit", callback=lambda m: None)
c.subscribe("/queue/other")
c.send("/queue/exit", b"x", receipt=True)
print("connected", flush=True)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT * 3)
    assert (out.returncode, out.stdout.strip()) == (0, "connected"), out.stderr


# -- the sync classes mirror the async ones ------------------------------------------------------

#: Async names whose sync twin has another name.
RENAMED = {
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
}

#: Parameters only the sync twin has (besides ``timeout``), per (sync class, method).
EXTRA_PARAMETERS = {
    ("Client", "__init__"): {"portal", "backend", "backend_options"},
    ("Client", "subscribe"): {"callback", "on_error"},
}

#: Public names only the sync twin has, per sync class.
EXTRA_NAMES = {
    "Client": {"portal", "async_client"},
    "Subscription": {"receive_many"},
    "Transaction": set(),
    "ReceiptFuture": {n for n in dir(concurrent.futures.Future) if not n.startswith("_")},
    "SyncMessage": set(),
}

#: Public names of an async class that are the blocking client's own way in, with no twin.
ASYNC_ONLY = {
    # how the sync Subscription takes and acks from threads; how the reply channel takes replies in the
    # reader; how consume's worker tasks wait (its threads wait in receive)
    "AsyncSubscription": {
        "handoff", "check_ack", "ack_nowait", "deliver_to", "wait_buffered", "wake", "deliver_as", "blocking",
    },
    # the blocking client's ways in (its send does not wait)
    "AsyncClient": {"send_nowait", "send_from_thread", "ack_from_thread", "check_send"},
}

TWINS = [
    (AsyncClient, Client),
    (AsyncSubscription, Subscription),
    (AsyncTransaction, Transaction),
    (Receipt, ReceiptFuture),
    (Message, SyncMessage),
]


def _async_instances() -> Dict[type, Any]:
    """One instance of each async class (made in a loop: they hold anyio primitives)."""

    async def build() -> Dict[type, Any]:
        client = AsyncClient("stomp://127.0.0.1:61613")
        return {
            AsyncClient: client,
            AsyncSubscription: client.subscribe("/queue/a"),
            AsyncTransaction: client.transaction(),
            Receipt: Receipt("r1"),
        }

    return anyio.run(build)


def _public_names(cls: type, instance: Any = None) -> set:
    names = {n for n in dir(cls) if not n.startswith("_")}
    names |= {n for n in RENAMED if n in vars(cls) or any(n in vars(base) for base in cls.__mro__)}
    if instance is not None and hasattr(instance, "__dict__"):
        names |= {n for n in vars(instance) if not n.startswith("_")}  # plain attributes set in __init__
    if cls is AsyncClient:
        names.add("__init__")
    return names


def _parameters(fn: Any) -> List[Tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"
    ]


@pytest.mark.parametrize("async_cls, sync_cls", TWINS, ids=[s.__name__ for _, s in TWINS])
def test_the_sync_twin_mirrors_every_public_name_and_parameter(async_cls, sync_cls):
    instance = _async_instances().get(async_cls)
    async_names = _public_names(async_cls, instance) - ASYNC_ONLY.get(async_cls.__name__, set())
    expected = {RENAMED.get(n, n) for n in async_names}
    sync_names = _public_names(sync_cls) - {"__init__"} | ({"__init__"} if sync_cls is Client else set())
    sync_names |= {n for n in RENAMED.values() if hasattr(sync_cls, n)}
    assert expected - sync_names == set(), f"{sync_cls.__name__} lacks these"
    extra = {n for n in sync_names - expected if not n.startswith("__")}
    assert extra <= EXTRA_NAMES[sync_cls.__name__], f"{sync_cls.__name__} has undeclared extras"

    for name in sorted(async_names):
        twin_name = RENAMED.get(name, name)
        async_attr = inspect.getattr_static(async_cls, name, None)
        sync_attr = inspect.getattr_static(sync_cls, twin_name)
        if async_attr is None or not callable(async_attr) or isinstance(async_attr, (property, type)):
            # a property, a slot or a plain attribute: the twin must read it as a property or attribute
            assert not callable(sync_attr) or isinstance(sync_attr, property), (sync_cls, twin_name)
            continue
        if sync_cls is SyncMessage and name in ("ack", "nack"):
            # Message.ack(**kwargs) forwards to the subscription: the contract is ack_message's
            async_fn = getattr(AsyncSubscription, f"{name}_message")
            async_params = _parameters(async_fn)[1:]  # without ``message``
        else:
            async_fn = getattr(async_cls, name)
            async_params = _parameters(async_fn)
        sync_fn = getattr(sync_cls, twin_name)
        assert callable(sync_fn)
        assert not inspect.iscoroutinefunction(sync_fn), (sync_cls, twin_name)
        allowed = EXTRA_PARAMETERS.get((sync_cls.__name__, twin_name), set()) | {"timeout"}
        sync_params = _parameters(sync_fn)
        for pname, kind, default in sync_params:
            if pname in allowed and pname not in {p[0] for p in async_params}:
                assert kind is inspect.Parameter.KEYWORD_ONLY and default is None, (twin_name, pname)
        mirrored = [p for p in sync_params if p[0] not in allowed or p[0] in {q[0] for q in async_params}]
        assert mirrored == async_params, (
            f"{sync_cls.__name__}.{twin_name} differs from {async_cls.__name__}.{name}"
        )


def test_the_parity_test_notices_a_missing_parameter():
    """The comparison above fails for a twin that lacks a parameter (it can fail)."""

    class Narrow:
        def send(self, destination, body=b"", *, timeout=None):
            pass

    assert _parameters(Narrow.send) != _parameters(AsyncClient.send)
    assert [p for p in _parameters(Client.send) if p[0] != "timeout"] == _parameters(AsyncClient.send)


def test_the_sync_client_reconnects_and_keeps_its_subscription(make, broker):
    events = []
    client = make(reconnect=ReconnectPolicy(initial_delay=0.01, jitter=0), on_event=events.append)
    client.connect(timeout=WAIT)
    with client.subscribe("/queue/again", ack="client-individual") as sub:
        broker.drop_connections()
        deadline = time.monotonic() + WAIT
        while client.reconnects < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.reconnects == 1 and client.is_connected
        client.send("/queue/again", b"after", receipt=True, timeout=WAIT)
        message = sub.receive(timeout=WAIT)
        assert message.body == b"after"
        message.ack(receipt=True, timeout=WAIT)
    assert "disconnected" in [e.kind for e in events]


def test_sends_without_receipt_keep_their_order_and_are_all_written(client, broker):
    for i in range(3000):
        client.send("/queue/order", b"%d" % i)
    client.send("/queue/order", b"last", receipt=True, timeout=WAIT)  # after every queued one
    bodies = [f.body for f in broker.received if f.command == "SEND"]
    assert bodies == [b"%d" % i for i in range(3000)] + [b"last"]


def test_a_failure_behind_queued_sends_is_raised_by_the_next_send(make, broker):
    client = make()
    client.connect(timeout=WAIT)
    client.send("/queue/a", b"x", receipt=True, timeout=WAIT)
    broker.drop_connections()
    deadline = time.monotonic() + WAIT
    with pytest.raises(ConnectionLostError):
        while time.monotonic() < deadline:  # queued sends succeed until the loss is known
            client.send("/queue/a", b"y")
            time.sleep(0.001)


def test_queued_acks_are_written_before_the_unsubscribe(client, broker):
    with client.subscribe("/queue/acks", ack="client-individual") as sub:
        for i in range(200):
            broker.publish("/queue/acks", b"%d" % i)
        got = 0
        while got < 200:
            for message in sub.receive_many(200, timeout=WAIT):
                message.ack()  # queued, not waited for
                got += 1
    client.flush(timeout=WAIT)  # nothing was refused: no error surfaces here
    assert broker.unacked("/queue/acks") == 0 and broker.queue_depth("/queue/acks") == 0
    acks = [f for f in broker.received if f.command == "ACK"]
    assert len(acks) == 200
    unsubscribe = [i for i, f in enumerate(broker.received) if f.command == "UNSUBSCRIBE"]
    last_ack = max(i for i, f in enumerate(broker.received) if f.command == "ACK")
    assert unsubscribe and last_ack < unsubscribe[0]


# -- the direct hand-over into an asyncio loop (SyncLoop.call) ------------------------------------------


def test_waiting_calls_on_asyncio_are_handed_to_the_loop_directly(client, broker, backend):
    # On asyncio a waiting call is one task made with run_coroutine_threadsafe, not a
    # task spawned through the portal's task group (which costs a round trip more).
    import asyncio

    if backend[0] != "asyncio":
        assert client._loop.aio_loop is None
        return
    assert isinstance(client._loop.aio_loop, asyncio.AbstractEventLoop)
    spawned = []
    real_spawn = client._loop.spawn
    client._loop.spawn = lambda *a: spawned.append(a) or real_spawn(*a)  # type: ignore[method-assign]
    future = client.send("/queue/direct", b"x", receipt=True, timeout=WAIT)
    assert future.done() and spawned == []
    assert broker.queue_depth("/queue/direct") == 1


def test_a_direct_wait_ends_when_the_loop_closed_before_running_the_call(monkeypatch):
    # The loop stopped between the check and the hand-over: the task never runs, and
    # the caller is told the client is closed instead of waiting forever.
    import asyncio

    import stompfast._sync_loop as sync_loop

    monkeypatch.setattr(sync_loop, "LOOP_CHECK_INTERVAL", 0.02)
    loop = asyncio.new_event_loop()
    loop.close()
    never: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
    started = time.monotonic()
    with pytest.raises(ClientClosedError):
        SyncLoop.wait_on_loop(never, loop)
    assert time.monotonic() - started < WAIT
    assert never.cancelled()


def test_a_direct_wait_raises_the_calls_own_timeout_as_it_is():
    # ReceiptTimeout is a TimeoutError, like the wait's own check interval: it must come
    # out as the call's outcome, not be mistaken for the interval.
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        done.set_exception(ReceiptTimeout("no RECEIPT within 1 s", timeout=1.0))
        with pytest.raises(ReceiptTimeout):
            SyncLoop.wait_on_loop(done, loop)
        ok: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        threading.Timer(0.05, ok.set_result, ("value",)).start()
        assert SyncLoop.wait_on_loop(ok, loop) == "value"
    finally:
        loop.close()


# -- the hand-off without crossings: many threads, interrupts, heart-beats ------------------------


def test_many_threads_iterate_and_many_send_with_receipts_at_once(make, broker):
    # Iteration takes straight from the buffer and a receipted send wakes its thread
    # from the reader: with several of each at once, every message is handed out
    # exactly once, every receipt is confirmed, and each consumer sees every sender's
    # messages in the order they were sent.
    senders, per_sender, consumers = 4, 150, 3
    total = senders * per_sender
    client = make()
    client.connect()
    with client.subscribe("/queue/m", ack="client-individual", buffer_size=50) as sub:
        got: List[List[str]] = [[] for _ in range(consumers)]
        counted = threading.Semaphore(0)
        confirmed: List[int] = []

        def consumer(k: int) -> Callable[[], None]:
            def consume() -> None:
                for message in sub:
                    got[k].append(message.text)
                    message.ack()
                    counted.release()

            return consume

        def sender(k: int) -> Callable[[], None]:
            def send() -> None:
                for i in range(per_sender):
                    future = client.send("/queue/m", f"{k}-{i}", receipt=True, timeout=WAIT)
                    assert future is not None and future.done() and future.error is None
                    confirmed.append(1)

            return send

        threads = [threading.Thread(target=consumer(k)) for k in range(consumers)]
        for t in threads:
            t.start()
        run_threads(*[sender(k) for k in range(senders)])
        for _ in range(total):
            assert counted.acquire(timeout=WAIT)
        client.flush(timeout=WAIT)
        assert broker.unacked("/queue/m") == 0 and broker.queue_depth("/queue/m") == 0
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    every = [text for texts in got for text in texts]
    assert len(confirmed) == total
    assert sorted(every) == sorted(f"{k}-{i}" for k in range(senders) for i in range(per_sender))
    for texts in got:
        for k in range(senders):
            mine = [int(t.split("-")[1]) for t in texts if t.startswith(f"{k}-")]
            assert mine == sorted(mine)


class _InterruptingDeque(deque):
    """A buffer whose ``popleft`` raises KeyboardInterrupt once, at the ``at``-th call (fault injection)."""

    def __init__(self, items: Any, at: int) -> None:
        super().__init__(items)
        self.calls = 0
        self.at = at

    def popleft(self) -> Any:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().popleft()


def test_an_interrupt_in_the_middle_of_a_batch_loses_nothing(client, broker):
    # receive_batch pops message after message in the calling thread; Ctrl-C
    # between two pops must put back what this batch had taken, in order.
    with client.subscribe("/queue/i") as sub:
        for i in range(10):
            broker.publish("/queue/i", b"%d" % i)
        wait_until(lambda: sub.pending == 10)
        handoff = sub._handoff
        real = handoff._buffer
        handoff._buffer = _InterruptingDeque(real, at=4)  # the 4th pop of the batch
        real.clear()
        with pytest.raises(KeyboardInterrupt):
            sub.receive_batch(10, timeout=WAIT)
        assert list(m.body for m in handoff._buffer) == [b"%d" % i for i in range(10)]
        batch = sub.receive_batch(10, timeout=WAIT)
        assert [m.body for m in batch] == [b"%d" % i for i in range(10)]


@pytest.mark.stomp_broker(heart_beat=(100, 100))
def test_a_consumer_thread_sleeping_between_messages_does_not_stop_heart_beats(make, broker):
    # The loop thread beats and reads on its own: a consumer that sleeps 2 s (twenty
    # of its 100 ms intervals) between two messages keeps its connection.
    c = make(heart_beat=(100, 100))
    c.connect()
    with c.subscribe("/queue/h") as sub:
        broker.publish("/queue/h", b"first")
        broker.publish("/queue/h", b"second")
        first = next(iter(sub))
        beats = broker.stats.heartbeats_in
        time.sleep(2.0)
        assert broker.stats.heartbeats_in >= beats + 10
        second = next(iter(sub))
        assert (first.body, second.body) == (b"first", b"second")
        c.send("/queue/h", b"third", receipt=True, timeout=WAIT)
        assert sub.receive(timeout=WAIT).body == b"third"
    assert c.is_connected and c.error is None and broker.connections == 1


@pytest.mark.stomp_broker(heart_beat=(100, 100))
def test_frames_a_thread_writes_itself_count_as_heart_beats(make, broker):
    # Receipted sends and client-individual acks are written by the calling thread
    # where it can (send_from_thread, ack_from_thread): the loop's heart-beat sender
    # must count them as sent, on every loop (trio's clock cannot be read from the
    # thread), so a busy connection sends no EOL heart-beats.
    c = make(heart_beat=(100, 100))
    c.connect()
    outbox = c._async._link.outbox
    assert outbox.beating
    beats = outbox.heartbeats
    until = time.monotonic() + 1.0  # ten intervals, forty checks of the heart-beat sender
    sent = 0
    while time.monotonic() < until:
        c.send("/queue/busy", b"%d" % sent, receipt=True, timeout=WAIT)
        sent += 1
    assert sent > 50
    by_thread = [f for f in broker.received if f.command == "SEND" and f.headers.get("receipt", "").startswith("t")]
    assert len(by_thread) > sent // 2
    assert outbox.heartbeats - beats <= 1
    time.sleep(0.5)  # idle: now it beats
    assert outbox.heartbeats - beats >= 3
    assert c.is_connected and c.error is None


def test_the_client_options_are_defined_once_and_documented():
    # ClientOptions (names, types) and DEFAULTS are the one definition: both
    # constructors take exactly those, show them in their signature, and the
    # AsyncClient docstring describes each one.
    from stompfast._options import DEFAULTS, ClientOptions

    assert list(DEFAULTS) == list(ClientOptions.__annotations__)
    for cls, extra in ((AsyncClient, set()), (Client, {"portal", "backend", "backend_options"})):
        params = inspect.signature(cls.__init__).parameters
        assert set(params) == {"self", "url"} | set(DEFAULTS) | extra
        assert {name: params[name].default for name in DEFAULTS} == DEFAULTS
        with pytest.raises(TypeError, match="unexpected keyword argument 'heartbeat'"):
            cls(heartbeat=(0, 0))
    doc = AsyncClient.__doc__ or ""
    undocumented = [name for name in DEFAULTS if name not in doc]
    assert undocumented == [], f"AsyncClient's docstring does not describe {undocumented}"


def test_a_queued_send_that_cannot_be_encoded_loses_nothing_after_it(client, broker, monkeypatch):
    # Queued sends are checked when queued (see test_security.py); one that still fails
    # in the drainer (a failover to a broker of another STOMP version) must not take
    # the sends queued after it down with it: they are written, and a later call (the
    # first one after the drainer met it) reports the one that was not, once.
    monkeypatch.setattr(ThreadOutbox, "_check_queued", lambda self, *a, **k: None)  # let it reach the drainer
    accepted, reported = [], []
    with client.subscribe("/queue/q") as sub:
        for body in (b"1", b"bad", b"2", b"3", b"4", b"5"):
            try:
                client.send("/queue/q", body, headers={"x": "a\x00b"} if body == b"bad" else None,
                            receipt=body == b"5")
            except LocalProtocolError as exc:
                assert "NUL" in str(exc)
                reported.append(body)
            else:
                if body != b"bad":
                    accepted.append(body)
        if not reported:  # the drainer met it after the last call: the next one says so
            with pytest.raises(LocalProtocolError, match="NUL"):
                client.send("/queue/q", b"6", receipt=True)
            reported.append(b"6")
        client.send("/queue/q", b"7", receipt=True)
        accepted.append(b"7")
        assert len(reported) == 1 and reported[0] != b"bad"
        assert [sub.receive(timeout=WAIT).body for _ in range(len(accepted))] == accepted


# -- message options ----------------------------------------------------------------------------


@pytest.mark.stomp_broker(server="ActiveMQ/5.17.2")
def test_message_options_of_queued_and_confirmed_sends_and_bad_ones_refused_in_the_calling_thread(make, broker):
    with make() as c:
        before = int(time.time() * 1000)
        c.send("/queue/a", b"queued", ttl=2, priority=3)
        c.send("/queue/a", b"confirmed", ttl=2, persistent=False, receipt=True, timeout=WAIT)
        c.send("/topic/t", b"pipelined", persistent=True, receipt=True, wait=False).result(WAIT)
        for bad in ({"ttl": -1}, {"priority": 10}, {"persistent": 1}, {"ttl": 1, "headers": {"expires": "0"}}):
            with pytest.raises(ConfigurationError):
                c.send("/queue/a", b"bad", **bad)
            with pytest.raises(ConfigurationError):
                c.send("/queue/a", b"bad", receipt=True, **bad)
        c.flush(timeout=WAIT)
        queued, confirmed, pipelined = [f for f in broker.received if f.command == "SEND"]
    for frame in (queued, confirmed):
        assert before + 2000 <= int(frame.headers["expires"]) <= time.time() * 1000 + 2000
    assert (queued.headers["priority"], queued.headers["persistent"]) == ("3", "true")
    assert (confirmed.headers["persistent"], pipelined.headers["persistent"]) == ("false", "true")


@pytest.mark.stomp_broker(server="RabbitMQ/3.10.8")
def test_a_selector_is_refused_on_rabbitmq(make, broker):
    with make() as c:
        with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
            c.subscribe("/queue/a", selector="a = 1")
        assert not [f for f in broker.received if f.command == "SUBSCRIBE"]
