"""The outbox on its own: a scripted transport, no client, no socket (asyncio, uvloop and trio).

:class:`stompfast._outbox.Outbox` is one connection's queue of outgoing frames, its
writer task and heart-beat sender. Here it is built on :class:`ScriptedTransport`, which
records every write and lets the test decide whether the transport takes a write from the
calling task (asyncio's ``try_write``), whether a write blocks (a full socket) or fails (a
lost connection).
"""

from __future__ import annotations

from typing import List, Optional

import anyio
import pytest

from stompfast._outbox import Outbox
from stompfast.errors import ConnectionLostError

pytestmark = pytest.mark.anyio

WAIT = 5


class ScriptedTransport:
    """What the outbox writes to: records writes; the test scripts the rest."""

    def __init__(self, *, takes_writes: bool = False) -> None:
        self.writes: List[bytes] = []
        self.takes_writes = takes_writes  # try_write succeeds (asyncio) or never does (trio)
        self.gate: Optional[anyio.Event] = None  # while set to an unset event, send blocks (a full socket)
        self.sending = anyio.Event()  # set once a send is blocked on the gate
        self.fails: Optional[BaseException] = None  # send raises this (a lost connection)
        self.closed = False
        self.peer = "scripted"

    def try_write(self, data: bytes) -> bool:
        if self.takes_writes and self.gate is None:
            self.writes.append(bytes(data))
            return True
        return False

    async def send(self, data: bytes) -> None:
        if self.fails is not None:
            raise self.fails
        if self.gate is not None:
            self.sending.set()
            await self.gate.wait()
        self.writes.append(bytes(data))

    async def receive(self, max_bytes: int = 0) -> bytes:
        raise AssertionError("the outbox never reads")

    async def aclose(self) -> None:
        self.closed = True


def make(transport: ScriptedTransport, *, send_buffer_bytes: float = 1 << 20,
         write_through_bytes: Optional[float] = None, lost: Optional[list] = None) -> Outbox:
    return Outbox(
        transport,  # type: ignore[arg-type]
        send_buffer_bytes=send_buffer_bytes,
        write_through_bytes=send_buffer_bytes if write_through_bytes is None else write_through_bytes,
        clock=anyio.current_time,
        on_lost=(lost.append if lost is not None else (lambda error: None)),
    )


async def settle() -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


def test_an_outbox_never_connected_is_closed_and_empty():
    outbox = Outbox(None, send_buffer_bytes=100, write_through_bytes=1000)
    assert outbox.closed and outbox.out == [] and outbox.out_bytes == 0
    assert outbox.write_through_bytes == 100  # never above the buffer
    outbox.write_queued_now()  # nothing to write, nowhere to write it: no error
    assert not outbox.try_write_frame(b"SEND\n\n\x00")


async def test_frames_are_queued_in_order_with_one_wakeup_and_dropped_when_the_link_is_lost():
    outbox = make(ScriptedTransport())
    outbox.queue(b"SEND 1\n\n\x00")
    assert outbox.wakeup.is_set()  # empty -> not empty: the writer is woken
    outbox.queue(b"\n")  # a heart-beat
    outbox.queue(b"SEND 2\n\n\x00")
    assert outbox.out == [b"SEND 1\n\n\x00", b"\n", b"SEND 2\n\n\x00"]
    assert outbox.out_bytes == sum(map(len, outbox.out))
    assert outbox.drop() == 2  # heart-beats are not frames
    assert outbox.out == [] and outbox.out_bytes == 0
    assert (outbox.entries_dropped, outbox.frames_dropped) == (3, 2)


async def test_the_writer_writes_a_burst_in_one_write_and_counts_it():
    transport = ScriptedTransport()
    outbox = make(transport)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.writer)
        for i in range(100):
            outbox.queue(b"SEND %d\n\n\x00" % i)
        await settle()
        assert transport.writes == [b"".join(b"SEND %d\n\n\x00" % i for i in range(100))]
        assert outbox.out == [] and outbox.out_bytes == 0
        assert outbox.entries_written == 100 and outbox.bytes_out == len(transport.writes[0])
        outbox.queue(b"SEND last\n\n\x00")  # the next burst: the writer waits for it and writes it
        await settle()
        assert transport.writes[-1] == b"SEND last\n\n\x00"
        outbox.close()  # the writer returns
    assert outbox.closed


async def test_write_queued_now_writes_from_the_calling_task_only_where_the_transport_takes_it():
    for takes in (True, False):
        transport = ScriptedTransport(takes_writes=takes)
        outbox = make(transport)
        outbox.queue(b"A")
        outbox.queue(b"B")
        outbox.write_queued_now()
        if takes:  # asyncio: written at once, in one write, counted as written
            assert transport.writes == [b"AB"] and outbox.out == [] and outbox.entries_written == 2
        else:  # trio: left for the writer task
            assert transport.writes == [] and outbox.out == [b"A", b"B"] and outbox.entries_written == 0


async def test_try_write_frame_writes_one_frame_unless_the_transport_refuses_or_the_outbox_is_closed():
    transport = ScriptedTransport(takes_writes=True)
    outbox = make(transport)
    assert outbox.try_write_frame(b"SEND\n\n\x00")
    assert transport.writes == [b"SEND\n\n\x00"] and outbox.entries_written == 1 and outbox.bytes_out == 7
    outbox.close()
    assert not outbox.try_write_frame(b"SEND\n\n\x00") and len(transport.writes) == 1
    assert not make(ScriptedTransport(takes_writes=False)).try_write_frame(b"SEND\n\n\x00")


