"""Shared test helpers: load either scanner, and feed an input every way it can be cut.

Every scanner test input is fed whole, byte by byte and split at every point, and all
the ways must give the same result. :func:`feed_all_ways` does that and returns the
one result, so a test asserts exact expected values once.
"""

from __future__ import annotations

import importlib
import os
import random
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import pytest

from stompfast.errors import LimitExceededError, RemoteProtocolError
from stompfast.frames import Frame, SkippedFrame

# uvloop rounds a timer to whole milliseconds and may fire it up to 1 ms early (measured:
# 0.0496 s for a 0.05 s sleep): a wait that ends that early still waited as long as asked.
TIMER_SLACK = 0.002

IMPL_MODULES = {"c": "stompfast._scanner_c", "py": "stompfast._scanner_py"}

#: Inputs longer than this are split at a sample of points instead of every point,
#: and fed in fixed-size chunks instead of byte by byte.
HUGE = 2048


def no_extensions() -> bool:
    """True when ``STOMPFAST_NO_EXTENSIONS`` asks for a pure build (same rule as _scanner.py)."""
    return bool(os.environ.get("STOMPFAST_NO_EXTENSIONS"))


def load_impl(name: str) -> Any:
    """Import one implementation; the C one fails the test when missing, unless
    ``STOMPFAST_NO_EXTENSIONS`` is set, where it is skipped."""
    if name == "c" and no_extensions():
        pytest.skip("STOMPFAST_NO_EXTENSIONS is set: the Cython scanner is not tested")
    try:
        return importlib.import_module(IMPL_MODULES[name])
    except ImportError as exc:
        pytest.fail(
            f"cannot import {IMPL_MODULES[name]} ({exc}); build it with "
            "`pip install -e . --no-build-isolation` or set STOMPFAST_NO_EXTENSIONS=1",
            pytrace=False,
        )


def available_impls() -> List[Any]:
    """Every implementation that must be tested here (for differential tests)."""
    return [load_impl(name) for name in (("py",) if no_extensions() else ("c", "py"))]


def impl_name(impl: Any) -> str:
    return "c" if impl.__name__.endswith("_c") else "py"


class SetVersion:
    """A step between two byte segments of :func:`feed_all_ways`: ``scanner.version = v``."""

    def __init__(self, version: str) -> None:
        self.version = version

    def __call__(self, scanner: Any) -> None:
        scanner.version = self.version

    def __repr__(self) -> str:
        return f"SetVersion({self.version!r})"


Step = Union[bytes, Callable[[Any], None]]


class Result(NamedTuple):
    """What a scanner made of an input.

    frames: every frame returned by ``feed()`` plus the ``frames`` of the raised error.
    error: the class of the raised ``RemoteProtocolError``, or None.
    exc: the raised exception itself (from the whole-input way), or None.
    buffered: ``scanner.buffered`` after the last feed, or None after an error.
    """

    frames: List[Frame]
    error: Optional[type]
    exc: Optional[RemoteProtocolError]
    buffered: Optional[int]

    def key(self) -> Tuple[Any, ...]:
        limit = None
        if isinstance(self.exc, LimitExceededError):
            limit = (self.exc.limit_name, self.exc.limit)
        # (the types too: a SkippedFrame is equal to a Frame with the same items)
        return (self.frames, [type(f) for f in self.frames], self.error, limit, self.buffered)


def _well_typed(f: Any) -> bool:
    """A Frame whose command and header strings are str and body is bytes (exact types)."""
    if type(f) is SkippedFrame:  # (only from skip_oversized: a MESSAGE with no body)
        return f.command == "MESSAGE" and f.body == b"" and type(f.size) is int
    return (
        type(f) is Frame
        and type(f.command) is str
        and type(f.body) is bytes
        and all(type(n) is str and type(v) is str for n, v in f.header_list)
    )


