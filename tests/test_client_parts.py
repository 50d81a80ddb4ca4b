"""The parts AsyncClient is put together from (docs/architecture.md, "The client, in parts").

Each part is a mixin in a module of its own; the declarations of what a part uses from the
others live under ``if TYPE_CHECKING:`` so that at runtime the one real definition of every
method is the one the client gets. These tests keep it that way, and run a part on its own
where that makes sense.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from stompfast._client import AsyncClient as ClientClass
from stompfast._inbox import Inbox
from stompfast._link import Link
from stompfast._outbox import Outbox
from stompfast._protocol import StompProtocol
from stompfast._session import Session
from stompfast._stats import Counters
from stompfast._supervisor import Supervisor

PARTS = (Link, Supervisor, Inbox, Session, Counters)


def test_every_method_of_a_part_is_the_one_the_client_gets():
    seen = {}
    for part in PARTS:
        for name, value in vars(part).items():
            if not callable(value) or name.startswith("__"):
                continue
            assert name not in seen, f"{name} is defined by both {seen[name].__name__} and {part.__name__}"
            seen[name] = part
            if name in vars(ClientClass):
                continue  # the client's own definition wins, by design (e.g. _fail)
            assert getattr(ClientClass, name) is value, f"{part.__name__}.{name} is shadowed"


def test_the_parts_declare_but_do_not_define_what_they_take_from_each_other():
    # a stub (raise NotImplementedError) defined at runtime would shadow the real method
    for part in PARTS:
        for name, value in vars(part).items():
            code = getattr(value, "__code__", None)
            if code is not None:
                assert "NotImplementedError" not in code.co_names, f"{part.__name__}.{name} is a stub at runtime"


@pytest.mark.anyio
async def test_the_inbox_alone_dispatches_one_read_to_its_inlet_and_receipts():
    # the inbox fed events straight from a protocol, no socket and no client: messages land in
    # their inlet in order with their sequence numbers, the receipt resolves
    from stompfast._receipt import PendingReceipt
    from stompfast._subscription import Inlet

    class Box(Inbox):
        def __init__(self) -> None:
            self._subs, self._receipts = {}, {}
            self._error = None
            self._clock = anyio.current_time
            self._init_counters()

        def _fail(self, error: BaseException) -> None:
            raise AssertionError(error)

    protocol = StompProtocol(host="/", heart_beat=(0, 0))
    protocol.connect()
    protocol.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    box = Box()
    owner = object()
    inlet = box._subs["0"] = Inlet(owner, "/queue/a", "auto", None, 10, False, "0")
    receipt = box._receipts["r1"] = PendingReceipt("r1")
    data = b"".join(
        b"MESSAGE\nsubscription:0\nmessage-id:%d\ndestination:/queue/a\n\nm%d\x00" % (i, i) for i in range(3)
    ) + b"RECEIPT\nreceipt-id:r1\n\n\x00"
    assert box._dispatch_now(protocol.receive_data(data)) is None  # nothing full
    assert [m.body for m in inlet.messages] == [b"m0", b"m1", b"m2"]
    assert [m.seq for m in inlet.messages] == [1, 2, 3] and all(m.owner is owner for m in inlet.messages)
    assert receipt.done() and receipt.error is None and not box._receipts
    assert box._n_frames_in == 4 and box._n_receipts_ok == 1 and box._rtt.count == 1


def test_the_counters_alone_derive_messages_sent_and_frames_out():
    # the snapshot's derivation (docs: messages_sent is entries given to the outbox minus the
    # non-SEND ones), with no client: 5 SENDs, 2 ACKs and a SUBSCRIBE written, a heart-beat
    # written, one SEND and a heart-beat dropped with a lost link, one SEND and a heart-beat
    # still queued, one SEND written by a thread, the CONNECT
    class Box(Counters):
        def __init__(self) -> None:
            self._init_counters()
            self._outbox = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
            self._registry_lock = threading.Lock()
            self._receipts, self._subs, self.reconnects = {}, {}, 0

    box = Box()
    box._outbox.queue(b"SEND x")
    box._outbox.queue(b"\n")
    # what earlier connections' outboxes counted is in the client's totals, the current one's on itself
    earlier = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
    earlier.entries_written, earlier.heartbeats = 5, 2
    earlier.entries_dropped, earlier.frames_dropped = 2, 1
    box._count_outbox(earlier)
    box._outbox.entries_written, box._outbox.heartbeats = 2 + 1 + 1, 1
    box._n_acks, box._n_control = 2, 1
    box._n_thread_sends, box._n_connects = 1, 1
    stats = box.stats()
    assert stats.messages_sent == 5 + 1 + 1 + 1  # written, dropped, queued, from a thread
    assert stats.frames_out == (5 + 2 + 1) + 1 + 1  # written frames (the heart-beat not), the thread's, CONNECT
    assert stats.frames_dropped == 1 and stats.acks == 2 and stats.bytes_queued == 7
