"""Property tests: encode -> scan round trips, and the C and pure scanners compared.

Default example counts keep the suite fast; the ``slow`` twins (``--run-slow``) run
many more. ``HYPOTHESIS_PROFILE=slow`` raises the count of every test here.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import pytest
from helpers import load_impl, no_extensions, run_chunks
from hypothesis import assume, given, settings, strategies as st

from stompfast.errors import LocalProtocolError
from stompfast.frames import COMMANDS, Frame

VERSIONS = ["1.0", "1.1", "1.2"]
NEVER_ESCAPED = {"CONNECT", "STOMP", "CONNECTED"}
SLOW = 3000


@pytest.fixture(scope="session")
def both():
    """(c, py): the differential tests need the two; skipped only on a pure build."""
    if no_extensions():
        pytest.skip("STOMPFAST_NO_EXTENSIONS is set: nothing to compare the pure scanner with")
    return load_impl("c"), load_impl("py")


@pytest.fixture(scope="session")
def pure():
    return load_impl("py")


# ------------------------------------------------------------------------- strategies

INTERESTING_CHARS = list(":\\\r\n \tcnrt\x00\x0b\x1c\x85\xa0\u2028\u3000é☃😀")


def header_text(version: str, command: str, *, name: bool) -> st.SearchStrategy[str]:
    """Names or values that ``version`` can express for ``command`` and that come back
    unchanged from the scanner."""
    escaped = version != "1.0" and command not in NEVER_ESCAPED
    banned = {"\x00"}
    if not escaped:
        banned |= {"\n", "\r"}
        if name:
            banned.add(":")
    elif version == "1.1":
        banned.add("\r")
    chars = st.one_of(st.sampled_from(INTERESTING_CHARS), st.characters(exclude_categories=("Cs",))).filter(
        lambda c: c not in banned
    )
    text = st.text(alphabet=chars, min_size=1 if name else 0, max_size=12)
    if name:
        text = st.one_of(st.sampled_from(["destination", "id", "ack", "a", "A", "receipt"]), text)
        text = text.filter(lambda s: s != "content-length")
    if version == "1.0":  # 1.0 peers pad: the scanner strips spaces and tabs
        text = text.filter(lambda s: s == s.strip(" \t"))
    return text


@st.composite
def frames(draw, version: str) -> Frame:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    names = header_text(version, command, name=True)
    values = header_text(version, command, name=False)
    pool = draw(st.lists(names, min_size=1, max_size=4))
    headers = draw(st.lists(st.tuples(st.one_of(st.sampled_from(pool), names), values), max_size=6))
    body = draw(
        st.one_of(st.just(b""), st.binary(max_size=64), st.sampled_from([b"\x00", b"\x00\n\x00", b"\r\n"]))
    )
    return Frame(command, headers, body)


def encode(impl: Any, f: Frame, version: str) -> bytes:
    return impl.encode_frame(f.command, f.header_list, f.body, version=version)


def check_same(got: Frame, sent: Frame) -> None:
    """A scanned frame equals what was encoded (plus the added content-length)."""
    assert got.command == sent.command
    assert got.body == sent.body
    lengths = [v for n, v in got.header_list if n == "content-length"]
    assert lengths == ([str(len(sent.body))] if sent.body else [])
    assert [h for h in got.header_list if h[0] != "content-length"] == sent.header_list
    first = dict(reversed(sent.header_list))  # first of a repeated name wins
    assert {name: got.headers[name] for name in first} == first


def cut(data: bytes, points: Sequence[int]) -> List[bytes]:
    points = sorted({p % (len(data) + 1) for p in points})
    out, start = [], 0
    for p in points:
        out.append(data[start:p])
        start = p
    out.append(data[start:])
    return out


SEPARATORS = st.sampled_from([b"", b"\n", b"\r\n", b"\n\n\r\n"])


@st.composite
def streams(draw, version: str):
    sent = draw(st.lists(frames(version), min_size=1, max_size=4))
    seps = draw(st.lists(SEPARATORS, min_size=len(sent), max_size=len(sent)))
    points = draw(st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
    return sent, seps, points


# ------------------------------------------------------------------------- round trips


def _round_trip(impl: Any, encoder: Any, version: str, data: Tuple) -> None:
    sent, seps, points = data
    wire = b"".join(encode(encoder, f, version) + sep for f, sep in zip(sent, seps))
    result = run_chunks(impl, cut(wire, points), version=version)
    assert result.error is None, result.exc
    assert result.buffered == 0
    assert len(result.frames) == len(sent)
    for got, f in zip(result.frames, sent):
        check_same(got, f)


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_round_trip(impl, version, data):
    _round_trip(impl, impl, version, data.draw(streams(version)))


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=SLOW)
@given(data=st.data())
def test_round_trip_slow(impl, version, data):
    _round_trip(impl, impl, version, data.draw(streams(version)))


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_encoders_agree_and_cross_round_trip(both, version, data):
    c, py = both
    sent, seps, points = data.draw(streams(version))
    for f in sent:
        assert encode(c, f, version) == encode(py, f, version)
    _round_trip(c, py, version, (sent, seps, points))
    _round_trip(py, c, version, (sent, seps, points))


HEADER_ANY = st.text(
    alphabet=st.one_of(st.sampled_from(INTERESTING_CHARS), st.characters(exclude_categories=("Cs",))),
    max_size=6,
)


@pytest.mark.parametrize("version", VERSIONS)
@given(
    command=st.one_of(st.sampled_from(sorted(COMMANDS)), st.text(max_size=8)),
    headers=st.lists(st.tuples(HEADER_ANY, st.one_of(HEADER_ANY, st.integers(-5, 10**6))), max_size=4),
    body=st.binary(max_size=8),
)
def test_encoders_agree_on_anything(both, version, command, headers, body):
    out = []
    for impl in both:
        try:
            out.append(("ok", impl.encode_frame(command, headers, body, version=version)))
        except LocalProtocolError:
            out.append(("refused", None))
    assert out[0] == out[1], (command, headers, body)


# ------------------------------------------------------------------------- differential: C vs pure

TOKENS = [
    *(c.encode() for c in sorted(COMMANDS)),
    b"send",
    b"Message",
    b"FOO",
    b"\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\n\n",
    b"\x00",
    b"\x00",
    b":",
    b"\\",
    b"\\c",
    b"\\n",
    b"\\r",
    b"\\\\",
    b"\\t",
    b" ",
    b"\t",
    b"  ",
    b"content-length:",
    b"content-length: ",
    b"Content-Length:",
    b"0",
    b"1",
    b"3",
    b"10",
    b"007",
    b"99999999999999999999",
    b"99999999999999",
    b"4294967296",
    b"18446744073709551616",
    b"-1",
    b"+2",
    b"destination:/queue/a",
    b"id:1",
    b"a:b",
    b"k",
    b"v",
    "é☃".encode(),
    b"\xff",
    b"\xc3",
    b"\xe2\x98",
    b"\xed\xa0\x80",
    b"\xc0\x80",
]

GARBAGE = st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=3)), max_size=40).map(
        b"".join
    ),
)

LINE_ENDS = st.sampled_from([b"\n", b"\n", b"\r\n", b"\r", b" \n", b"\r\r\n"])
NAMES = st.sampled_from(
    [
        b"content-length",
        b"content-length",
        b"Content-Length",
        b"a",
        b"destination",
        b"a\\c",
        b"",
        b"k\\t",
        b" a",
        "é".encode(),
        b"\xff",
    ]
)
VALUES = st.one_of(
    st.sampled_from(
        [
            b"0",
            b"1",
            b"3",
            b"007",
            b" 3",
            b"3 ",
            b"+3",
            b"99999999999999",
            b"18446744073709551616",
            b"x\\ny",
            b"\\",
            b"a:b",
            b"",
            b"\\r",
            b"\\c",
        ]
    ),
    st.binary(max_size=4),
)


@st.composite
def almost_frames(draw):
    """Streams of nearly valid frames: real commands and headers, odd EOLs and values."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        parts.append(draw(st.sampled_from([b"", b"\n", b"\r\n", b" \n", b"\r"])))
        parts.append(
            draw(st.sampled_from([c.encode() for c in sorted(COMMANDS)] + [b"send", b"SEND ", b"BOGUS"]))
        )
        parts.append(draw(LINE_ENDS))
        for _ in range(draw(st.integers(0, 4))):
            parts += [draw(NAMES), draw(st.sampled_from([b":", b":", b""])), draw(VALUES), draw(LINE_ENDS)]
        parts.append(draw(LINE_ENDS))
        parts.append(
            draw(st.one_of(st.binary(max_size=8), st.sampled_from([b"abc", b"a\x00c", b"\x00\x00\x00"])))
        )
        parts.append(draw(st.sampled_from([b"\x00", b"\x00", b""])))
    return b"".join(parts)


