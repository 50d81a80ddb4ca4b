"""The Frame value (docs/framing.md "Frame")."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping

import pytest

from stompfast import Frame
from stompfast.frames import CLIENT_COMMANDS, COMMANDS, SERVER_COMMANDS


def test_construction_and_attributes():
    f = Frame("SEND", {"destination": "/queue/a", "receipt": "1"}, b"hi")
    assert f.command == "SEND"
    assert dict(f.headers) == {"destination": "/queue/a", "receipt": "1"}
    assert list(f.headers) == ["destination", "receipt"]
    assert f.header_list == [("destination", "/queue/a"), ("receipt", "1")]
    assert f.body == b"hi"
    assert isinstance(f.headers, Mapping)


def test_defaults():
    f = Frame("DISCONNECT")
    assert f.command == "DISCONNECT"
    assert dict(f.headers) == {}
    assert f.header_list == []
    assert f.body == b""
    assert Frame("DISCONNECT", None, b"") == f == Frame("DISCONNECT", {}) == Frame("DISCONNECT", [])


def test_pairs_keep_repeats_first_wins():
    f = Frame("MESSAGE", [("a", "1"), ("b", "2"), ("a", "3")])
    assert dict(f.headers) == {"a": "1", "b": "2"}
    assert f.headers["a"] == "1"
    assert f.header_list == [("a", "1"), ("b", "2"), ("a", "3")]


def test_body_bytes_like_becomes_bytes():
    for body in (bytearray(b"xy"), memoryview(b"xy")):
        f = Frame("SEND", None, body)
        assert f.body == b"xy" and type(f.body) is bytes


@pytest.mark.parametrize(
    "args",
    [
        (b"SEND",),
        (None,),
        ("SEND", {"a": 1}),
        ("SEND", {1: "a"}),
        ("SEND", [("a", b"x")]),
        ("SEND", None, "text body"),
    ],
)
def test_type_errors(args):
    with pytest.raises(TypeError):
        Frame(*args)


def test_equality_by_value():
    a = Frame("SEND", {"x": "1", "y": "2"}, b"b")
    assert a == Frame("SEND", [("x", "1"), ("y", "2")], b"b")
    assert a == Frame("SEND", {"y": "2", "x": "1"}, b"b")  # as mappings
    assert not (a != Frame("SEND", {"x": "1", "y": "2"}, b"b"))
    assert a != Frame("MESSAGE", {"x": "1", "y": "2"}, b"b")
    assert a != Frame("SEND", {"x": "1", "y": "2"}, b"c")
    assert a != Frame("SEND", {"x": "1", "y": "3"}, b"b")
    assert a != Frame("SEND", {"x": "1"}, b"b")


def test_equality_with_repeats_compares_full_pair_lists():
    a = Frame("SEND", [("x", "1"), ("x", "2")])
    assert a == Frame("SEND", [("x", "1"), ("x", "2")])
    assert a != Frame("SEND", [("x", "1")])
    assert a != Frame("SEND", [("x", "1"), ("x", "3")])


def test_not_hashable():
    with pytest.raises(TypeError):
        hash(Frame("SEND"))
    with pytest.raises(TypeError):
        {Frame("SEND")}


def test_immutable():
    f = Frame("SEND", {"a": "1"}, b"x")
    for name, value in (
        ("command", "MESSAGE"),
        ("headers", {}),
        ("body", b""),
        ("header_list", []),
        ("other", 1),
    ):
        with pytest.raises(AttributeError):
            setattr(f, name, value)
    with pytest.raises(TypeError):
        f.headers["a"] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        f.headers["new"] = "2"  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        del f.headers["a"]  # type: ignore[attr-defined]
    assert f == Frame("SEND", {"a": "1"}, b"x")


def test_input_mapping_is_not_shared():
    src = {"a": "1"}
    pairs = [("a", "1"), ("a", "2")]
    f = Frame("SEND", src)
    g = Frame("SEND", pairs)
    src["a"] = "changed"
    src["b"] = "new"
    pairs.append(("c", "3"))
    assert dict(f.headers) == {"a": "1"}
    assert g.header_list == [("a", "1"), ("a", "2")]


def test_header_list_is_a_new_list_each_call():
    for f in (Frame("SEND", {"a": "1"}), Frame("SEND", [("a", "1"), ("a", "2")])):
        first = f.header_list
        assert type(first) is list
        assert first is not f.header_list
        first.append(("z", "9"))
        first[0] = ("q", "q")
        assert ("z", "9") not in f.header_list
        assert f.header_list[0] == ("a", "1")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle(protocol):
    for f in (
        Frame("SEND"),
        Frame("MESSAGE", {"a": "1", "b": "ü"}, b"\x00\xff"),
        Frame("MESSAGE", [("a", "1"), ("a", "2"), ("b", "3")], b"x"),
    ):
        g = pickle.loads(pickle.dumps(f, protocol))
        assert type(g) is Frame
        assert g == f
        assert g.header_list == f.header_list
        assert g.body == f.body and g.command == f.command


def test_copy():
    f = Frame("MESSAGE", [("a", "1"), ("a", "2")], b"x")
    for g in (copy.copy(f), copy.deepcopy(f)):
        assert g == f and type(g) is Frame and g.header_list == f.header_list


def test_repr_shows_command_headers_body():
    r = repr(Frame("SEND", {"a": "1"}, b"hi"))
    assert "SEND" in r and "'a'" in r and "'1'" in r and "b'hi'" in r


def test_command_sets():
    assert CLIENT_COMMANDS == {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
    assert SERVER_COMMANDS == {"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"}
    assert COMMANDS == CLIENT_COMMANDS | SERVER_COMMANDS
    assert len(COMMANDS) == 15
