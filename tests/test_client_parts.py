"""How AsyncClient is put together (docs/architecture.md, "The client and its objects").

The client keeps what outlives a connection; a connection is a :class:`Link` with its own
outbox, inbox and receipt registry; reconnecting is a :class:`Supervisor`; the counters
are a :class:`Counters`. These tests hold the structure to that: every object assigns its
own attributes in its own ``__init__``, no attribute but a counter is written by two
classes, the parts declare nothing for each other (no ``if TYPE_CHECKING:`` attribute
declarations, no ``NotImplementedError`` stubs), and the client stays small.
"""

from __future__ import annotations

import ast
import inspect
import threading
from pathlib import Path
from typing import Set

import stompfast
from stompfast._client import AsyncClient as ClientClass
from stompfast._direct_write import DirectWriter
from stompfast._inbox import Inbox
from stompfast._link import Link
from stompfast._outbox import Outbox
from stompfast._protocol import StompProtocol
from stompfast._publishing import Publisher
from stompfast._receipt import ReceiptRegistry
from stompfast._stats import Counters
from stompfast._supervisor import Supervisor
from stompfast.errors import ConnectionLostError, FlowControlError

PACKAGE = Path(stompfast.__file__).parent
#: the modules the client is made of
PART_MODULES = (
    "_client", "_link", "_outbox", "_inbox", "_receipt", "_supervisor", "_stats", "_lifecycle", "_ending", "_request",
    "_gate", "_subscribing", "_transaction", "_publishing", "_direct_write",
)
#: the modules the sans-I/O session (StompProtocol) is made of
PROTOCOL_MODULES = (
    "_protocol", "_protocol_states", "_protocol_rules", "_protocol_encoder", "_protocol_errors", "_protocol_handshake",
    "_protocol_subscriptions", "_protocol_transactions",
)


def _trees(modules=PART_MODULES):
    for name in modules:
        path = PACKAGE / f"{name}.py"
        yield name, ast.parse(path.read_text(), str(path))


#: methods that change the container they are called on
MUTATORS = frozenset({
    "append", "appendleft", "extend", "insert", "pop", "popleft", "popitem", "clear", "remove", "update",
    "setdefault", "add", "discard",
})


def _is_foreign(node: ast.AST, aliases: Set[str]) -> bool:
    """Whether ``node`` names state of an object other than ``self``: ``x.a``, ``self.a.b``, or a local alias of one."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    if isinstance(node, ast.Attribute):
        return not (isinstance(node.value, ast.Name) and node.value.id == "self")
    if isinstance(node, ast.Subscript):
        return _is_foreign(node.value, aliases)
    return False


def _writes_in(function: ast.AST) -> Set[str]:
    """The writes in ``function`` to another object's state, directly or through a local alias of it.

    ``x.attr = ...``, ``x.attr += ...`` (``x`` not ``self``); ``v[k] = ...``, ``del v[k]``,
    ``v.append(...)`` and the other mutators, where ``v`` is such an attribute or a local
    assigned from one (``out = outbox.out``; ``pending = self._link.receipts.pending``).
    """
    aliases: Set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Attribute, ast.Subscript)):
            if _is_foreign(node.value, aliases):
                aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
    found: Set[str] = set()
    for node in ast.walk(function):
        targets: list = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.ctx, (ast.Store, ast.Del)):
                    holder = ast.unparse(t.value)
                    if holder != "self":
                        found.add(f"{holder}.{t.attr}")
                elif isinstance(t, ast.Subscript) and isinstance(t.ctx, (ast.Store, ast.Del)):
                    if _is_foreign(t.value, aliases):
                        found.add(f"{ast.unparse(t.value)}[]")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                and _is_foreign(node.func.value, aliases)):
            found.add(f"{ast.unparse(node.func.value)}.{node.func.attr}()")
    return found


def _foreign_writes(modules=PART_MODULES) -> Set[str]:
    """Every write, in the client's modules, to the state of an object other than ``self``, as ``"module.Class: what"``.

    Through an attribute of another object (a local holding an outbox, ``self._counts``,
    an inlet...) or through a local alias of one of its fields (``_writes_in``).
    """
    found: Set[str] = set()
    for module, tree in _trees(modules):
        for cls in [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]:
            functions = [n for n in ast.walk(cls) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for function in functions:
                found.update(f"{module}.{cls.name}: {w}" for w in _writes_in(function))
    return found


def test_the_structure_test_sees_writes_through_aliases():
    source = """
def f(self, link):
    out = link.outbox.out
    out.append(b"x")
    pending = self._link.receipts.pending
    pending["r"] = 1
    del pending["q"]
    link.outbox.out_bytes += 1
    self.own.append(1)
    local = []
    local.append(1)
