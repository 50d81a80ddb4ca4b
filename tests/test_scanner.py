"""The frame scanner against docs/framing.md ("What the scanner accepts", limits, errors).

Every input goes through ``feed_all_ways`` (whole, byte by byte, split at every point),
on both implementations (the ``impl`` fixture, ids ``c`` and ``py``).
"""

from __future__ import annotations

import pytest
from helpers import SetVersion, error_of, feed_all_ways, frames_of

from stompfast.errors import ConfigurationError, LimitExceededError, RemoteProtocolError, StompError
from stompfast.frames import COMMANDS, Frame, SkippedFrame

VERSIONS = ["1.0", "1.1", "1.2"]
ESCAPING = ["1.1", "1.2"]
MiB = 1 << 20


def F(command, headers=None, body=b""):
    return Frame(command, headers, body)


def assert_same_frames(got, expected):
    """Equal as Frames and as wire-order header lists (Frame equality ignores order)."""
    assert got == expected
    assert [f.header_list for f in got] == [f.header_list for f in expected]


# ------------------------------------------------------------------------- basics


@pytest.mark.parametrize("version", VERSIONS)
def test_simple_frame(impl, version):
    got = frames_of(impl, b"SEND\ndestination:/queue/a\nreceipt:7\n\nhello\x00", version=version)
    assert_same_frames(got, [F("SEND", [("destination", "/queue/a"), ("receipt", "7")], b"hello")])
    f = got[0]
    assert type(f.command) is str and type(f.body) is bytes
    assert all(type(n) is str and type(v) is str for n, v in f.header_list)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_stomp_command_is_accepted(impl, command, version):
    wire = command.encode() + b"\nk:v\n\n\x00"
    assert_same_frames(frames_of(impl, wire, version=version), [F(command, {"k": "v"})])


def test_several_frames_in_one_feed(impl):
    wire = b"MESSAGE\nmessage-id:1\n\none\x00MESSAGE\nmessage-id:2\n\ntwo\x00RECEIPT\nreceipt-id:9\n\n\x00"
    assert_same_frames(
        frames_of(impl, wire),
        [
            F("MESSAGE", {"message-id": "1"}, b"one"),
            F("MESSAGE", {"message-id": "2"}, b"two"),
            F("RECEIPT", {"receipt-id": "9"}),
        ],
    )


def test_frame_without_headers_or_body(impl):
    assert_same_frames(frames_of(impl, b"DISCONNECT\n\n\x00"), [F("DISCONNECT")])


def test_empty_feed(impl):
    sc = impl.FrameScanner()
    assert sc.feed(b"") == []
    assert sc.buffered == 0
    result = feed_all_ways(impl, b"")
    assert result == ([], None, None, 0)


def test_bytearray_and_memoryview_input(impl):
    wire = b"SEND\na:b\n\nxyz\x00"
    for data in (bytearray(wire), memoryview(wire), memoryview(b"garbage" + wire)[7:]):
        sc = impl.FrameScanner()
        got = sc.feed(data)
        assert_same_frames(got, [F("SEND", {"a": "b"}, b"xyz")])
        assert type(got[0].body) is bytes
    # and in pieces of different types
    sc = impl.FrameScanner()
    assert sc.feed(bytearray(wire[:6])) == []
    assert sc.feed(memoryview(wire)[6:10]) == []
    assert sc.feed(wire[10:]) == [F("SEND", {"a": "b"}, b"xyz")]


def test_caller_buffer_may_be_reused_after_feed(impl):
    # asyncio's BufferedProtocol hands the same bytearray over and over: the scanner
    # must copy what it keeps.
    buf = bytearray(b"SEND\nab:cd\n\nbody")
    sc = impl.FrameScanner()
    assert sc.feed(buf) == []
    buf[:] = b"X" * len(buf)
    assert sc.feed(memoryview(b"\x00")) == [F("SEND", {"ab": "cd"}, b"body")]
    feed_all_ways(impl, b"SEND\nab:cd\n\nbody\x00")  # includes clobbered-buffer ways


