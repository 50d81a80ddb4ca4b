"""encode_frame against docs/framing.md ("The encoder"), on both implementations."""

from __future__ import annotations

import pytest
from helpers import frames_of

from stompfast.errors import ConfigurationError, LocalProtocolError, ProtocolError
from stompfast.frames import COMMANDS, Frame

VERSIONS = ["1.0", "1.1", "1.2"]
NEVER_ESCAPED = ["CONNECT", "STOMP", "CONNECTED"]


def F(command, headers=None, body=b""):
    return Frame(command, headers, body)


# ------------------------------------------------------------------------- exact bytes


@pytest.mark.parametrize("version", VERSIONS)
def test_exact_bytes_without_body(impl, version):
    wire = impl.encode_frame(
        "SUBSCRIBE", {"destination": "/queue/a", "id": "1", "ack": "client"}, version=version
    )
    assert wire == b"SUBSCRIBE\ndestination:/queue/a\nid:1\nack:client\n\n\x00"
    assert type(wire) is bytes


@pytest.mark.parametrize("version", VERSIONS)
def test_exact_bytes_no_headers(impl, version):
    assert impl.encode_frame("DISCONNECT", {}, version=version) == b"DISCONNECT\n\n\x00"
    assert impl.encode_frame("DISCONNECT", [], version=version) == b"DISCONNECT\n\n\x00"
    assert impl.encode_frame("DISCONNECT", {}, b"", version=version) == b"DISCONNECT\n\n\x00"


def test_default_version_is_1_2(impl):
    assert impl.encode_frame("SEND", {"k": "a\rb"}) == b"SEND\nk:a\\rb\n\n\x00"


def test_exact_bytes_with_given_content_length(impl):
    wire = impl.encode_frame("SEND", [("destination", "/q"), ("content-length", "5")], b"hello")
    assert wire == b"SEND\ndestination:/q\ncontent-length:5\n\nhello\x00"
    wire = impl.encode_frame("SEND", [("content-length", 5), ("destination", "/q")], b"he\x00lo")
    assert wire == b"SEND\ncontent-length:5\ndestination:/q\n\nhe\x00lo\x00"


def test_exact_bytes_escaped_1_2(impl):
    wire = impl.encode_frame("MESSAGE", {"a:b\\": "c\nd\re\\f:g"}, version="1.2")
    assert wire == b"MESSAGE\na\\cb\\\\:c\\nd\\re\\\\f\\cg\n\n\x00"


def test_exact_bytes_escaped_1_1(impl):
    wire = impl.encode_frame("MESSAGE", {"a:b\\": "c\nd\\f:g"}, version="1.1")
    assert wire == b"MESSAGE\na\\cb\\\\:c\\nd\\\\f\\cg\n\n\x00"


def test_exact_bytes_unescaped_1_0(impl):
    wire = impl.encode_frame("MESSAGE", {"a\\b": "c:d\\e\\c"}, version="1.0")
    assert wire == b"MESSAGE\na\\b:c:d\\e\\c\n\n\x00"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("command", NEVER_ESCAPED)
def test_connect_frames_are_never_escaped(impl, version, command):
    headers = [("accept-version", "1.0,1.1,1.2"), ("host", "/"), ("login", "us\\er"), ("passcode", "p:w\\c")]
    wire = impl.encode_frame(command, headers, version=version)
    assert (
        wire
        == command.encode() + b"\naccept-version:1.0,1.1,1.2\nhost:/\nlogin:us\\er\npasscode:p:w\\c\n\n\x00"
    )


def test_escaping_applies_to_other_commands(impl):
    for command in sorted(COMMANDS - set(NEVER_ESCAPED)):
        assert impl.encode_frame(command, {"k": "a:b"}) == command.encode() + b"\nk:a\\cb\n\n\x00"


def test_utf8_names_and_values(impl):
    wire = impl.encode_frame("SEND", {"näme": "välue☃😀"})
    assert wire == "SEND\nnäme:välue☃😀\n\n\x00".encode()


def test_int_values(impl):
    wire = impl.encode_frame("ACK", [("id", 7), ("n", 0), ("neg", -12), ("big", 2**70)])
    assert wire == b"ACK\nid:7\nn:0\nneg:-12\nbig:%d\n\n\x00" % 2**70


def test_pairs_keep_repeats_and_order(impl):
    wire = impl.encode_frame("MESSAGE", [("b", "1"), ("a", "2"), ("b", "3")])
    assert wire == b"MESSAGE\nb:1\na:2\nb:3\n\n\x00"


def test_mapping_keeps_insertion_order(impl):
    assert impl.encode_frame("MESSAGE", {"z": "1", "a": "2", "m": "3"}) == b"MESSAGE\nz:1\na:2\nm:3\n\n\x00"


def test_headers_from_any_iterable_or_mapping(impl):
    expected = b"MESSAGE\nz:1\na:2\n\n\x00"
    assert impl.encode_frame("MESSAGE", iter([("z", "1"), ("a", "2")])) == expected
    assert impl.encode_frame("MESSAGE", (("z", "1"), ("a", "2"))) == expected
    assert impl.encode_frame("MESSAGE", F("MESSAGE", {"z": "1", "a": "2"}).headers) == expected


