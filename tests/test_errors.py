"""The exception tree of stompfast.errors: shape, builtin mixins, data, pickling."""

from __future__ import annotations

import inspect
import pickle
import re

import pytest

import stompfast
from stompfast import errors
from stompfast.errors import (
    AuthenticationError,
    LimitExceededError,
    ProtocolError,
    RemoteProtocolError,
    ServerError,
    StompError,
)
from stompfast.frames import Frame

#: class name -> (stompfast parents, builtin mixins), exactly as drawn in the docstring.
TREE = {
    "StompError": ((), (Exception,)),
    "ConfigurationError": (("StompError",), (ValueError,)),
    "ProtocolError": (("StompError",), ()),
    "LocalProtocolError": (("ProtocolError",), ()),
    "AlreadySettledError": (("LocalProtocolError",), ()),
    "RemoteProtocolError": (("ProtocolError",), ()),
    "LimitExceededError": (("RemoteProtocolError",), ()),
    "StompConnectionError": (("StompError",), (ConnectionError,)),
    "ConnectError": (("StompConnectionError",), ()),
    "ConnectionLostError": (("StompConnectionError",), ()),
    "HeartbeatTimeout": (("ConnectionLostError", "StompTimeout"), ()),
    "ServerError": (("StompError",), ()),
    "AuthenticationError": (("ServerError",), ()),
    "StompTimeout": (("StompError",), (TimeoutError,)),
    "ConnectTimeout": (("ConnectError", "StompTimeout"), ()),
    "TLSError": (("ConnectError",), ()),
    "NotStompError": (("ConnectError",), ()),
    "ReceiptTimeout": (("StompTimeout",), ()),
    "ReceiveTimeout": (("StompTimeout",), ()),
    "RequestTimeout": (("StompTimeout",), ()),
    "ClientClosedError": (("StompError",), (RuntimeError,)),
    "FlowControlError": (("StompError",), ()),
    "MessageTooLargeError": (("StompError",), ()),
    "StaleMessageError": (("StompError",), ()),
    "TransactionError": (("StompError",), ()),
}

CONCRETE = sorted(set(TREE) - {"ProtocolError"})


def _cls(name):
    return getattr(errors, name)


def test_every_class_is_in_the_table_and_exported():
    found = {
        name for name, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, BaseException)
    }
    assert found == set(TREE)
    assert sorted(errors.__all__) == sorted(TREE) == list(errors.__all__)
    for name in TREE:
        assert getattr(stompfast, name) is _cls(name)
        assert name in stompfast.__all__


@pytest.mark.parametrize("name", sorted(TREE))
def test_bases(name):
    parents, mixins = TREE[name]
    expected = tuple(_cls(p) for p in parents) + mixins
    assert _cls(name).__bases__ == expected


@pytest.mark.parametrize("name", sorted(TREE))
def test_builtin_ancestry(name):
    cls = _cls(name)
    assert issubclass(cls, StompError) and issubclass(cls, Exception)
    builtins_expected = set()
    todo = [name]
    while todo:
        parents, mixins = TREE[todo.pop()]
        builtins_expected.update(mixins)
        todo.extend(parents)
    for builtin in (ValueError, ConnectionError, TimeoutError, RuntimeError):
        assert issubclass(cls, builtin) == (builtin in builtins_expected), (name, builtin)


def test_heartbeat_timeout_is_both_lost_connection_and_timeout():
    with pytest.raises(TimeoutError):
        raise errors.HeartbeatTimeout("silent")
    with pytest.raises(ConnectionError):
        raise errors.HeartbeatTimeout("silent")
    with pytest.raises(errors.ConnectionLostError):
        raise errors.HeartbeatTimeout("silent")
    with pytest.raises(ValueError):
        raise errors.ConfigurationError("bad")