# ------------------------------------------------------------------------- heart-beats, EOLs between frames


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("beats", [b"\n", b"\r\n", b"\n\n\n", b"\r\n\n\r\n\r\n"])
def test_heart_beats_alone_give_no_frame(impl, version, beats):
    assert feed_all_ways(impl, beats, version=version) == ([], None, None, 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_eols_between_frames_are_skipped(impl, version):
    wire = b"\n\r\nSEND\n\na\x00\n\r\n\nSEND\n\nb\x00SEND\n\nc\x00\r\n"
    got = feed_all_ways(impl, wire, version=version)
    assert got == ([F("SEND", None, b"a"), F("SEND", None, b"b"), F("SEND", None, b"c")], None, None, 0)


@pytest.mark.parametrize("wire", [b"\rSEND\n\n\x00", b"\r\r\n", b"\r \n", b"\rX"])
def test_cr_between_frames_not_followed_by_lf_is_an_error(impl, wire):
    assert error_of(impl, wire).error is RemoteProtocolError


def test_cr_between_frames_after_a_frame_keeps_the_frame(impl):
    result = error_of(impl, b"SEND\n\nok\x00\rSEND\n\n\x00")
    assert result.error is RemoteProtocolError
    assert result.frames == [F("SEND", None, b"ok")]


def test_cr_at_end_of_input_between_frames_is_not_yet_an_error(impl):
    result = feed_all_ways(impl, b"SEND\n\nok\x00\r")
    assert result.error is None
    assert result.frames == [F("SEND", None, b"ok")]
    # "sc.buffered is the number of bytes held for an incomplete frame (0 between frames)"
    assert result.buffered == 0
    # ... and the LF that completes it is a heart-beat
    assert feed_all_ways(impl, b"SEND\n\nok\x00\r\n") == ([F("SEND", None, b"ok")], None, None, 0)


@pytest.mark.parametrize("wire", [b"\x00", b"\n\x00", b"SEND\n\n\x00\x00"])
def test_nul_between_frames_is_an_error(impl, wire):
    assert error_of(impl, wire).error is RemoteProtocolError


# ------------------------------------------------------------------------- line endings and CR


@pytest.mark.parametrize("version", VERSIONS)
def test_crlf_line_endings(impl, version):
    wire = b"MESSAGE\r\ndestination:/q\r\nmessage-id:1\r\n\r\nhi\x00"
    assert_same_frames(
        frames_of(impl, wire, version=version),
        [F("MESSAGE", [("destination", "/q"), ("message-id", "1")], b"hi")],
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_mixed_line_endings(impl, version):
    wire = b"SEND\r\na:1\nb:2\r\n\n\r\n\x00"
    assert_same_frames(frames_of(impl, wire, version=version), [F("SEND", [("a", "1"), ("b", "2")], b"\r\n")])


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_cr_inside_header_line_is_data_before_1_2(impl, version):
    wire = b"SEND\na\rb:x\ry\nc:z\r\r\n\n\x00"
    # One CR right before LF is the EOL; any other CR is data.
    assert_same_frames(frames_of(impl, wire, version=version), [F("SEND", [("a\rb", "x\ry"), ("c", "z\r")])])


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_value_cannot_end_in_cr_before_1_2(impl, version):
    assert_same_frames(frames_of(impl, b"SEND\nc:z\r\n\n\x00", version=version), [F("SEND", {"c": "z"})])


@pytest.mark.parametrize(
    "wire",
    [
        b"SEND\na:x\ry\n\n\x00",  # CR inside a value
        b"SEND\na\rb:x\n\n\x00",  # CR inside a name
        b"SEND\na:x\r\r\n\n\x00",  # CR before the EOL's CR
        b"SEND\na:\r\n\r\r\n\x00",  # blank line "\r\r\n"
    ],
)
def test_cr_inside_header_line_is_an_error_on_1_2(impl, wire):
    assert error_of(impl, wire, version="1.2").error is RemoteProtocolError


def test_cr_in_body_is_data(impl):
    assert frames_of(impl, b"SEND\n\n\r\r\n\r\x00") == [F("SEND", None, b"\r\r\n\r")]


# ------------------------------------------------------------------------- commands


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "line",
    [
        b"send",
        b"Send",
        b"SENDX",
        b" SEND",
        b"SEND ",
        b"SEND\t",
        b"FOO",
        b"SEND\r\r",
        b"SE ND",
        b"MESSAGES",
        b"\x7fSEND",
    ],
)
def test_unknown_command_is_an_error(impl, version, line):
    result = error_of(impl, line + b"\n\n\x00", version=version)
    assert result.error is RemoteProtocolError
    assert result.frames == []


@pytest.mark.parametrize("line", [b"FOO", b"send", b"SEND "])
def test_unknown_command_fails_as_soon_as_the_line_is_complete(impl, line):
    result = error_of(impl, line + b"\n")  # no headers, no blank line, no NUL yet
    assert result.error is RemoteProtocolError
    result = error_of(impl, line + b"\r\n")
    assert result.error is RemoteProtocolError


def test_valid_command_line_alone_waits(impl):
    assert feed_all_ways(impl, b"MESSAGE\n") == ([], None, None, 8)


def test_command_not_utf8_is_an_error(impl):
    assert error_of(impl, b"SEND\xff\n\n\x00").error is RemoteProtocolError
    assert error_of(impl, b"\xc3\x28\n\n\x00").error is RemoteProtocolError


# ------------------------------------------------------------------------- header lines


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "wire",
    [
        b"SEND\nnocolon\n\n\x00",
        b"SEND\n:value\n\n\x00",
        b"SEND\n:\n\n\x00",
        b"SEND\na:1\nbad\n\n\x00",
        b"SEND\r\nnocolon\r\n\r\n\x00",
    ],
)
def test_header_without_colon_or_with_empty_name_is_an_error(impl, version, wire):
    assert error_of(impl, wire, version=version).error is RemoteProtocolError


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_colon_in_value_is_kept(impl, version):
    wire = b"MESSAGE\nmessage-id:ID:broker-1:2:3\nx::\n\n\x00"
    assert_same_frames(
        frames_of(impl, wire, version=version),
        [F("MESSAGE", [("message-id", "ID:broker-1:2:3"), ("x", ":")])],
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_value(impl, version):
    assert_same_frames(
        frames_of(impl, b"SEND\na:\nb:\n\n\x00", version=version), [F("SEND", [("a", ""), ("b", "")])]
    )


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_spaces_are_kept_from_1_1_on(impl, version):
    wire = b"SEND\n destination : /queue/a \t\n\n\x00"
    assert_same_frames(frames_of(impl, wire, version=version), [F("SEND", {" destination ": " /queue/a \t"})])


def test_stomp_1_0_strips_spaces_and_tabs_around_names_and_values(impl):
    wire = b"SEND\n destination : /queue/a \t\n\tx y\t:\t a b \n\n\x00"
    assert_same_frames(
        frames_of(impl, wire, version="1.0"), [F("SEND", [("destination", "/queue/a"), ("x y", "a b")])]
    )


def test_repeated_header_first_wins_and_header_list_keeps_all(impl):
    wire = b"MESSAGE\nfoo:1\nbar:x\nfoo:2\nfoo:3\n\n\x00"
    (f,) = frames_of(impl, wire)
    assert dict(f.headers) == {"foo": "1", "bar": "x"}
    assert list(f.headers) == ["foo", "bar"]
    assert f.header_list == [("foo", "1"), ("bar", "x"), ("foo", "2"), ("foo", "3")]
    assert f == F("MESSAGE", [("foo", "1"), ("bar", "x"), ("foo", "2"), ("foo", "3")])
    assert f != F("MESSAGE", {"foo": "1", "bar": "x"})


def test_repeated_header_after_unescaping(impl):
    wire = b"MESSAGE\na\\cb:1\na:b:2\na\\cb:3\n\n\x00"
    (f,) = frames_of(impl, wire, version="1.2")
    assert f.header_list == [("a:b", "1"), ("a", "b:2"), ("a:b", "3")]
    assert dict(f.headers) == {"a:b": "1", "a": "b:2"}


@pytest.mark.parametrize("version", VERSIONS)
def test_utf8_names_and_values(impl, version):
    wire = "SEND\nnäme:välue☃\n日本:語😀\n\nbody\x00".encode()
    assert_same_frames(
        frames_of(impl, wire, version=version), [F("SEND", [("näme", "välue☃"), ("日本", "語😀")], b"body")]
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "wire",
    [
        b"SEND\na:\xff\n\n\x00",
        b"SEND\n\xfe:x\n\n\x00",
        b"SEND\na:\xc0\x80\n\n\x00",  # overlong NUL
        b"SEND\na:\xed\xa0\x80\n\n\x00",  # surrogate
        b"SEND\na:\xe2\x98\n\n\x00",  # truncated sequence
        b"SEND\na:\xf4\x90\x80\x80\n\n\x00",  # beyond U+10FFFF
        b"SEND\n\xe2\x98:x\n\n\x00",
    ],
)
def test_header_not_utf8_is_an_error(impl, version, wire):
    assert error_of(impl, wire, version=version).error is RemoteProtocolError


def test_body_need_not_be_utf8(impl):
    assert frames_of(impl, b"SEND\n\n\xff\xfe\xc0\x80\x00") == [F("SEND", None, b"\xff\xfe\xc0\x80")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "wire",
    [
        b"SEND\x00",
        b"SEND\n\x00",
        b"SEND\na:b\x00",
        b"SEND\na:b\n\x00",
        b"SEND\na:b\x00\n\n\x00",
        b"SEND\na\x00b:c\n\n\x00",
        b"SEND\r\na:b\r\x00",
    ],
)
def test_nul_before_the_blank_line_is_an_error(impl, version, wire):
    assert error_of(impl, wire, version=version).error is RemoteProtocolError


# ------------------------------------------------------------------------- escapes


@pytest.mark.parametrize("version", ESCAPING)
def test_escapes_are_unescaped_in_names_and_values(impl, version):
    wire = b"MESSAGE\na\\nb\\cc\\\\d:e\\nf\\cg\\\\h\n\n\x00"
    assert_same_frames(frames_of(impl, wire, version=version), [F("MESSAGE", {"a\nb:c\\d": "e\nf:g\\h"})])


def test_cr_escape_on_1_2(impl):
    wire = b"MESSAGE\nk\\r:v\\r\\n\n\n\x00"
    assert_same_frames(frames_of(impl, wire, version="1.2"), [F("MESSAGE", {"k\r": "v\r\n"})])


def test_cr_escape_is_undefined_on_1_1(impl):
    assert error_of(impl, b"MESSAGE\nk:v\\r\n\n\x00", version="1.1").error is RemoteProtocolError


@pytest.mark.parametrize("version", ESCAPING)
def test_escaped_backslash_is_not_unescaped_twice(impl, version):
    wire = b"MESSAGE\nk:\\\\n\\\\c\\\\\\\\\n\n\x00"  # \\n \\c \\\\ on the wire
    assert_same_frames(frames_of(impl, wire, version=version), [F("MESSAGE", {"k": "\\n\\c\\\\"})])


@pytest.mark.parametrize("version", ESCAPING)
@pytest.mark.parametrize(
    "wire",
    [
        b"SEND\nk:a\\tb\n\n\x00",
        b"SEND\nk:\\x41\n\n\x00",
        b"SEND\nk:\\ \n\n\x00",
        b"SEND\nk:\\C\n\n\x00",
        b"SEND\nk:\\N\n\n\x00",
        b"SEND\nk\\t:v\n\n\x00",
        b"SEND\nk:a\\\n\n\x00",  # backslash at the end of a value
        b"SEND\nk:a\\\r\n\r\n\x00",
        b"SEND\nk\\:v\n\n\x00",  # backslash at the end of a name
        b"SEND\n\\:v\n\n\x00",
        "SEND\nk:\\é\n\n\x00".encode(),
    ],
)
def test_undefined_escape_is_an_error(impl, version, wire):
    assert error_of(impl, wire, version=version).error is RemoteProtocolError


def test_stomp_1_0_does_not_unescape(impl):
    wire = b"MESSAGE\nk\\c:a\\nb\\cc\\\\d\\t\\\n\n\x00"
    assert_same_frames(frames_of(impl, wire, version="1.0"), [F("MESSAGE", {"k\\c": "a\\nb\\cc\\\\d\\t\\"})])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("command", ["CONNECT", "STOMP", "CONNECTED"])
def test_connect_frames_are_never_unescaped(impl, version, command):
    wire = command.encode() + b"\nlogin:a\\cb\\nc\nk\\c:\\t\\\\\npasscode:p\\\n\n\x00"
    expected = F(command, [("login", "a\\cb\\nc"), ("k\\c", "\\t\\\\"), ("passcode", "p\\")])
    assert_same_frames(frames_of(impl, wire, version=version), [expected])


@pytest.mark.parametrize("version", ESCAPING)
def test_frames_after_connected_are_unescaped(impl, version):
    wire = b"CONNECTED\nversion:" + version.encode() + b"\nserver:x\\cy\n\n\x00MESSAGE\nk:x\\cy\n\n\x00"
    assert_same_frames(
        frames_of(impl, wire, version=version),
        [F("CONNECTED", [("version", version), ("server", "x\\cy")]), F("MESSAGE", {"k": "x:y"})],
    )


# ------------------------------------------------------------------------- content-length and bodies


@pytest.mark.parametrize("version", VERSIONS)
def test_content_length_takes_nuls(impl, version):
    wire = b"SEND\ncontent-length:5\n\na\x00b\x00c\x00"
    assert_same_frames(
        frames_of(impl, wire, version=version), [F("SEND", {"content-length": "5"}, b"a\x00b\x00c")]
    )


def test_content_length_zero(impl):
    assert frames_of(impl, b"SEND\ncontent-length:0\n\n\x00") == [F("SEND", {"content-length": "0"})]


def test_content_length_with_leading_zeros(impl):
    assert frames_of(impl, b"SEND\ncontent-length:003\n\n\x00\x00\x00\x00") == [
        F("SEND", {"content-length": "003"}, b"\x00\x00\x00")
    ]


def test_content_length_body_followed_by_next_frame(impl):
    wire = b"MESSAGE\ncontent-length:3\n\n\x00\n\x00\x00\nMESSAGE\n\nplain\x00"
    assert frames_of(impl, wire) == [
        F("MESSAGE", {"content-length": "3"}, b"\x00\n\x00"),
        F("MESSAGE", None, b"plain"),
    ]


def test_content_length_first_occurrence_counts(impl):
    wire = b"SEND\ncontent-length:1\ncontent-length:3\n\na\x00"
    (f,) = frames_of(impl, wire)
    assert f.body == b"a"
    assert f.header_list == [("content-length", "1"), ("content-length", "3")]


@pytest.mark.parametrize("version", ESCAPING)
@pytest.mark.parametrize(
    "first",
    [b"1\\n", b"\\\\", b"\\c1", b"1\\\\"],
)
def test_escaped_first_content_length_is_still_the_first(impl, version, first):
    # the first content-length unescapes to something that is not digits: fatal,
    # whatever a later content-length says
    wire = b"SEND\ncontent-length:" + first + b"\ncontent-length:1\n\nx\x00"
    assert error_of(impl, wire, version=version).error is RemoteProtocolError
    big = b"SEND\ncontent-length:" + first + b"\ncontent-length:9999999999\n\n"
    assert error_of(impl, big, version=version).error is RemoteProtocolError


@pytest.mark.parametrize("wire", [b"SEND\ncontent-length:1\n\nab\x00", b"SEND\ncontent-length:0\n\na\x00"])
def test_byte_after_content_length_body_must_be_nul(impl, wire):
    assert error_of(impl, wire).error is RemoteProtocolError


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"+1",
        b"-1",
        b" 1",
        b"1 ",
        b"1.0",
        b"0x1",
        b"1e0",
        b"1_0",
        b"1a",
        b"\t1",
        "\uff11".encode(),
        "\u0661".encode(),
    ],
)
def test_content_length_must_be_ascii_digits(impl, version, value):
    wire = b"SEND\ncontent-length:" + value + b"\n\nx\x00"
    assert error_of(impl, wire, version=version).error is RemoteProtocolError