"""
    writes = _writes_in(ast.parse(source).body[0])
    assert writes == {"out.append()", "pending[]", "link.outbox.out_bytes"}


#: The writes to another object's attributes that the design allows, each for its reason.
ALLOWED_FOREIGN_WRITES = {
    # LiveSession is the client's own (which session acks may go to); its inlets only read it.
    "_client.AsyncClient: self._live.protocol",
    # An inlet is the hand-off between the reader and a subscription's consumer: the reader
    # clears its SUBSCRIBE's confirmation (its first MESSAGE confirms it) and its wake-up.
    "_inbox.Inbox: sub.confirming",
    "_inbox.Inbox: sub.space",
    # A blocking client's thread that could not write its ACK itself (ack_from_thread) gives
    # the message back the mark the ACK's encoding took, under the registry lock, so that the
    # queued ACK that follows can take it (the inverse of StompProtocol.ack_plain's mark).
    "_link.Link: message.settled",
    # An exception's cause.
    "_inbox.Inbox: lost.__cause__",
}


def test_no_attribute_but_a_counter_is_written_by_two_classes():
    counters = ("self._counts.", "counters.", "self.counters.", "inbox.receipts_failed")
    writes = {w for w in _foreign_writes() if not any(c in w.split(": ")[1] for c in counters)}
    assert writes - ALLOWED_FOREIGN_WRITES == set()
    # and the list stays true: every allowed write still exists
    assert ALLOWED_FOREIGN_WRITES - writes == set()


#: The writes to another object's attributes that the session's modules make, each for its reason.
ALLOWED_PROTOCOL_WRITES = {
    # The scanner's version is settable after negotiation (its documented contract).
    "_protocol.StompProtocol: self._scanner.version",
    # ack_plain inlines Message.claim_settle, once per message (the hot ACK).
    "_protocol.StompProtocol: message.settled",
    # A RemoteProtocolError carries the events of the frames before the fault.
    "_protocol.StompProtocol: exc.events",
}


def test_the_session_is_one_owner_of_its_state():
    # No module of the session writes another object's fields but for the writes listed above
    # (the encoder and the error record are told through their methods), and only
    # StompProtocol moves the session state.
    assert _foreign_writes(PROTOCOL_MODULES) == ALLOWED_PROTOCOL_WRITES
    for module, tree in _trees(PROTOCOL_MODULES):
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            for node in ast.walk(cls):
                moves = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                if moves and node.attr in ("state", "_state"):
                    assert (module, cls.name) == ("_protocol", "StompProtocol"), f"{module}.{cls.name} moves the state"


def test_the_parts_declare_nothing_for_each_other():
    for module, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                # only imports for annotations may sit under TYPE_CHECKING
                for stmt in node.body:
                    assert isinstance(stmt, (ast.Import, ast.ImportFrom)), (
                        f"{module}: a declaration under TYPE_CHECKING at line {stmt.lineno}"
                    )
            if isinstance(node, ast.Raise) and node.exc is not None and "NotImplementedError" in ast.unparse(node.exc):
                raise AssertionError(f"{module}: a NotImplementedError stub at line {node.lineno}")


def test_no_transport_guards_and_no_string_states():
    for module, tree in _trees():
        source = ast.unparse(tree)
        assert "_transport is transport" not in source and "transport is not transport" not in source, module
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and "_state" in ast.unparse(node.left):
                for right in node.comparators:
                    assert not isinstance(right, ast.Constant), f"{module}: {ast.unparse(node)}"


def test_the_client_is_not_a_mixin_and_holds_at_most_25_attributes():
    assert ClientClass.__bases__ == (object,)
    client = ClientClass("stomp://broker:61613")
    assert len(vars(client)) <= 25, sorted(vars(client))
    # every object the client is made of assigns its attributes in its own __init__ (slotted)
    for cls in (Link, Outbox, Inbox, ReceiptRegistry, Supervisor, Counters, Publisher, DirectWriter):
        assert "__slots__" in vars(cls), cls
        init = inspect.getsource(cls.__init__)
        for slot in cls.__slots__:
            assert f"self.{slot}" in init, f"{cls.__name__}.{slot} is not assigned in its __init__"


def test_the_counters_alone_derive_messages_sent_and_frames_out():
    # the snapshot's derivation (docs: messages_sent is entries given to the outbox minus the
    # non-SEND ones), with no client: 5 SENDs, 2 ACKs and a SUBSCRIBE written, a heart-beat
    # written, one SEND and a heart-beat dropped with a lost link, one SEND and a heart-beat
    # still queued, one SEND written by a thread, the CONNECT
    counters = Counters()
    outbox = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
    inbox = Inbox(None, StompProtocol(host="/"), subs={}, take_receipt=lambda receipt_id: None, rtt=counters.rtt)
    outbox.queue(b"SEND x")
    outbox.queue(b"\n")
    # what earlier connections' outboxes counted is in the totals, the current one's on itself
    earlier = Outbox(None, send_buffer_bytes=1e6, write_through_bytes=1e6)
    earlier.entries_written, earlier.heartbeats = 5, 2
    earlier.entries_dropped, earlier.frames_dropped = 2, 1
    later = Inbox(None, StompProtocol(host="/"), subs={}, take_receipt=lambda receipt_id: None, rtt=counters.rtt)
    counters.add_link(earlier, later)
    outbox.entries_written, outbox.heartbeats = 2 + 1 + 1, 1
    counters.acks, counters.control = 2, 1
    counters.thread_sends, counters.connects = 1, 1
    stats = counters.snapshot(outbox, inbox, 0, [], threading.Lock())
    # written, dropped, queued, from a thread
    assert stats.messages_sent == 5 + 1 + 1 + 1
    # written frames (the heart-beat not), the thread's, CONNECT
    assert stats.frames_out == (5 + 2 + 1) + 1 + 1
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


def test_a_new_client_holds_an_idle_link_whose_inbox_resolves_from_its_registry():
    client = ClientClass("stomp://broker:61613")
    link = client._link
    assert not link.alive and link.transport is None and link.endpoint is client.endpoints[0]
    assert link.receipts.lock is client._registry_lock
    # the inbox resolves the receipts its registry keeps, through the registry (no copy between them)
    assert link.inbox.take_receipt == link.receipts.take
    assert link.outbox.closed and link.inbox.closed
