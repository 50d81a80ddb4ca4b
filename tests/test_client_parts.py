"""The parts AsyncClient is put together from (docs/architecture.md, "The client, in parts").

The parts still mixed into the client live in modules of their own; the declarations of what
a part uses from the others live under ``if TYPE_CHECKING:`` so that at runtime the one real
definition of every method is the one the client gets. These tests keep it that way. The
outbox and the inbox are objects of their own now, tested alone in tests/test_outbox.py and
tests/test_inbox.py.
"""

from __future__ import annotations

import threading

from stompfast._client import AsyncClient as ClientClass
from stompfast._inbox import Inbox
from stompfast._link import Link
from stompfast._outbox import Outbox
from stompfast._protocol import StompProtocol
from stompfast._receipt import ReceiptRegistry
from stompfast._session import Session
from stompfast._stats import Counters
from stompfast._supervisor import Supervisor
from stompfast.errors import ConnectionLostError, FlowControlError

PARTS = (Link, Supervisor, Session, Counters)


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


def test_the_counters_alone_derive_messages_sent_and_frames_out():
    # the snapshot's derivation (docs: messages_sent is entries given to the outbox minus the
    # non-SEND ones), with no client: 5 SENDs, 2 ACKs and a SUBSCRIBE written, a heart-beat
    # written, one SEND and a heart-beat dropped with a lost link, one SEND and a heart-beat
    # still queued, one SEND written by a thread, the CONNECT
    class Box(Counters):
        def __init__(self) -> None:
            self._init_counters()
            self._outbox = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
            self._inbox = Inbox(None, StompProtocol(host="/"), subs={}, receipts={}, rtt=self._rtt)
            self._registry_lock = threading.Lock()
            self._receipts, self._subs, self.reconnects = ReceiptRegistry(self._registry_lock), {}, 0

    box = Box()
    box._outbox.queue(b"SEND x")
    box._outbox.queue(b"\n")
    # what earlier connections' outboxes counted is in the client's totals, the current one's on itself
    earlier = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
    earlier.entries_written, earlier.heartbeats = 5, 2
    earlier.entries_dropped, earlier.frames_dropped = 2, 1
    box._count_parts(earlier, Inbox(None, StompProtocol(host="/"), subs={}, receipts={}, rtt=box._rtt))
    box._outbox.entries_written, box._outbox.heartbeats = 2 + 1 + 1, 1
    box._n_acks, box._n_control = 2, 1
    box._n_thread_sends, box._n_connects = 1, 1
    stats = box.stats()
    assert stats.messages_sent == 5 + 1 + 1 + 1  # written, dropped, queued, from a thread
    assert stats.frames_out == (5 + 2 + 1) + 1 + 1  # written frames (the heart-beat not), the thread's, CONNECT
    assert stats.frames_dropped == 1 and stats.acks == 2 and stats.bytes_queued == 7


def test_the_receipt_registry_alone_keeps_refuses_and_fails_a_connections_receipts():
    registry = ReceiptRegistry(threading.Lock())
    kept = registry.register("r1")
    refused = registry.register("r2", FlowControlError("stalled"))
    # a refused receipt fails at once and is not kept: no RECEIPT can resolve it later
    assert not kept.done() and refused.done() and isinstance(refused.error, FlowControlError)
    assert list(registry.pending) == ["r1"] and len(registry) == 1
    # the one teardown of the registry reports how many were lost, and leaves it empty
    lost = ConnectionLostError("gone")
    assert registry.fail(lost) == 1 and kept.error is lost and len(registry) == 0
    assert registry.fail(lost) == 0


def test_the_clients_receipt_registry_is_the_one_its_inbox_resolves_from():
    client = ClientClass("stomp://broker:61613")
    first = client._receipts
    assert isinstance(first, ReceiptRegistry) and first.lock is client._registry_lock
    # the inbox resolves from the very dict the registry keeps (no copy between them)
    assert client._inbox.receipts is first.pending