def test_content_length_spaces_are_stripped_on_1_0(impl):
    wire = b"SEND\ncontent-length: 3 \n\na\x00b\x00"
    assert frames_of(impl, wire, version="1.0") == [F("SEND", {"content-length": "3"}, b"a\x00b")]


@pytest.mark.parametrize("value", [b"", b"+1", b"-1", b"1_0", b"0x1"])
def test_content_length_must_be_ascii_digits_on_1_0(impl, value):
    wire = b"SEND\ncontent-length:" + value + b"\n\nx\x00"
    assert error_of(impl, wire, version="1.0").error is RemoteProtocolError


@pytest.mark.parametrize("command", ["CONNECT", "CONNECTED", "SUBSCRIBE", "ACK"])
def test_body_on_a_command_that_should_not_have_one_is_kept(impl, command):
    wire = (
        command.encode() + b"\nid:1\n\nhello\x00" + command.encode() + b"\ncontent-length:2\n\n\x00\x00\x00"
    )
    assert frames_of(impl, wire) == [
        F(command, {"id": "1"}, b"hello"),
        F(command, {"content-length": "2"}, b"\x00\x00"),
    ]


def test_body_without_content_length_ends_at_first_nul(impl):
    wire = b"SEND\n\nab\x00\nSEND\n\ncd\x00"
    assert frames_of(impl, wire) == [F("SEND", None, b"ab"), F("SEND", None, b"cd")]


def test_binary_body_with_every_byte_value(impl):
    body = bytes(range(256)) * 4
    wire = b"MESSAGE\ncontent-length:1024\n\n" + body + b"\x00"
    assert frames_of(impl, wire) == [F("MESSAGE", {"content-length": "1024"}, body)]