async def test_a_sender_waits_for_room_until_the_writer_takes_the_queue():
    transport = ScriptedTransport()
    outbox = make(transport, send_buffer_bytes=10)
    outbox.queue(b"x" * 10)  # full
    waited = []

    async def sender() -> None:
        await outbox.wait_for_room()
        waited.append(outbox.out_bytes)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await settle()
        assert waited == []  # no room yet: the writer has not run
        tg.start_soon(outbox.writer)
        with anyio.fail_after(WAIT):
            while not waited:
                await anyio.sleep(0.001)
        assert waited == [0] and transport.writes == [b"x" * 10]
        outbox.close()


async def test_closing_wakes_a_sender_waiting_for_room_and_the_writer():
    transport = ScriptedTransport()
    outbox = make(transport, send_buffer_bytes=10)
    outbox.queue(b"x" * 10)
    outbox.writing = True  # (as if the writer were stuck in a write: nothing frees room)
    done = []

    async def sender() -> None:
        await outbox.wait_for_room()
        done.append("sender")

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await settle()
        assert done == []
        outbox.close()
        await settle()
        assert done == ["sender"]  # woken: it finds the outbox closed (its caller raises)
    outbox.writing = False
    outbox.drop()
    with anyio.fail_after(WAIT):
        await outbox.writer()  # closed and empty: returns at once


async def test_catch_up_writes_through_from_the_sender_or_waits_for_a_busy_writer():
    # asyncio: past the mark the sender writes the queue itself, no task switch
    transport = ScriptedTransport(takes_writes=True)
    outbox = make(transport, send_buffer_bytes=1000, write_through_bytes=10)
    outbox.queue(b"y" * 12)
    await outbox.catch_up()
    assert transport.writes == [b"y" * 12] and outbox.out == []

    # the writer is blocked in a write (a full socket): the sender waits until it takes the queue
    transport = ScriptedTransport(takes_writes=True)
    transport.gate = anyio.Event()
    outbox = make(transport, send_buffer_bytes=1000, write_through_bytes=10)
    caught_up = []

    async def sender() -> None:
        outbox.queue(b"b" * 12)
        await outbox.catch_up()
        caught_up.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.writer)
        outbox.queue(b"a" * 12)
        with anyio.fail_after(WAIT):
            await transport.sending.wait()  # the writer took "a..." and is stuck writing it
        assert outbox.writing
        tg.start_soon(sender)
        await settle()
        assert caught_up == [] and outbox.out == [b"b" * 12]
        transport.gate.set()
        transport.gate = None
        with anyio.fail_after(WAIT):
            while not caught_up:
                await anyio.sleep(0.001)
        await settle()
        assert transport.writes == [b"a" * 12, b"b" * 12]
        outbox.close()


async def test_catch_up_yields_to_the_writer_where_the_transport_takes_no_write_from_the_sender():
    transport = ScriptedTransport(takes_writes=False)  # trio
    outbox = make(transport, send_buffer_bytes=1000, write_through_bytes=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.writer)
        await settle()
        outbox.queue(b"z" * 12)
        await outbox.catch_up()  # one checkpoint: the writer's turn
        await settle()
        assert transport.writes == [b"z" * 12]
        outbox.close()


async def test_a_write_that_finds_the_connection_lost_is_reported_once_unless_closed():
    lost: list = []
    transport = ScriptedTransport()
    transport.fails = ConnectionLostError("gone")
    outbox = make(transport, lost=lost)
    outbox.queue(b"SEND\n\n\x00")
    with anyio.fail_after(WAIT):
        await outbox.writer()
    assert len(lost) == 1 and isinstance(lost[0], ConnectionLostError)

    lost.clear()
    outbox = make(transport, lost=lost)
    outbox.queue(b"SEND\n\n\x00")
    outbox.closed = True  # closed while the write was under way (as by the client's teardown)
    with anyio.fail_after(WAIT):
        await outbox.writer()
    assert lost == []


async def test_write_queued_writes_from_the_calling_task_unless_the_writer_is_writing():
    transport = ScriptedTransport()
    outbox = make(transport)
    outbox.queue(b"DISCONNECT\n\n\x00")
    await outbox.write_queued()
    assert transport.writes == [b"DISCONNECT\n\n\x00"] and outbox.out == []
    outbox.queue(b"more")
    outbox.writing = True
    await outbox.write_queued()
    assert outbox.out == [b"more"] and len(transport.writes) == 1


async def test_the_heartbeat_sender_queues_an_eol_after_half_an_interval_of_silence_only():
    transport = ScriptedTransport()
    outbox = make(transport)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.writer)
        tg.start_soon(outbox.heartbeat_sender, 0.2)
        with anyio.fail_after(WAIT):
            while b"\n" not in transport.writes:
                await anyio.sleep(0.01)
        assert outbox.beating and outbox.heartbeats >= 1
        # busy writing: no beats needed
        beats = outbox.heartbeats
        deadline = anyio.current_time() + 0.3
        while anyio.current_time() < deadline:
            outbox.queue(b"SEND\n\n\x00")
            await anyio.sleep(0.02)
        assert outbox.heartbeats == beats
        tg.cancel_scope.cancel()
