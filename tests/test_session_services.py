"""The client's session services alone: Subscriptions and Transactions on a scripted link, no client.

Each is given a :class:`~stompfast._gate.ClientGate` of stand-ins (the current link, the
client's state, its waits) and a :class:`~stompfast._link.Link` on the scripted transport
of ``tests/test_link.py``, so what they write is exactly the bytes the broker would read.
"""

from __future__ import annotations

import threading
from typing import Dict, List

import anyio
import pytest
from test_link import SETTINGS, WAIT, ScriptedTransport, connected

from stompfast._config import Endpoint
from stompfast._gate import ClientGate
from stompfast._link import Link
from stompfast._protocol import Message
from stompfast._stats import Counters
from stompfast._subscribing import Subscriptions
from stompfast._subscription import Inlet, LiveSession
from stompfast._transaction import Transactions
from stompfast.errors import ClientClosedError, ConnectionLostError, StaleMessageError, TransactionError

pytestmark = pytest.mark.anyio


class Door:
    """The client's side of the gate: its state as the test sets it, and the link it holds."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.open = True
        self.reconnecting = False
        self.failed = False

    async def ensure_open(self) -> None:
        self.check_open()

    def check_open(self) -> None:
        if not self.open:
            raise ClientClosedError("the client is closed")

    async def queue(self, data: bytes) -> None:
        self.link.queue(data)

    def gate(self) -> ClientGate:
        return ClientGate(
            lambda: self.link, lambda: self.open, lambda: self.reconnecting, lambda: self.failed, self.ensure_open,
            self.check_open, self.queue,
        )


def scripted(by_id: Dict[str, Inlet]) -> tuple:
    transport, failures = ScriptedTransport(), []
    link = Link(
        Endpoint("broker", 61613), connected(), transport, settings=SETTINGS, subs=by_id, counters=Counters(),
        lock=threading.Lock(), clock=anyio.current_time, on_failure=failures.append,
    )
    return transport, link, failures


def services() -> tuple:
    counts, live = Counters(), LiveSession()
    door = Door(None)  # type: ignore[arg-type]
    subs = Subscriptions(door.gate(), counts, live, lambda message: False, lambda: 1.0)
    transport, link, failures = scripted(subs.by_id)
    door.link = link
    live.protocol = link.protocol
    return subs, door, transport, link, counts, failures


def frames_of(transport: ScriptedTransport) -> List[bytes]:
    """The frames written so far, each without its NUL (one socket write may hold several)."""
    return [f.lstrip(b"\r\n") for f in b"".join(transport.writes).split(b"\x00") if f.strip(b"\r\n")]


async def written(transport: ScriptedTransport, count: int) -> List[bytes]:
    """The frames written, once there are at least ``count``."""
    with anyio.fail_after(WAIT):
        while len(frames_of(transport)) < count:
            await anyio.sleep(0.002)
    return frames_of(transport)


async def test_a_subscribe_is_written_confirmed_by_its_receipt_and_kept_by_id():
    subs, door, transport, link, counts, failures = services()
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        sub = subs.new("/queue/a", "client-individual", None, 10, True, None, None, None)
        inlet = sub._inlet
        tg.start_soon(subs.subscribe, inlet)
        (frame,) = await written(transport, 1)
        assert frame.startswith(b"SUBSCRIBE\n") and b"destination:/queue/a" in frame and b"receipt:" in frame
        # the SUBSCRIBE is out and not yet confirmed: its first MESSAGE would confirm it too
        assert inlet.confirming is not None and subs.by_id == {inlet.id: inlet}
        receipt_id = frame.split(b"receipt:")[1].split(b"\n")[0]
        await transport.send_chunk.send(b"RECEIPT\nreceipt-id:%s\n\n\x00" % receipt_id)
        with anyio.fail_after(WAIT):
            while inlet.confirming is not None:
                await anyio.sleep(0.002)
        link.close(ConnectionLostError("test over"))
    assert counts.control == 1 and failures == []


async def test_a_subscribe_interrupted_before_its_receipt_is_withdrawn_with_an_unsubscribe():
    subs, door, transport, link, counts, failures = services()
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        inlet = subs.new("/queue/a", "auto", None, 10, True, "s1", None, None)._inlet
        with anyio.move_on_after(0.05):
            await subs.subscribe(inlet)
        frames = await written(transport, 2)
        link.close(ConnectionLostError("test over"))
    assert frames[0].startswith(b"SUBSCRIBE\n") and frames[1].startswith(b"UNSUBSCRIBE\nid:s1")
    assert subs.by_id == {} and inlet.confirming is None


async def test_an_ack_of_a_message_from_another_session_is_stale_and_writes_nothing():
    subs, door, transport, link, counts, failures = services()
    other = connected()
    message = Message(None, "s1", "m1", "a1", other)  # type: ignore[arg-type]
    with pytest.raises(StaleMessageError):
        await subs.ack("ACK", message, None, False)
    # the same once the client has failed for good: the failure is what it raises then
    door.failed, door.open = True, False
    with pytest.raises(ClientClosedError):
        await subs.ack("ACK", Message(None, "s1", "m1", "a1", link.protocol), None, False)  # type: ignore[arg-type]
    assert frames_of(transport) == [] and counts.acks == 0


async def test_resubscribe_writes_every_subscribe_but_an_implicit_one_and_times_out_clearing_the_marks():
    subs, door, transport, link, counts, failures = services()
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        for name, implicit in (("/queue/a", False), ("/queue/b", False), ("/temp-queue/r", True)):
            inlet = subs.for_replies(name, implicit, 10)._inlet if implicit else subs.new(
                name, "auto", None, 10, False, None, None, None)._inlet
            await subs.subscribe(inlet)
        # the broker's new connection: a fresh session of its own
        new_transport, new_link, _ = scripted(subs.by_id)
        new_link.start(tg, [])
        with pytest.raises(TimeoutError):
            await subs.resubscribe(new_link, 0.05)
        frames = await written(new_transport, 2)
        link.close(ConnectionLostError("test over"))
        new_link.close(ConnectionLostError("test over"))
    assert [f.split(b"destination:")[1].split(b"\n")[0] for f in frames] == [b"/queue/a", b"/queue/b"]
    assert all(inlet.confirming is None for inlet in subs.by_id.values())


async def test_end_drops_client_ack_buffers_on_a_loss_and_forgets_everything_on_a_close():
    subs, door, transport, link, counts, failures = services()
    client_ack = subs.new("/queue/a", "client", None, 10, False, "a", None, None)._inlet
    auto = subs.new("/queue/b", "auto", None, 10, False, "b", None, None)._inlet
    for inlet in (client_ack, auto):
        subs.by_id[inlet.id] = inlet  # as subscribe() leaves them
        for i in range(3):
            inlet.deliver(Message(None, inlet.id, f"m{i}", f"m{i}", link.protocol))  # type: ignore[arg-type]
    assert subs.end("drop-unacked", None) == 3
    assert len(client_ack.messages) == 0 and len(auto.messages) == 3
    assert subs.end("keep", None) == 0 and len(subs.by_id) == 2
    error = ConnectionLostError("gone")
    subs.end("close", error)
    assert client_ack.closed and client_ack.error is error and len(subs.by_id) == 2
    subs.end("close-and-forget", None)
    assert subs.by_id == {} and counts.received_gone == 6


async def test_transactions_write_begin_and_commit_and_are_told_when_the_session_ends():
    counts = Counters()
    transport, link, failures = scripted({})
    door = Door(link)
    transactions = Transactions(door.gate(), counts)
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        committed = transactions.new(receipt=False)
        async with committed:
            await committed.send("/queue/a", b"x")
        frames = await written(transport, 3)
        assert [f.split(b"\n")[0] for f in frames] == [b"BEGIN", b"SEND", b"COMMIT"]
        assert b"transaction:%s" % committed.id.encode() in frames[1]
        lost = transactions.new(receipt=False)
        await lost.__aenter__()
        await written(transport, 4)
        assert transactions.lose(ConnectionLostError("gone")) == 1
        with pytest.raises(TransactionError):
            await lost.send("/queue/a", b"y")
        # the broker aborted it with the session: no ABORT is written
        await lost.abort()
        link.close(ConnectionLostError("test over"))
    assert [f.split(b"\n")[0] for f in frames_of(transport)] == [b"BEGIN", b"SEND", b"COMMIT", b"BEGIN"]
    assert counts.control == 3


def test_each_service_reads_the_client_only_through_its_gate():
    # Neither module imports the client (nor the blocking one): what they know of it is the gate.
    import ast
    from pathlib import Path

    import stompfast

    root = Path(stompfast.__file__).parent
    for name in ("_subscribing.py", "_transaction.py", "_gate.py"):
        imported = set()
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        assert not {m for m in imported if m.lstrip(".").startswith(("_client", "_sync"))}, (name, imported)