def test_one_mib_bodies(impl):
    body = bytes((i * 7 + (i >> 9)) & 0xFF for i in range(MiB))
    wire = b"MESSAGE\ncontent-length:%d\n\n%s\x00\n" % (MiB, body)
    assert frames_of(impl, wire) == [F("MESSAGE", {"content-length": str(MiB)}, body)]
    plain = bytes(1 + (i % 255) for i in range(MiB))  # no NUL
    wire = b"MESSAGE\n\n" + plain + b"\x00" + b"MESSAGE\ncontent-length:%d\n\n%s\x00" % (MiB, body)
    assert frames_of(impl, wire) == [
        F("MESSAGE", None, plain),
        F("MESSAGE", {"content-length": str(MiB)}, body),
    ]


def test_many_small_frames(impl):
    wire = b"".join(b"MESSAGE\nmessage-id:%d\n\n%d\x00\n" % (i, i) for i in range(500))
    got = frames_of(impl, wire)
    assert got == [F("MESSAGE", {"message-id": str(i)}, str(i).encode()) for i in range(500)]


# ------------------------------------------------------------------------- lenient mode


def test_lenient_command_case_insensitive(impl):
    wire = b"send\n\n\x00Message\n\n\x00cOnNeCtEd\n\n\x00"
    assert frames_of(impl, wire, lenient=True) == [F("SEND"), F("MESSAGE"), F("CONNECTED")]
    assert error_of(impl, b"send\n\n\x00").error is RemoteProtocolError


def test_lenient_unknown_command_is_still_an_error(impl):
    assert error_of(impl, b"hello\n\n\x00", lenient=True).error is RemoteProtocolError


def test_lenient_header_names_lower_case(impl):
    wire = b"SEND\nDestination:/Queue/A\nFOO:1\nfoo:2\n\n\x00"
    (f,) = frames_of(impl, wire, lenient=True)
    assert f.header_list == [("destination", "/Queue/A"), ("foo", "1"), ("foo", "2")]
    assert dict(f.headers) == {"destination": "/Queue/A", "foo": "1"}
    (g,) = frames_of(impl, wire)
    assert g.header_list == [("Destination", "/Queue/A"), ("FOO", "1"), ("foo", "2")]


@pytest.mark.parametrize("version", VERSIONS)
def test_lenient_strips_trailing_spaces_and_leading_value_spaces(impl, version):
    wire = b"SEND   \nk:   v w  \nx:\n\nbody  \x00"
    assert_same_frames(
        frames_of(impl, wire, version=version, lenient=True),
        [F("SEND", [("k", "v w"), ("x", "")], b"body  ")],
    )


def test_lenient_trailing_spaces_before_crlf(impl):
    wire = b"SEND  \r\nk: v  \r\n\r\n\x00"
    assert frames_of(impl, wire, lenient=True) == [F("SEND", {"k": "v"})]


def test_lenient_content_length_header(impl):
    wire = b"SEND\nContent-Length:  3  \n\na\x00b\x00"
    assert frames_of(impl, wire, lenient=True) == [F("SEND", {"content-length": "3"}, b"a\x00b")]


def test_lenient_skips_blank_looking_lines_between_frames(impl):
    wire = b"   \n\r\n \r\n\r\r\nSEND\n\na\x00  \n\r \r\nSEND\n\nb\x00 \n"
    assert feed_all_ways(impl, wire, lenient=True) == (
        [F("SEND", None, b"a"), F("SEND", None, b"b")],
        None,
        None,
        0,
    )
    assert error_of(impl, b"   \nSEND\n\n\x00").error is RemoteProtocolError


def test_lenient_line_of_spaces_ends_the_headers(impl):
    wire = b"SEND\nk:v\n   \nbody\x00"
    assert frames_of(impl, wire, lenient=True) == [F("SEND", {"k": "v"}, b"body")]


def test_lenient_still_unescapes_and_never_for_connect(impl):
    wire = b"connect\nLogin:a\\cb\n\n\x00message\nK:a\\cb\n\n\x00"
    assert frames_of(impl, wire, lenient=True, version="1.2") == [
        F("CONNECT", {"login": "a\\cb"}),
        F("MESSAGE", {"k": "a:b"}),
    ]


def test_lenient_strips_trailing_crs_too(impl):
    # "trailing spaces and CRs are stripped from every line"
    wire = b"SEND\r \r\nk:x\r\r\na:y \r \n \r\nbody\x00"
    assert frames_of(impl, wire, lenient=True, version="1.2") == [
        F("SEND", [("k", "x"), ("a", "y")], b"body")
    ]
    assert error_of(impl, wire, version="1.2").error is RemoteProtocolError


@pytest.mark.parametrize("version", VERSIONS)
def test_lenient_run_of_spaces_between_frames_is_bounded(impl, version):
    # "A run of spaces and CRs between frames longer than max_header_bytes is
    # refused like an oversized header block."
    ok = b" \r " * 3 + b" \n" + b"SEND\n\n\x00"  # a run of 10
    assert frames_of(impl, ok, lenient=True, version=version, max_header_bytes=10) == [F("SEND")]
    for bad in (b" " * 11, b" \r" * 6, b"SEND\n\n\x00" + b" " * 11):
        result = error_of(impl, bad, lenient=True, version=version, max_header_bytes=10)
        assert result.error is LimitExceededError
        assert (result.exc.limit_name, result.exc.limit) == ("max_header_bytes", 10)
    # not lenient: heart-beat EOLs are never limited
    assert feed_all_ways(impl, b"\r\n" * 100 + b"\n" * 100, max_header_bytes=10) == ([], None, None, 0)


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"  SEND\n\n\x00", id="leading-spaces-on-command-line"),
        pytest.param(b"\rSEND\n\n\x00", id="cr-not-followed-by-lf-between-frames"),
        pytest.param(b"SEND\n\n\x00\rSEND\n\n\x00", id="cr-not-followed-by-lf-after-frame"),
        pytest.param(b"SEND\n\n\x00 \r SEND\n\n\x00", id="spaces-and-cr-before-command"),
        pytest.param(b"SEND\na:x\ry\n\n\x00", id="cr-inside-value-on-1.2"),
        pytest.param(b"SEND\na\r :x\n\n\x00", id="cr-inside-name-on-1.2"),
        pytest.param(b"SEND\n a\n\n\x00", id="header-without-colon"),
        pytest.param(b"SE ND\n\n\x00", id="space-inside-command"),
    ],
)
def test_lenient_everything_else_stays_a_fault(impl, wire):
    # "Everything else stays a fault: spaces *before* a command (...), a CR inside a
    # header line on 1.2, and so on."
    assert error_of(impl, wire, lenient=True, version="1.2").error is RemoteProtocolError


# ------------------------------------------------------------------------- limits


def _frame_with_headers(n, body=b""):
    return b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(n)) + b"\n" + body + b"\x00"


def _check_limit(result, name, limit):
    assert result.error is LimitExceededError
    assert isinstance(result.exc, RemoteProtocolError)
    assert result.exc.limit_name == name
    assert result.exc.limit == limit


def test_max_headers_exactly_at_limit_and_one_over(impl):
    for n in (1, 3, 10):
        (f,) = frames_of(impl, _frame_with_headers(n), max_headers=n)
        assert len(f.header_list) == n
        _check_limit(error_of(impl, _frame_with_headers(n + 1), max_headers=n), "max_headers", n)


def test_max_headers_counts_repeats(impl):
    wire = b"SEND\na:1\na:2\na:3\n\n\x00"
    assert frames_of(impl, wire, max_headers=3)[0].header_list == [("a", "1"), ("a", "2"), ("a", "3")]
    _check_limit(error_of(impl, wire, max_headers=2), "max_headers", 2)