def test_body_is_not_escaped(impl):
    body = b"a:b\nc\r\\\x00"
    wire = impl.encode_frame("SEND", [("content-length", len(body))], body, version="1.2")
    assert wire == b"SEND\ncontent-length:8\n\n" + body + b"\x00"


@pytest.mark.parametrize("body", [bytearray(b"xyz"), memoryview(b"xyz"), memoryview(b"--xyz")[2:]])
def test_bytes_like_bodies(impl, body):
    wire = impl.encode_frame("SEND", [("content-length", "3")], body)
    assert wire == b"SEND\ncontent-length:3\n\nxyz\x00"


def test_str_body_is_a_type_error(impl):
    with pytest.raises(TypeError):
        impl.encode_frame("SEND", {}, "hello")
    with pytest.raises(TypeError):
        impl.encode_frame("SEND", {}, "")


# ------------------------------------------------------------------------- content-length


@pytest.mark.parametrize("version", VERSIONS)
def test_content_length_added_when_body_is_not_empty(impl, version):
    wire = impl.encode_frame("SEND", {"destination": "/q", "receipt": "r"}, b"hi\x00", version=version)
    head, _, rest = wire.partition(b"\n\n")
    lines = head.split(b"\n")
    assert lines[0] == b"SEND"
    assert sorted(lines[1:]) == [b"content-length:3", b"destination:/q", b"receipt:r"]
    assert [line for line in lines[1:] if not line.startswith(b"content-length")] == [
        b"destination:/q",
        b"receipt:r",
    ]
    assert rest == b"hi\x00\x00"


def test_no_content_length_for_an_empty_body(impl):
    assert impl.encode_frame("SEND", {"destination": "/q"}, b"") == b"SEND\ndestination:/q\n\n\x00"
    assert impl.encode_frame("SEND", {"destination": "/q"}, bytearray()) == b"SEND\ndestination:/q\n\n\x00"


@pytest.mark.parametrize("value", ["3", 3])
def test_given_content_length_equal_to_body_is_kept_once(impl, value):
    wire = impl.encode_frame("SEND", {"content-length": value, "destination": "/q"}, b"abc")
    assert wire == b"SEND\ncontent-length:3\ndestination:/q\n\nabc\x00"


@pytest.mark.parametrize("value", ["0", 0])
def test_given_zero_content_length_with_empty_body_is_kept(impl, value):
    assert impl.encode_frame("SEND", {"content-length": value}) == b"SEND\ncontent-length:0\n\n\x00"


@pytest.mark.parametrize(
    "value, body",
    [("4", b"abc"), (2, b"abc"), ("1", b""), (1, b""), ("0", b"a"), ("x", b"a"), ("", b"a"), ("-1", b"")],
)
def test_given_content_length_different_from_body_is_refused(impl, value, body):
    with pytest.raises(LocalProtocolError):
        impl.encode_frame("SEND", {"content-length": value}, body)


# ------------------------------------------------------------------------- what a version cannot express


@pytest.mark.parametrize(
    "version, command, headers",
    [
        # 1.0: no escaping at all
        ("1.0", "SEND", {"k": "a\nb"}),
        ("1.0", "SEND", {"k": "a\rb"}),
        ("1.0", "SEND", {"k": "ab\r"}),
        ("1.0", "SEND", {"k\n": "v"}),
        ("1.0", "SEND", {"k\r": "v"}),
        ("1.0", "SEND", {"a:b": "v"}),
        # 1.1: no escape for CR
        ("1.1", "SEND", {"k": "a\rb"}),
        ("1.1", "SEND", {"k": "ab\r"}),
        ("1.1", "SEND", {"k\r": "v"}),
        # CONNECT, STOMP, CONNECTED are never escaped
        *[
            (v, c, h)
            for v in VERSIONS
            for c in NEVER_ESCAPED
            for h in ({"k": "a\nb"}, {"k": "a\rb"}, {"a:b": "v"}, {"k\n": "v"})
        ],
        # empty names
        *[(v, "SEND", {"": "v"}) for v in VERSIONS],
        *[(v, "CONNECT", [("", "v")]) for v in VERSIONS],
    ],
)
def test_what_a_version_cannot_express_is_refused(impl, version, command, headers):
    with pytest.raises(LocalProtocolError) as info:
        impl.encode_frame(command, headers, version=version)
    assert isinstance(info.value, ProtocolError)


@pytest.mark.parametrize("command", ["send", "Send", "FOO", "", "SEND ", " SEND", "SEND\n", "MESSAGES"])
def test_unknown_command_is_refused(impl, command):
    with pytest.raises(LocalProtocolError):
        impl.encode_frame(command, {})