def run_chunks(impl: Any, steps: Sequence[Any], clobber: bool = False, **scanner_kwargs: Any) -> Result:
    """Feed ``steps`` (chunks, or callables applied to the scanner) to a new scanner.

    Checks the invariants every feed must keep: ``feed()`` returns a list of
    :class:`Frame`, an error's ``frames`` are Frames and its ``offset`` an int inside
    the stream fed so far, and a failed scanner stays failed. With ``clobber`` every
    chunk is fed as a fresh bytearray that is overwritten right after ``feed()``
    returns (the scanner must not keep a reference to the caller's buffer).
    """
    scanner = impl.FrameScanner(**scanner_kwargs)
    frames: List[Frame] = []
    fed = 0
    for step in steps:
        if callable(step):
            step(scanner)
            continue
        chunk = bytearray(step) if clobber else step
        try:
            out = scanner.feed(chunk)
        except RemoteProtocolError as exc:
            assert isinstance(exc.offset, int) and not isinstance(exc.offset, bool), exc.offset
            assert 0 <= exc.offset <= fed + len(step), (exc.offset, fed, len(step))
            got = list(exc.frames)
            assert all(_well_typed(f) for f in got), got
            frames.extend(got)
            # "After an error the scanner is failed: every later feed() raises
            # RemoteProtocolError again, with no frames."
            with pytest.raises(RemoteProtocolError) as again:
                scanner.feed(b"SEND\n\n\x00")
            assert list(again.value.frames) == []
            return Result(frames, type(exc), exc, None)
        finally:
            if clobber:
                chunk[:] = b"\xaa" * len(chunk)
        fed += len(step)
        # "the scanner never buffers more than a limit allows"
        assert 0 <= scanner.buffered <= (scanner_kwargs.get("max_frame_bytes") or 104857600), scanner.buffered
        assert type(out) is list, type(out)
        assert all(_well_typed(f) for f in out), out
        frames.extend(out)
    buffered = scanner.buffered
    assert type(buffered) is int and buffered >= 0, buffered
    return Result(frames, None, None, buffered)


def _segments(data: Union[bytes, bytearray, memoryview, Sequence[Step]]) -> List[Step]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return [bytes(data)]
    return [bytes(s) if isinstance(s, (bytes, bytearray, memoryview)) else s for s in data]


def _split_points(total: int, seed: int) -> Iterable[int]:
    if total <= HUGE:
        return range(total + 1)
    rnd = random.Random(seed)
    edge = set(range(0, 64)) | set(range(total - 64, total + 1))
    return sorted(edge | {rnd.randrange(total + 1) for _ in range(40)})


def feed_all_ways(impl: Any, data: Union[bytes, Sequence[Step]], **scanner_kwargs: Any) -> Result:
    """Feed ``data`` whole, byte by byte, as bytearray and memoryview, in a clobbered
    buffer, and in two chunks split at every point (a sample of points when huge);
    assert that every way gives the same :class:`Result` and return it.

    ``data`` is bytes, or a list of byte segments and :class:`SetVersion` steps (a
    version switch between frames); splitting then happens inside the segments.
    """
    segments = _segments(data)
    blobs = [s for s in segments if not callable(s)]
    total = sum(len(b) for b in blobs)

    def ways() -> Iterable[Tuple[str, List[Any], bool]]:
        yield "whole", list(segments), False
        yield "whole-bytearray", [s if callable(s) else bytearray(s) for s in segments], False
        yield "whole-memoryview", [s if callable(s) else memoryview(b"#" + s)[1:] for s in segments], False
        if total <= HUGE:
            size_sets: Sequence[int] = (1, 3)
        else:
            size_sets = (4093, 65536)
        for size in size_sets:
            steps: List[Any] = []
            for s in segments:
                if callable(s):
                    steps.append(s)
                else:
                    steps.extend(s[i : i + size] for i in range(0, len(s), size))
            yield f"chunks-of-{size}", steps, False
            yield f"chunks-of-{size}-clobbered", steps, True
        for point in _split_points(total, total):
            steps = []
            start = 0
            pending = True
            for s in segments:
                if callable(s):
                    steps.append(s)
                    continue
                if pending and start <= point <= start + len(s):
                    cut = point - start
                    steps.extend([s[:cut], s[cut:]])
                    pending = False
                else:
                    steps.append(s)
                start += len(s)
            yield f"split-at-{point}", steps, False

    reference: Optional[Result] = None
    for name, steps, clobber in ways():
        result = run_chunks(impl, steps, clobber=clobber, **scanner_kwargs)
        if reference is None:
            reference = result
            continue
        assert result.key() == reference.key(), (
            f"{impl_name(impl)}: feeding {name} gives {result.key()!r}, "
            f"whole gives {reference.key()!r}, for input {bytes().join(blobs)[:300]!r}"
        )
    assert reference is not None
    return reference


def frames_of(impl: Any, data: Union[bytes, Sequence[Step]], **scanner_kwargs: Any) -> List[Frame]:
    """The frames of an input that must scan without error (fed all ways)."""
    result = feed_all_ways(impl, data, **scanner_kwargs)
    assert result.error is None, f"unexpected {result.exc!r} for {data!r}"
    return result.frames


def error_of(impl: Any, data: Union[bytes, Sequence[Step]], **scanner_kwargs: Any) -> Result:
    """The result of an input that must fail (fed all ways)."""
    result = feed_all_ways(impl, data, **scanner_kwargs)
    assert result.error is not None, f"no error for {data!r}; got {result.frames!r}"
    return result