def _drawn_tree():
    """Parse the tree drawn in the module docstring into {name: (parent, mixins)}."""
    drawn = {}
    stack = []  # (depth, name)
    for line in errors.__doc__.splitlines():
        m = re.match(r"^(\s*(?:[│├└─ ]*?))([A-Z]\w+)(?:\s+\(([^)]*)\))?", line)
        if not m or not (line.strip().startswith(("├", "└", "│")) or m.group(2) == "StompError"):
            continue
        if m.group(2) not in TREE:
            continue
        depth = len(m.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        mixins = tuple(x.strip().lstrip("+") for x in m.group(3).split(",")) if m.group(3) else ()
        drawn[m.group(2)] = (parent, mixins)
        stack.append((depth, m.group(2)))
    return drawn


def test_docstring_tree_matches_the_classes():
    drawn = _drawn_tree()
    assert set(drawn) == set(TREE)
    for name, (parent, mixins) in drawn.items():
        cls = _cls(name)
        if parent is None:
            assert name == "StompError"
            continue
        assert issubclass(cls, _cls(parent)), (name, parent)
        assert cls.__bases__[0] is _cls(parent), (name, parent)
        for mixin in mixins:
            builtin = __builtins__[mixin] if isinstance(__builtins__, dict) else getattr(__builtins__, mixin)
            assert issubclass(cls, builtin), (name, mixin)


def test_protocol_error_is_abstract():
    with pytest.raises(TypeError):
        ProtocolError("x")
    with pytest.raises(TypeError):
        ProtocolError()

    class Mine(ProtocolError):
        pass

    assert str(Mine("ok")) == "ok"
    for cls in (errors.LocalProtocolError, RemoteProtocolError, LimitExceededError):
        assert isinstance(cls("x"), ProtocolError)


@pytest.mark.parametrize("name", CONCRETE)
def test_message_and_data(name):
    exc = _cls(name)("it broke", detail=42)
    assert str(exc) == "it broke"
    assert exc.message == "it broke"
    assert exc.args == ("it broke",)
    assert exc.detail == 42
    assert str(_cls(name)()) == ""


def test_defaults_of_the_data_attributes():
    e = RemoteProtocolError("x")
    assert e.offset is None and tuple(e.frames) == ()
    le = LimitExceededError("x")
    assert le.limit_name == "" and le.limit == 0 and le.offset is None and tuple(le.frames) == ()
    se = ServerError("x")
    assert dict(se.headers) == {} and se.body == b"" and se.receipt_id is None
    te = errors.TLSError("x")
    assert te.reason is None and te.verify_message is None
    assert isinstance(te, errors.ConnectError) and isinstance(te, ConnectionError)
    me = errors.MessageTooLargeError("x")
    assert dict(me.headers) == {} and me.size == 0 and me.limit == 0 and me.limit_name == "max_frame_bytes"
    assert me.message_id is None and me.skipped_message is None
    # a per-message error: the connection is fine, so it is no RemoteProtocolError
    assert not isinstance(me, RemoteProtocolError)


def _roundtrip(exc, protocol=pickle.HIGHEST_PROTOCOL):
    out = pickle.loads(pickle.dumps(exc, protocol))
    assert type(out) is type(exc)
    assert str(out) == str(exc) and out.args == exc.args and out.message == exc.message
    return out


@pytest.mark.parametrize("name", CONCRETE)
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_every_class_pickles_with_its_data(name, protocol):
    exc = _cls(name)("message ü", code=7, where=("a", 1))
    out = _roundtrip(exc, protocol)
    assert out.code == 7 and out.where == ("a", 1)
    assert vars(out) == vars(exc)


@pytest.mark.parametrize("protocol", [0, pickle.HIGHEST_PROTOCOL])
def test_limit_exceeded_pickles(protocol):
    frames = [Frame("SEND", {"a": "1"}, b"x")]
    exc = LimitExceededError("too big", limit_name="max_frame_bytes", limit=1024, offset=99, frames=frames)
    out = _roundtrip(exc, protocol)
    assert out.limit_name == "max_frame_bytes" and out.limit == 1024
    assert out.offset == 99
    assert list(out.frames) == frames and all(type(f) is Frame for f in out.frames)
    assert isinstance(out, RemoteProtocolError)


@pytest.mark.parametrize("cls", [ServerError, AuthenticationError])
@pytest.mark.parametrize("protocol", [0, pickle.HIGHEST_PROTOCOL])
def test_server_error_pickles(cls, protocol):
    exc = cls(
        "Bad CONNECT",
        headers={"message": "Bad CONNECT", "receipt-id": "r-1"},
        body=b"details\x00",
        receipt_id="r-1",
    )
    out = _roundtrip(exc, protocol)
    assert dict(out.headers) == {"message": "Bad CONNECT", "receipt-id": "r-1"}
    assert out.body == b"details\x00"
    assert out.receipt_id == "r-1"


@pytest.mark.parametrize("protocol", [0, pickle.HIGHEST_PROTOCOL])
def test_remote_protocol_error_pickles_with_frames(protocol):
    frames = [Frame("MESSAGE", [("a", "1"), ("a", "2")], b"\x00"), Frame("RECEIPT", {"receipt-id": "3"})]
    exc = RemoteProtocolError("bad byte", offset=1234, frames=frames)
    out = _roundtrip(exc, protocol)
    assert out.offset == 1234
    assert list(out.frames) == frames
    assert [f.header_list for f in out.frames] == [f.header_list for f in frames]
    assert all(type(f) is Frame for f in out.frames)


def test_pickled_cause_is_not_required():
    try:
        try:
            raise OSError("reset")
        except OSError as cause:
            raise errors.ConnectionLostError("lost", host="h") from cause
    except errors.ConnectionLostError as exc:
        out = _roundtrip(exc)
        assert out.host == "h"


def test_server_error_built_from_frame_headers_pickles():
    # Frame.headers is a read-only mapping proxy, which pickle refuses; ServerError
    # keeps a dict copy so that an ERROR frame's details can cross processes.
    frame = Frame("ERROR", {"message": "bad", "receipt-id": "7"}, b"details")
    exc = errors.ServerError("bad", headers=frame.headers, body=frame.body, receipt_id="7")
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), back.headers, back.body, back.receipt_id) == (
        errors.ServerError, {"message": "bad", "receipt-id": "7"}, b"details", "7")