def test_max_headers_fails_before_the_frame_ends(impl):
    # the 4th header line is complete: the limit of 3 is proven exceeded
    _check_limit(error_of(impl, b"SEND\na:1\nb:2\nc:3\nd:4\n", max_headers=3), "max_headers", 3)


def test_max_headers_default_is_1000(impl):
    assert len(frames_of(impl, _frame_with_headers(1000))) == 1
    _check_limit(error_of(impl, _frame_with_headers(1001)), "max_headers", 1000)


def test_max_header_bytes_exactly_at_limit_and_one_over(impl):
    wire = b"SEND\na:b\n\nbody\x00"  # head: 5 + 4 + 1 = 10 bytes
    assert frames_of(impl, wire, max_header_bytes=10) == [F("SEND", {"a": "b"}, b"body")]
    _check_limit(error_of(impl, wire, max_header_bytes=9), "max_header_bytes", 9)
    crlf = b"SEND\r\na:b\r\n\r\nbody\x00"  # head: 6 + 5 + 2 = 13 bytes, EOLs included
    assert frames_of(impl, crlf, max_header_bytes=13) == [F("SEND", {"a": "b"}, b"body")]
    _check_limit(error_of(impl, crlf, max_header_bytes=12), "max_header_bytes", 12)


def test_max_header_bytes_does_not_count_heart_beats_or_body(impl):
    wire = b"\n\r\n\nSEND\na:b\n\n" + b"x" * 100 + b"\x00\n\n"
    assert len(frames_of(impl, wire, max_header_bytes=10)) == 1


def test_max_header_bytes_applies_to_each_frame(impl):
    wire = b"SEND\na:b\n\n\x00SEND\na:bc\n\n\x00"
    result = error_of(impl, wire, max_header_bytes=10)
    _check_limit(result, "max_header_bytes", 10)
    assert result.frames == [F("SEND", {"a": "b"})]


def test_max_header_bytes_covers_the_command_line(impl):
    _check_limit(error_of(impl, b"DISCONNECT", max_header_bytes=9), "max_header_bytes", 9)
    _check_limit(error_of(impl, b"DISCONNECT\n", max_header_bytes=10), "max_header_bytes", 10)
    assert feed_all_ways(impl, b"DISCONNECT\n", max_header_bytes=12) == ([], None, None, 11)
    assert frames_of(impl, b"DISCONNECT\n\n\x00", max_header_bytes=12) == [F("DISCONNECT")]


def test_max_header_bytes_default_is_256_kib(impl):
    head = b"SEND\n" + b"k:" + b"v" * (262144 - 5 - 3 - 1) + b"\n\n"
    assert len(head) == 262144
    assert frames_of(impl, head + b"\x00")[0].headers["k"] == "v" * (262144 - 9)
    _check_limit(error_of(impl, head[:-2] + b"v\n\n\x00"), "max_header_bytes", 262144)


def test_max_frame_bytes_exactly_at_limit_and_one_over(impl):
    wire = b"SEND\na:b\n\nbody\x00"  # 15 bytes, NUL included
    assert frames_of(impl, wire, max_frame_bytes=15) == [F("SEND", {"a": "b"}, b"body")]
    _check_limit(error_of(impl, wire, max_frame_bytes=14), "max_frame_bytes", 14)
    cl = b"SEND\ncontent-length:4\n\nbo\x00y\x00"  # 5 + 17 + 1 + 4 + 1 = 28
    assert len(cl) == 28
    assert frames_of(impl, cl, max_frame_bytes=28) == [F("SEND", {"content-length": "4"}, b"bo\x00y")]
    _check_limit(error_of(impl, cl, max_frame_bytes=27), "max_frame_bytes", 27)


def test_max_frame_bytes_does_not_count_eols_between_frames(impl):
    wire = b"\r\n\nSEND\n\nab\x00\n\r\n\nSEND\n\ncd\x00\r\n"
    assert frames_of(impl, wire, max_frame_bytes=9) == [F("SEND", None, b"ab"), F("SEND", None, b"cd")]


def test_too_large_content_length_fails_before_its_body_arrives(impl):
    head = b"MESSAGE\ncontent-length:100\n\n"  # frame would be len(head) + 100 + 1 = 129
    assert len(head) == 28
    _check_limit(error_of(impl, head, max_frame_bytes=128), "max_frame_bytes", 128)
    result = feed_all_ways(impl, head, max_frame_bytes=129)
    assert result.error is None and result.frames == []


def test_huge_content_length_against_default_limit(impl):
    limit = 104857600
    for digits in (b"104857600", b"18446744073709551616", b"18446744073709551617", b"9" * 40):
        head = b"MESSAGE\ncontent-length:" + digits + b"\n\n"
        _check_limit(error_of(impl, head), "max_frame_bytes", limit)
        # a wrapped-around length must not let a frame through
        _check_limit(error_of(impl, head + b"\x00"), "max_frame_bytes", limit)
    head = b"MESSAGE\ncontent-length:104857565\n\n"  # 34 + 104857565 + 1 == limit
    assert len(head) + 104857565 + 1 == limit
    assert feed_all_ways(impl, head) == ([], None, None, len(head))
    head = b"MESSAGE\ncontent-length:104857566\n\n"  # one over
    _check_limit(error_of(impl, head), "max_frame_bytes", limit)


def test_limits_are_checked_after_the_content_length_is_known(impl):
    # huge content-length on a frame whose head is itself too large: either limit
    result = error_of(impl, b"SEND\ncontent-length:99999999999\nxxxxxxxxxxxx:y\n\n", max_header_bytes=20)
    assert result.error is LimitExceededError


def test_content_length_cannot_bypass_max_frame_bytes_with_small_limit(impl):
    _check_limit(
        error_of(impl, b"SEND\ncontent-length:20\n\n" + b"x" * 20 + b"\x00", max_frame_bytes=30),
        "max_frame_bytes",
        30,
    )


def test_large_allowed_content_length_waits_for_its_body(impl):
    # "any positive integer up to 2**48 sets it": a content-length within the limit
    # is a promise of bytes to come, not a reason to allocate them before they arrive.
    head = b"MESSAGE\ncontent-length:%d\n\n" % 2**47
    assert feed_all_ways(impl, head, max_frame_bytes=2**48) == ([], None, None, len(head))
    assert feed_all_ways(impl, head + b"some", max_frame_bytes=2**48) == ([], None, None, len(head) + 4)


