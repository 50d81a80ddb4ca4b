"""Run: python fuzz/fuzz_scanners.py -max_total_time=60 [fuzz/corpus/]   (atheris: pip install -e '.[fuzz]')
Feeds each input, cut in two, to the Cython and pure scanners with small limits; replay a crash-* file by
passing it as the argument. Fails on an exception but RemoteProtocolError, a disagreement, or a big .buffered.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from stompfast import _scanner_py
    from stompfast.errors import LimitExceededError, RemoteProtocolError
    from stompfast.frames import COMMANDS, Frame

try:
    if os.environ.get("STOMPFAST_NO_EXTENSIONS"):
        raise ImportError("STOMPFAST_NO_EXTENSIONS is set")
    from stompfast import _scanner_c
except ImportError as exc:  # a pure build: fuzz the pure scanner on its own
    print(f"fuzz_scanners: no Cython scanner ({exc}); fuzzing the pure one alone", file=sys.stderr)
    _scanner_c = None

IMPLS = [m for m in (_scanner_c, _scanner_py) if m is not None]
VERSIONS = ["1.0", "1.1", "1.2"]


def run(impl, chunks, kwargs):
    """Feed the chunks; return (frames, error signature, buffered) and check the invariants."""
    scanner = impl.FrameScanner(**kwargs)
    cap = kwargs["max_frame_bytes"]
    frames = []
    for chunk in chunks:
        try:
            out = scanner.feed(chunk)
        except RemoteProtocolError as exc:
            got = list(exc.frames)
            if not all(type(f) is Frame for f in got):
                raise AssertionError(f"{impl.__name__}: exc.frames holds non-Frames: {got!r}") from exc
            if not isinstance(exc.offset, int):
                raise AssertionError(f"{impl.__name__}: offset {exc.offset!r} is not an int") from exc
            limit = (exc.limit_name, exc.limit) if isinstance(exc, LimitExceededError) else None
            try:
                scanner.feed(b"\n")
            except RemoteProtocolError as again:
                if list(again.frames):
                    raise AssertionError(f"{impl.__name__}: failed scanner returned frames") from None
            else:
                raise AssertionError(f"{impl.__name__}: scanner did not stay failed")
            return frames + got, (type(exc).__name__, limit), None
        if type(out) is not list or not all(type(f) is Frame for f in out):
            raise AssertionError(f"{impl.__name__}: feed() returned {out!r}")
        frames.extend(out)
        if not 0 <= scanner.buffered <= cap:
            raise AssertionError(f"{impl.__name__}: buffered {scanner.buffered} > max_frame_bytes {cap}")
    return frames, None, scanner.buffered


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kwargs = {
        "version": fdp.PickValueInList(VERSIONS),
        "lenient": fdp.ConsumeBool(),
        # small limits, and now and then the largest allowed (a content-length within
        # it must not make the scanner reserve memory)
        "max_frame_bytes": fdp.ConsumeIntInRange(1, 512) if fdp.ConsumeIntInRange(0, 7) else 2**48,
        "max_headers": fdp.ConsumeIntInRange(1, 16),
        "max_header_bytes": fdp.ConsumeIntInRange(1, 256),
    }
    split = fdp.ConsumeIntInRange(0, 0xFFFF)
    payload = fdp.ConsumeBytes(fdp.remaining_bytes())
    split %= len(payload) + 1
    chunks = [payload[:split], payload[split:]]
    results = [run(impl, chunks, kwargs) for impl in IMPLS]
    whole = run(IMPLS[0], [payload], kwargs)
    if whole != results[0]:
        raise AssertionError(
            f"chunking changed the result: whole {whole!r} vs split at {split} {results[0]!r}"
        )
    if len(results) == 2 and results[0] != results[1]:
        raise AssertionError(
            f"scanners disagree on {payload!r} split at {split} with {kwargs}:\n"
            f" c={results[0]!r}\npy={results[1]!r}"
        )


#: libFuzzer dictionary entries (used unless -dict= is given): the tokens of STOMP framing.
TOKENS = [
    *(c.encode() for c in sorted(COMMANDS)),
    b"send", b"Message", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\x00", b"\x00\n", b":", b" ", b"\t",
    b"\\c", b"\\n", b"\\r", b"\\\\", b"\\t", b"content-length:", b"Content-Length: ", b"content-length:0",
    b"content-length:5", b"content-length:99999999999999", b"destination:/queue/a", b"message-id:ID:x:1",
    b"\xc3\xa9", b"\xff", b"\xed\xa0\x80",
]  # fmt: skip


def _with_dictionary(argv: list) -> list:
    """Add the STOMP dictionary unless one is given or files are replayed."""
    if any(arg.startswith("-dict=") for arg in argv) or any(os.path.isfile(arg) for arg in argv[1:]):
        return argv
    path = os.path.join(tempfile.gettempdir(), "stompfast-fuzz.dict")  # one file, rewritten each run
    with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False) as out:
        for token in TOKENS:
            out.write('"' + "".join(f"\\x{b:02x}" for b in token) + '"\n')
    os.replace(out.name, path)
    return [*argv, f"-dict={path}"]


def main() -> None:
    atheris.Setup(_with_dictionary(sys.argv), TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
