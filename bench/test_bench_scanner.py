"""pytest-benchmark micro benches: frame scanning and encoding, C (``c``) and pure (``py``).

Run: ``python -m pytest bench/test_bench_scanner.py --benchmark-only``. The
``stomppy`` benches in each group are stomp.py's own code on the same input (the
harness of ``scanner_compare.py``), for scale. The one-run comparison with ratios and
targets is ``bench/scanner_compare.py``.
"""

from __future__ import annotations

from typing import Any, Sequence

import pytest
import scanner_compare as sc


def scan_all(mod: Any, chunks: Sequence[bytes]) -> int:
    """One pass: a fresh scanner fed every chunk; returns the number of frames."""
    feed = mod.FrameScanner(version="1.2").feed
    n = 0
    for chunk in chunks:
        n += len(feed(chunk))
    return n


def stomppy_scan_all(chunks: Sequence[bytes]) -> int:
    return sc.stomppy_pass(chunks)()


def _check_frames(mod: Any, chunks: Sequence[bytes], expected: list) -> None:
    frames = sc.ours_collect(mod, chunks)
    assert [(f.command, dict(f.headers), f.body) for f in frames] == expected


@pytest.mark.benchmark(group="scan small frames (2000 x 11 headers + 100 B body, 64 KiB reads)")
def test_scan_small(benchmark: Any, impl: Any, small_stream: sc.Stream) -> None:
    chunks, expected, body_bytes = small_stream
    _check_frames(impl, chunks, expected)
    benchmark.extra_info.update(frames=len(expected), body_bytes=body_bytes)
    assert benchmark(scan_all, impl, chunks) == len(expected)


@pytest.mark.benchmark(group="scan small frames (2000 x 11 headers + 100 B body, 64 KiB reads)")
def test_scan_small_stomppy(benchmark: Any, small_stream: sc.Stream) -> None:
    chunks, expected, body_bytes = small_stream
    benchmark.extra_info.update(frames=len(expected), body_bytes=body_bytes)
    assert benchmark(stomppy_scan_all, chunks) == len(expected)


@pytest.mark.benchmark(group="scan large frames (32 x 64 KiB body, 64 KiB reads)")
def test_scan_large(benchmark: Any, impl: Any, large_stream: sc.Stream) -> None:
    chunks, expected, body_bytes = large_stream
    _check_frames(impl, chunks, expected)
    benchmark.extra_info.update(frames=len(expected), body_bytes=body_bytes)
    assert benchmark(scan_all, impl, chunks) == len(expected)
    benchmark.extra_info["body_gb_per_s_min_time"] = body_bytes / benchmark.stats.stats.min / 1e9


@pytest.mark.benchmark(group="scan large frames (32 x 64 KiB body, 64 KiB reads)")
def test_scan_large_stomppy(benchmark: Any, large_stream: sc.Stream) -> None:
    chunks, expected, body_bytes = large_stream
    benchmark.extra_info.update(frames=len(expected), body_bytes=body_bytes)
    assert benchmark(stomppy_scan_all, chunks) == len(expected)


@pytest.mark.benchmark(group="encode SEND (10 headers + 100 B body)")
def test_encode_send(benchmark: Any, impl: Any) -> None:
    wire = benchmark(impl.encode_frame, "SEND", sc.SEND_HEADERS, sc.SEND_BODY)
    (frame,) = impl.FrameScanner(version="1.2").feed(wire)
    assert frame.command == "SEND" and frame.body == sc.SEND_BODY
    assert dict(frame.headers) == {**sc.SEND_HEADERS, "content-length": str(len(sc.SEND_BODY))}


@pytest.mark.benchmark(group="encode SEND (10 headers + 100 B body)")
def test_encode_send_stomppy(benchmark: Any) -> None:
    proto, transport = sc.stomppy_protocol()
    benchmark(sc.stomppy_encode_full, proto)
    assert transport.last.startswith(b"SEND\n") and transport.last.endswith(sc.SEND_BODY + b"\x00")