def test_refusal_after_good_headers(impl):
    # the bad header comes last: nothing is built, the error is raised all the same
    with pytest.raises(LocalProtocolError):
        impl.encode_frame("SEND", [("a", "1"), ("b", "2"), ("", "3")])
    with pytest.raises(LocalProtocolError):
        impl.encode_frame("SEND", [("a", "1"), ("b", "x\ny")], version="1.0")


@pytest.mark.parametrize("version", ["1.3", "2.0", "", "1"])
def test_unknown_version_is_refused(impl, version):
    with pytest.raises(ConfigurationError):
        impl.encode_frame("SEND", {}, version=version)


# ------------------------------------------------------------------------- round trips through the scanner


ROUND_TRIPS = [
    ("1.2", F("MESSAGE", [("a:b\\", "c\nd\re\\f:g"), ("k\r\n", "")], b"\x00body\x00")),
    ("1.1", F("MESSAGE", [("a:b\\", "c\nd\\f:g"), ("message-id", "ID:x:1")], b"x" * 100)),
    ("1.0", F("SEND", [("destination", "/queue/a"), ("x", "a:b\\c\\n")], b"\x00")),
    ("1.2", F("CONNECT", [("accept-version", "1.2"), ("login", "a\\cb"), ("passcode", "p:w ")])),
    ("1.1", F("CONNECTED", [("version", "1.1"), ("server", "x\\y")])),
    ("1.0", F("STOMP", [("login", "a\\cb")])),
    ("1.2", F("SEND", [("k", "1"), ("k", "2"), ("k", "3")], b"")),
    ("1.2", F("SEND", [("näme☃", "välue😀"), (" padded ", " value ")], "ü".encode())),
    ("1.1", F("ERROR", [("message", "bad\nthing")], bytes(range(256)))),
]


@pytest.mark.parametrize("version, frame", ROUND_TRIPS)
def test_scan_of_encode_round_trips(impl, version, frame):
    wire = impl.encode_frame(frame.command, frame.header_list, frame.body, version=version)
    (got,) = frames_of(impl, wire, version=version)
    expected_list = frame.header_list
    if frame.body:
        assert got.headers["content-length"] == str(len(frame.body))
        assert [h for h in got.header_list if h[0] != "content-length"] == expected_list
        assert sum(1 for h in got.header_list if h[0] == "content-length") == 1
    else:
        assert got.header_list == expected_list
        assert got == frame
    assert got.command == frame.command
    assert got.body == frame.body


@pytest.mark.parametrize("version", VERSIONS)
def test_encoded_stream_round_trips(impl, version):
    frames = [
        F("SEND", [("destination", "/q"), ("content-length", "3")], b"a\x00b"),
        F("SUBSCRIBE", [("id", "0"), ("destination", "/t"), ("ack", "client-individual")]),
        F("ACK", [("id", "ID:1:2"), ("id", "again")]),
        F("DISCONNECT", [("receipt", "77")]),
    ]
    wire = b"\n".join(impl.encode_frame(f.command, f.header_list, f.body, version=version) for f in frames)
    got = frames_of(impl, wire, version=version)
    assert got == frames
    assert [f.header_list for f in got] == [f.header_list for f in frames]


def test_encoder_results_do_not_leak_between_versions_and_commands(impl):
    # an encoder may cache what it learnt of a name: the answer must still depend on
    # the version and the command
    cases = [
        ("1.2", "SEND", {"a:b": "x"}, b"SEND\na\\cb:x\n\n\x00"),
        ("1.0", "SEND", {"a:b": "x"}, LocalProtocolError),
        ("1.2", "CONNECT", {"a:b": "x"}, LocalProtocolError),
        ("1.1", "SEND", {"a:b": "x"}, b"SEND\na\\cb:x\n\n\x00"),
        ("1.2", "SEND", {"k\r": "x"}, b"SEND\nk\\r:x\n\n\x00"),
        ("1.1", "SEND", {"k\r": "x"}, LocalProtocolError),
        ("1.2", "SEND", {"k\\": "x"}, b"SEND\nk\\\\:x\n\n\x00"),
        ("1.0", "SEND", {"k\\": "x"}, b"SEND\nk\\:x\n\n\x00"),
        ("1.2", "STOMP", {"k\\": "x"}, b"STOMP\nk\\:x\n\n\x00"),
        ("1.2", "SEND", {"destination": "/a:b"}, b"SEND\ndestination:/a\\cb\n\n\x00"),
        ("1.0", "SEND", {"destination": "/a:b"}, b"SEND\ndestination:/a:b\n\n\x00"),
        ("1.2", "CONNECTED", {"destination": "/a:b"}, b"CONNECTED\ndestination:/a:b\n\n\x00"),
        ("1.2", "SEND", {"destination": "/a:b"}, b"SEND\ndestination:/a\\cb\n\n\x00"),
    ]
    for _ in range(2):
        for version, command, headers, expected in cases + cases[::-1]:
            for form in (headers, list(headers.items())):
                if isinstance(expected, bytes):
                    assert impl.encode_frame(command, form, version=version) == expected, (
                        version,
                        command,
                        form,
                    )
                else:
                    with pytest.raises(expected):
                        impl.encode_frame(command, form, version=version)