def _feed_forever(impl, first, chunk, limit_name, limit, bound, rounds=2000, **kwargs):
    """Feed ``first`` then ``chunk`` repeatedly: the scanner must fail as soon as the
    bytes prove the limit exceeded and never hold more than ``bound`` bytes."""
    sc = impl.FrameScanner(**kwargs)
    fed = 0
    for i in range(rounds):
        data = first if i == 0 else chunk
        try:
            out = sc.feed(data)
        except LimitExceededError as exc:
            assert exc.limit_name == limit_name and exc.limit == limit
            return fed + len(data)
        fed += len(data)
        assert out == []
        assert sc.buffered <= bound, (sc.buffered, bound)
        assert fed <= bound, f"{fed} bytes fed without a LimitExceededError (limit {limit_name}={limit})"
    pytest.fail("never raised")


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_never_ending_header_block_stays_bounded(impl, chunk_size):
    # chunk_size is prime to the line length, so lines are cut everywhere
    chunk = (b"ab:c\n" * 1000)[:chunk_size]
    _feed_forever(impl, b"SEND\n", chunk, "max_header_bytes", 300, 300, max_header_bytes=300, rounds=10000)


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_never_ending_header_line_stays_bounded(impl, chunk_size):
    _feed_forever(
        impl, b"SEND\nk:", b"v" * chunk_size, "max_header_bytes", 300, 300, max_header_bytes=300, rounds=10000
    )


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_never_ending_body_stays_bounded(impl, chunk_size):
    _feed_forever(
        impl, b"SEND\n\n", b"x" * chunk_size, "max_frame_bytes", 500, 500, max_frame_bytes=500, rounds=10000
    )


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_content_length_body_stays_bounded(impl, chunk_size):
    # content-length within the limit but the NUL never comes: the byte after the body
    # is checked, so the scanner cannot be made to hold more than the frame.
    head = b"SEND\ncontent-length:10\n\n"
    sc = impl.FrameScanner(max_frame_bytes=100)
    assert sc.feed(head) == []
    with pytest.raises(RemoteProtocolError):
        for _ in range(1000):
            sc.feed(b"x" * chunk_size)
            assert sc.buffered <= 100


def test_never_ending_headers_count(impl):
    _feed_forever(impl, b"SEND\n", b"a:b\n", "max_headers", 5, 5 + 5 * 4, max_headers=5)


def test_bounded_with_default_limits(impl):
    # 256 KiB of a single header line: fails at the default max_header_bytes
    fed = _feed_forever(impl, b"SEND\nk:", b"v" * 4096, "max_header_bytes", 262144, 262144, rounds=100)
    assert fed <= 262144 + 4096


@pytest.mark.parametrize("name", ["max_frame_bytes", "max_headers", "max_header_bytes"])
@pytest.mark.parametrize("value", [0, -1, 2**48 + 1, 2**64])
def test_invalid_limit_is_a_configuration_error(impl, name, value):
    with pytest.raises(ConfigurationError):
        impl.FrameScanner(**{name: value})


@pytest.mark.parametrize("name", ["max_frame_bytes", "max_headers", "max_header_bytes"])
@pytest.mark.parametrize("value", [1.5, "10", b"10"])
def test_limit_that_is_not_an_int_is_refused(impl, name, value):
    with pytest.raises((ConfigurationError, TypeError)):
        impl.FrameScanner(**{name: value})


@pytest.mark.parametrize("name", ["max_frame_bytes", "max_headers", "max_header_bytes"])
@pytest.mark.parametrize("value", [1, 2**48, None])
def test_valid_limits_are_accepted(impl, name, value):
    sc = impl.FrameScanner(**{name: value})
    assert sc.feed(b"\n") == []


# ------------------------------------------------------------------------- version


def test_version_property(impl):
    sc = impl.FrameScanner()
    assert sc.version == "1.2"
    for v in ("1.0", "1.1", "1.2"):
        sc.version = v
        assert sc.version == v
    assert impl.FrameScanner(version="1.0").version == "1.0"


@pytest.mark.parametrize("bad", ["1.3", "2.0", "1", "", " 1.2", "1.2 ", "1.10", "v1.2"])
def test_invalid_version_is_a_configuration_error(impl, bad):
    with pytest.raises(ConfigurationError):
        impl.FrameScanner(version=bad)
    sc = impl.FrameScanner(version="1.1")
    with pytest.raises(ConfigurationError):
        sc.version = bad
    assert sc.version == "1.1"
    assert sc.feed(b"MESSAGE\nk:a\\cb\n\n\x00") == [F("MESSAGE", {"k": "a:b"})]


@pytest.mark.parametrize("bad", [1.2, b"1.2", 12])
def test_version_that_is_not_a_str_is_refused(impl, bad):
    with pytest.raises((ConfigurationError, TypeError)):
        impl.FrameScanner(version=bad)
    sc = impl.FrameScanner(version="1.1")
    with pytest.raises((ConfigurationError, TypeError)):
        sc.version = bad
    assert sc.version == "1.1"
    assert sc.feed(b"MESSAGE\nk:a\\cb\n\n\x00") == [F("MESSAGE", {"k": "a:b"})]


def test_version_switch_between_frames_changes_unescaping(impl):
    msg = b"MESSAGE\nk:a\\cb\\nc\\\\d\n\n\x00"
    cr = b"MESSAGE\nk:x\\ry\n\n\x00"
    got = frames_of(
        impl,
        [
            msg,
            SetVersion("1.1"),
            b"CONNECTED\nversion:1.1\nk:a\\cb\n\n\x00" + msg,
            SetVersion("1.2"),
            msg + cr,
            SetVersion("1.0"),
            msg + cr + b"SEND\n a : b \n\n\x00",
        ],
        version="1.0",
    )
    assert got == [
        F("MESSAGE", {"k": "a\\cb\\nc\\\\d"}),
        F("CONNECTED", {"version": "1.1", "k": "a\\cb"}),
        F("MESSAGE", {"k": "a:b\nc\\d"}),
        F("MESSAGE", {"k": "a:b\nc\\d"}),
        F("MESSAGE", {"k": "x\ry"}),
        F("MESSAGE", {"k": "a\\cb\\nc\\\\d"}),
        F("MESSAGE", {"k": "x\\ry"}),
        F("SEND", {"a": "b"}),
    ]


def test_version_switch_to_1_1_makes_cr_escape_fatal(impl):
    result = error_of(impl, [b"MESSAGE\nk:x\\ry\n\n\x00", SetVersion("1.1"), b"MESSAGE\nk:x\\ry\n\n\x00"])
    assert result.frames == [F("MESSAGE", {"k": "x\ry"})]
    assert result.error is RemoteProtocolError


# ------------------------------------------------------------------------- errors lose nothing


def test_frames_before_an_error_are_in_the_exception(impl):
    wire = b"SEND\n\nA\x00\nSEND\nk:v\n\nB\x00BOGUS\n\n\x00SEND\n\nC\x00"
    result = error_of(impl, wire)
    assert result.error is RemoteProtocolError
    assert result.frames == [F("SEND", None, b"A"), F("SEND", {"k": "v"}, b"B")]
    sc = impl.FrameScanner()
    with pytest.raises(RemoteProtocolError) as info:
        sc.feed(wire)
    exc = info.value
    assert list(exc.frames) == [F("SEND", None, b"A"), F("SEND", {"k": "v"}, b"B")]
    assert type(exc.offset) is int
    start = wire.index(b"BOGUS")
    assert start <= exc.offset <= len(wire)


def test_offset_counts_bytes_since_the_scanner_was_created(impl):
    sc = impl.FrameScanner()
    first = b"SEND\n\nA\x00\n\n"
    assert sc.feed(first) == [F("SEND", None, b"A")]
    with pytest.raises(RemoteProtocolError) as info:
        sc.feed(b"SEND\nnocolon\n\n\x00")
    assert len(first) <= info.value.offset <= len(first) + 16
    assert list(info.value.frames) == []


def test_offset_of_limit_error(impl):
    sc = impl.FrameScanner(max_headers=1)
    with pytest.raises(LimitExceededError) as info:
        sc.feed(b"SEND\n\n\x00SEND\na:1\nb:2\n\n\x00")
    assert list(info.value.frames) == [F("SEND")]
    assert 7 <= info.value.offset <= 27