LIMITS = st.fixed_dictionaries(
    {},
    optional={
        "max_frame_bytes": st.one_of(st.integers(1, 300), st.just(2**48)),
        "max_headers": st.integers(1, 8),
        "max_header_bytes": st.integers(1, 120),
    },
)

OPTIONS = st.fixed_dictionaries(
    {"version": st.sampled_from(VERSIONS), "lenient": st.booleans(), "skip_oversized": st.booleans()}
)


@st.composite
def mutated(draw):
    """A valid encoded stream with a few byte flips, insertions, deletions, truncations."""
    version = draw(st.sampled_from(VERSIONS))
    sent = draw(st.lists(frames(version), min_size=1, max_size=3))
    seps = draw(st.lists(SEPARATORS, min_size=len(sent), max_size=len(sent)))
    py = load_impl("py")
    data = bytearray(b"".join(encode(py, f, version) + s for f, s in zip(sent, seps)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "insert-token", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0, 10, 13, 32, 58, 92, 0xFF, ord("c"), ord("n"), ord("r")]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif op == "insert-token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif op == "delete" and data:
            data[at : at + draw(st.integers(1, 4))] = b""
        elif op == "truncate":
            del data[at:]
    return version, bytes(data)


def compare(both: Sequence[Any], data: bytes, points: Sequence[int], kwargs: dict) -> None:
    """Both scanners give the same frames, the same error class and limit, and the
    same buffered count; neither ever holds more than max_frame_bytes."""
    chunks = cut(data, points)
    results = []
    for impl in both:
        results.append(run_chunks(impl, chunks, **kwargs))
        # the same input fed whole gives the same result on one implementation
        assert run_chunks(impl, [data], **kwargs).key() == results[-1].key()
    c, py = results
    assert c.key() == py.key(), f"c={c.key()!r} py={py.key()!r} input={data!r} chunks={chunks!r} {kwargs}"


def bounded(impl: Any, data: bytes, points: Sequence[int], kwargs: dict) -> None:
    """Fed in chunks, the scanner never holds more than its limits allow."""
    sc = impl.FrameScanner(**kwargs)
    cap = kwargs.get("max_frame_bytes", 104857600)
    for chunk in cut(data, points):
        try:
            sc.feed(chunk)
        except Exception as exc:
            from stompfast.errors import RemoteProtocolError

            assert isinstance(exc, RemoteProtocolError), repr(exc)
            return
        assert sc.buffered <= cap, (sc.buffered, cap)


@given(data=GARBAGE, points=st.lists(st.integers(0, 400), max_size=5), options=OPTIONS, limits=LIMITS)
def test_differential_random_bytes(both, data, points, options, limits):
    compare(both, data, points, {**options, **limits})


@given(data=almost_frames(), points=st.lists(st.integers(0, 400), max_size=5), options=OPTIONS, limits=LIMITS)
def test_differential_almost_frames(both, data, points, options, limits):
    compare(both, data, points, {**options, **limits})


@pytest.mark.slow
@settings(max_examples=SLOW)
@given(data=almost_frames(), points=st.lists(st.integers(0, 400), max_size=5), options=OPTIONS, limits=LIMITS)
def test_differential_almost_frames_slow(both, data, points, options, limits):
    compare(both, data, points, {**options, **limits})


@given(case=mutated(), points=st.lists(st.integers(0, 400), max_size=5), lenient=st.booleans(), limits=LIMITS)
def test_differential_mutated_streams(both, case, points, lenient, limits):
    version, data = case
    compare(both, data, points, {"version": version, "lenient": lenient, **limits})


@given(case=mutated(), points=st.lists(st.integers(0, 400), max_size=5), limits=LIMITS)
def test_differential_random_limits_on_valid_streams(both, case, points, limits):
    version, data = case
    assume(data)
    compare(both, data, points, {"version": version, **limits})


@given(data=GARBAGE, points=st.lists(st.integers(0, 400), max_size=8), options=OPTIONS, limits=LIMITS)
def test_never_holds_more_than_the_frame_limit(impl, data, points, options, limits):
    bounded(impl, data, points, {**options, **limits})


@pytest.mark.slow
@settings(max_examples=SLOW)
@given(data=GARBAGE, points=st.lists(st.integers(0, 400), max_size=5), options=OPTIONS, limits=LIMITS)
def test_differential_random_bytes_slow(both, data, points, options, limits):
    compare(both, data, points, {**options, **limits})


@pytest.mark.slow
@settings(max_examples=SLOW)
@given(case=mutated(), points=st.lists(st.integers(0, 400), max_size=5), lenient=st.booleans(), limits=LIMITS)
def test_differential_mutated_streams_slow(both, case, points, lenient, limits):
    version, data = case
    compare(both, data, points, {"version": version, "lenient": lenient, **limits})