def test_scanner_stays_failed(impl):
    sc = impl.FrameScanner()
    with pytest.raises(RemoteProtocolError):
        sc.feed(b"SEND\n\nA\x00FOO\n")
    for data in (b"SEND\n\nB\x00", b"", b"\n"):
        with pytest.raises(RemoteProtocolError) as info:
            sc.feed(data)
        assert list(info.value.frames) == []


def test_scanner_stays_failed_after_limit_error(impl):
    sc = impl.FrameScanner(max_frame_bytes=10)
    with pytest.raises(LimitExceededError):
        sc.feed(b"SEND\n\n" + b"x" * 20)
    with pytest.raises(RemoteProtocolError) as info:
        sc.feed(b"\x00SEND\n\n\x00")
    assert list(info.value.frames) == []


@pytest.mark.parametrize(
    "endless",
    [
        pytest.param(b"MESSAGE\nsubscription:1\n\n", id="body-without-nul"),
        pytest.param(b"MESSAGE\ncontent-length:3000000\n\n", id="content-length-body"),
        pytest.param(b"MESSAGE\nx:", id="header-line"),
    ],
)
def test_failed_scanner_gives_its_buffer_back(impl, endless):
    # A broker that sends a frame that never ends costs up to max_frame_bytes; a
    # failed scanner reads nothing more, so that memory must be freed at once, not
    # held as long as the scanner (or the session owning it) lives.
    import tracemalloc

    limit = 4 * 1024 * 1024
    sc = impl.FrameScanner(max_frame_bytes=limit, max_header_bytes=limit)
    chunk = b"y" * 65536
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(RemoteProtocolError) as info:  # over a limit, or no NUL after the body
            sc.feed(endless)
            for _ in range(2 * limit // len(chunk)):
                sc.feed(chunk)
        del info
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < limit // 8, f"a failed scanner still holds {held} bytes"
    assert sc.buffered == 0
    with pytest.raises(RemoteProtocolError, match="failed earlier"):
        sc.feed(b"\n")


def test_errors_are_stomp_errors(impl):
    sc = impl.FrameScanner()
    with pytest.raises(StompError):
        sc.feed(b"nope\n")


# ------------------------------------------------------------------------- buffered


def test_buffered_is_zero_initially_and_between_frames(impl):
    sc = impl.FrameScanner()
    assert sc.buffered == 0
    assert sc.feed(b"SEND\n\n\x00\n\n\r\n") == [F("SEND")]
    assert sc.buffered == 0


@pytest.mark.parametrize(
    "wire, held",
    [
        (b"S", 1),
        (b"SEND", 4),
        (b"SEND\n", 5),
        (b"SEND\r", 5),
        (b"SEND\nde", 7),
        (b"SEND\ndest:x\n", 12),
        (b"SEND\ndest:x\n\n", 13),
        (b"SEND\n\nhel", 9),
        (b"SEND\ncontent-length:5\n\nab\x00", 26),
        (b"SEND\ncontent-length:5\n\nab\x00de", 28),
        (b"SEND\n\n\x00\n\r\nSEN", 3),
        (b"SEND\n\n\x00MESSAGE\n", 8),
    ],
)
def test_buffered_counts_the_bytes_of_the_incomplete_frame(impl, wire, held):
    result = feed_all_ways(impl, wire)
    assert result.error is None
    assert result.buffered == held


def test_buffered_can_be_read_but_not_set(impl):
    sc = impl.FrameScanner()
    sc.feed(b"SEND\n")
    with pytest.raises((AttributeError, TypeError)):
        sc.buffered = 0
    assert sc.buffered == 5


# ------------------------------------------------------------------------- well-known names and values

KNOWN = [
    "destination", "message-id", "subscription", "ack", "id", "content-type", "receipt", "receipt-id",
    "transaction", "version", "session", "server", "heart-beat", "message", "persistent", "priority",
    "expires", "timestamp", "host", "login", "passcode", "accept-version", "selector", "reply-to",
    "correlation-id", "type", "JMSXUserID", "user-id",
]  # fmt: skip


def _near_misses(name):
    return [name, name[:-1], name + "x", name.upper(), "x" + name[1:], name[:1] + "\u00e9" + name[2:]]


@pytest.mark.parametrize("version", VERSIONS)
def test_well_known_header_names_and_near_misses(impl, version):
    pairs = [(n, f"v{i}") for i, n in enumerate(dict.fromkeys(m for k in KNOWN for m in _near_misses(k)))]
    wire = ("MESSAGE\n" + "".join(f"{n}:{v}\n" for n, v in pairs) + "\n\x00").encode()
    (f,) = frames_of(impl, wire, version=version, max_headers=1000)
    assert f.header_list == pairs


def test_content_length_near_misses_are_plain_headers(impl):
    wire = b"SEND\ncontent-lengt:x\ncontent-lengthx:y\nContent-Length:z\ncontent_length:w\n\nab\x00"
    (f,) = frames_of(impl, wire)
    assert f.body == b"ab"
    assert f.header_list == [
        ("content-lengt", "x"),
        ("content-lengthx", "y"),
        ("Content-Length", "z"),
        ("content_length", "w"),
    ]


def test_content_length_with_many_leading_zeros(impl):
    wire = b"SEND\ncontent-length:" + b"0" * 40 + b"3\n\na\x00c\x00"
    (f,) = frames_of(impl, wire)
    assert f.body == b"a\x00c"


def test_repeated_values_of_well_known_names_are_not_confused(impl):
    values = ["/queue/a", "/queue/b", "/queue/a", "/queue/aa", "", "/queue/a", "/queue/\u00e9", "/queue/a"]
    wire = b"".join(
        f"MESSAGE\ndestination:{v}\nsubscription:{v[::-1]}\ncontent-type:{v}x\n\n\x00".encode()
        for v in values
    )
    got = frames_of(impl, wire)
    assert [f.header_list for f in got] == [
        [("destination", v), ("subscription", v[::-1]), ("content-type", v + "x")] for v in values
    ]


def test_value_cache_does_not_cross_versions_or_escapes(impl):
    frames = [
        b"MESSAGE\ndestination:/a\\cb\n\n\x00",
        SetVersion("1.0"),
        b"MESSAGE\ndestination:/a\\cb\n\n\x00",
        SetVersion("1.2"),
        b"MESSAGE\ndestination:/a\\cb\n\n\x00",
        b"CONNECTED\nserver:/a\\cb\n\n\x00MESSAGE\nserver:/a\\cb\n\n\x00",
    ]
    got = frames_of(impl, frames, version="1.2")
    assert [f.header_list for f in got] == [
        [("destination", "/a:b")],
        [("destination", "/a\\cb")],
        [("destination", "/a:b")],
        [("server", "/a\\cb")],
        [("server", "/a:b")],
    ]


# ------------------------------------------------------------------------- special bytes at every position

SPECIALS = {
    # special bytes -> (value on 1.0, on 1.1, on 1.2); None means RemoteProtocolError
    b"\\c": ("\\c", ":", ":"),
    b"\\\\": ("\\\\", "\\", "\\"),
    b"\\r": ("\\r", None, "\r"),
    b"\\t": ("\\t", None, None),
    b"\r": ("\r", "\r", None),
    b":": (":", ":", ":"),
    b"\x00": (None, None, None),
    b"\xc3\xa9": ("\u00e9", "\u00e9", "\u00e9"),
    b"\xe2\x98": (None, None, None),
    b"\xff": (None, None, None),
}


@pytest.mark.parametrize("special", list(SPECIALS), ids=repr)
def test_special_bytes_at_every_position_of_a_value(impl, special):
    # heads long enough for any block-at-a-time scanning, the special bytes at
    # every offset of a 40-byte value (so at every alignment)
    for index, version in enumerate(VERSIONS):
        expected = SPECIALS[special][index]
        for p in range(0, 40):
            value = b"v" * p + special + b"w" * (39 - p)
            wire = b"MESSAGE\nsubscription:0\nkey:" + value + b"\nx:y\n\n\x00"
            result = feed_all_ways(impl, wire, version=version)
            if special == b"\r" and p == 39:  # CR LF: the CR belongs to the EOL
                expected = ""
            if expected is None:
                assert result.error is RemoteProtocolError, (version, value)
            else:
                assert result.error is None, (version, value, result.exc)
                text = "v" * p + expected + "w" * (39 - p)
                assert result.frames == [F("MESSAGE", [("subscription", "0"), ("key", text), ("x", "y")])], (
                    version,
                    value,
                )


@pytest.mark.parametrize("special", [s for s in SPECIALS if s != b":"], ids=repr)
def test_special_bytes_at_every_position_of_a_name(impl, special):
    for index, version in enumerate(VERSIONS):
        expected = SPECIALS[special][index]
        for p in range(0, 36, 1):
            name = b"n" * p + special + b"m" * (35 - p)
            wire = b"MESSAGE\ndestination:/q\n" + name + b":value\n\n\x00"
            result = feed_all_ways(impl, wire, version=version)
            if expected is None:
                assert result.error is RemoteProtocolError, (version, name)
            else:
                assert result.error is None, (version, name, result.exc)
                text = "n" * p + expected + "m" * (35 - p)
                assert result.frames == [F("MESSAGE", [("destination", "/q"), (text, "value")])], (
                    version,
                    name,
                )


@pytest.mark.parametrize("data", ["SEND\n\n\x00", memoryview(b"SEND\n\n\x00abcd")[::2], 42])
def test_feed_refuses_what_is_not_contiguous_bytes_with_type_error(impl, data):
    # both implementations raise the same class, and the scanner is not failed by it
    sc = impl.FrameScanner()
    with pytest.raises(TypeError):
        sc.feed(data)
    assert sc.feed(b"SEND\n\n\x00") == [Frame("SEND")]


# ------------------------------------------------------------------------- skip_oversized

SKIP_GOOD_1 = b"MESSAGE\nsubscription:0\nmessage-id:1\ndestination:/queue/a\ncontent-length:2\n\nab\x00"
SKIP_BIG_HEAD = b"MESSAGE\nsubscription:0\nmessage-id:2\nack:A2\ndestination:/queue/a\ncontent-length:300\n\n"
SKIP_BIG = SKIP_BIG_HEAD + bytes(range(256)) + b"\x00" * 44 + b"\x00"  # NULs in the body are body bytes
SKIP_GOOD_3 = b"MESSAGE\nsubscription:0\nmessage-id:3\ndestination:/queue/a\n\ncd\x00"


def test_skip_oversized_message_with_content_length_between_two_good_ones(impl):
    # "A MESSAGE over max_frame_bytes whose content-length says where its body ends
    # is not a fault: its body is counted off as it arrives and a SkippedFrame
    # (headers, empty body, size) takes its place."
    wire = SKIP_GOOD_1 + b"\n" + SKIP_BIG + b"\n\n" + SKIP_GOOD_3
    result = feed_all_ways(impl, wire, max_frame_bytes=128, skip_oversized=True)
    assert result.error is None and result.buffered == 0
    first, skipped, third = result.frames
    assert (type(first), first.body, first.headers["message-id"]) == (Frame, b"ab", "1")
    assert type(skipped) is SkippedFrame
    assert skipped.command == "MESSAGE" and skipped.body == b"" and skipped.size == 300
    assert dict(skipped.headers) == {
        "subscription": "0",
        "message-id": "2",
        "ack": "A2",
        "destination": "/queue/a",
        "content-length": "300",
    }
    assert (type(third), third.body, third.headers["message-id"]) == (Frame, b"cd", "3")
    # without the flag it stays the fault it always was, after the first frame
    plain = error_of(impl, wire, max_frame_bytes=128)
    _check_limit(plain, "max_frame_bytes", 128)
    assert plain.frames == [first]


def test_skip_oversized_never_buffers_the_body(impl):
    # "without buffering it": fed in chunks, the scanner holds at most a head
    sc = impl.FrameScanner(max_frame_bytes=128, skip_oversized=True)
    head = b"MESSAGE\nsubscription:0\nmessage-id:9\ncontent-length:1000000\n\n"
    assert sc.feed(head) == []
    for _ in range(100):
        assert sc.feed(b"x" * 10000) == []
        assert sc.buffered == 0
    (skipped,) = sc.feed(b"\x00")
    assert type(skipped) is SkippedFrame and skipped.size == 1000000
    assert sc.feed(SKIP_GOOD_3)[0].body == b"cd"


def test_skip_oversized_still_needs_the_nul_after_the_body(impl):
    bad = SKIP_BIG_HEAD + b"y" * 300 + b"z" + SKIP_GOOD_3
    result = error_of(impl, SKIP_GOOD_1 + bad, max_frame_bytes=128, skip_oversized=True)
    assert result.error is RemoteProtocolError
    assert "no NUL after the 300 body bytes" in str(result.exc)
    assert result.exc.offset == len(SKIP_GOOD_1) + len(SKIP_BIG_HEAD) + 300
    assert [f.headers["message-id"] for f in result.frames] == ["1"]


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"MESSAGE\nsubscription:0\nmessage-id:2\n\n" + b"x" * 200 + b"\x00", id="no-content-length"),
        pytest.param(b"SEND\ndestination:/q\ncontent-length:200\n\n" + b"x" * 200 + b"\x00", id="not-a-message"),
        pytest.param(b"ERROR\ncontent-length:200\n\n" + b"x" * 200 + b"\x00", id="error-frame"),
        pytest.param(b"MESSAGE\ncontent-length:%d\n\n\x00" % (2**48 + 1), id="content-length-over-2**48"),
        pytest.param(b"MESSAGE\n" + b"h:" + b"v" * 200 + b"\ncontent-length:1\n\nx\x00", id="head-over-the-limit"),
    ],
)
def test_skip_oversized_leaves_every_other_excess_a_fault(impl, wire):
    # "Any other frame over a limit, and a MESSAGE without content-length, still
    # raises LimitExceededError."
    _check_limit(error_of(impl, SKIP_GOOD_1 + wire, max_frame_bytes=128, skip_oversized=True), "max_frame_bytes", 128)


def test_oversized_message_without_content_length_says_so(impl):
    # The NUL is the only end such a frame has, so the error names what is missing.
    wire = b"MESSAGE\nsubscription:0\nmessage-id:2\n\n" + b"x" * 200 + b"\x00"
    for kwargs in ({}, {"skip_oversized": True}):
        result = error_of(impl, wire, max_frame_bytes=128, **kwargs)
        assert "MESSAGE frame without content-length exceeds max_frame_bytes=128" in str(result.exc)


def test_skip_oversized_is_off_by_default(impl):
    assert impl.FrameScanner().skip_oversized is False
    assert impl.FrameScanner(skip_oversized=True).skip_oversized is True
