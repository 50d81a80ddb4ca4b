"""stompfast's own HDR histogram (stompfast/loadgen/_hdr.py) against hdrhistogram and Java's HdrHistogram.

The load generator's latency histograms were hdrhistogram's (PyPI, module ``hdrh``); ours
must give the same statistics for the same values, and its encoding (HdrHistogram's V2
compressed format, base64) must be read by hdrhistogram and Java and read theirs, since
workers of an older stompfast still send hdrhistogram's. Where hdrhistogram is installed
it is the reference (random value sets, ``hypothesis``); the encodings pasted below
(hdrhistogram 0.10.8's and Java HdrHistogram 2.2.2's) and the edge cases need nothing.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import warnings
import zlib
from itertools import compress
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, strategies as st

from stompfast.loadgen import histogram
from stompfast.loadgen._hdr import HdrHistogram

MAX = histogram.MAX_LATENCY_US
#: value, count: an empty slot alone (index 1) and between two counts (1026), long runs of
#: them, a count that takes two bytes (200), a million and the top of the range
VALUES = [(0, 3), (2, 1), (1000, 200), (1025, 5), (1027, 1), (10**6, 1), (MAX, 1)]
#: the counts they land at, by index
COUNTS = {0: 3, 2: 1, 1000: 200, 1025: 5, 1027: 1, 11169: 1, 23220: 1}
#: VALUES recorded by hdrhistogram 0.10.8 into HdrHistogram(1, MAX, 3), encode()d: its empty
#: slots as -n, even a single one
HDRH_ENCODED = b"HISTFAAAADN4nJNpmSzMwMAAwiDADKUZQcS1yUsY7D9ABNgYmU7yT2DW52Jk2jmPkWnxHkYmANKFCQY="
#: the same by Java's HdrHistogram 2.2.2 (new Histogram(1, 3600000000L, 3),
#: encodeIntoCompressedByteBuffer, base64): a single empty slot as a count of 0
JAVA_ENCODED = b"HISTFAAAADN4nJNpmSzMwMAAwiDADKUZQcS1yUsY7D9ABNgYmE7yT2DW52Jg2jmPkWnxHkYmANJpCQQ="
#: an empty HdrHistogram(1, MAX, 3) by hdrhistogram 0.10.8
HDRH_EMPTY = b"HISTFAAAABx4nJNpmSzMgADMUJoRRFybvITB/gNEAABQ2gSH"
#: what hdrhistogram 0.10.8 says of VALUES
STATS = {"count": 212, "min": 0, "mean": 16985696.953, "stddev": 246648461.245, "p50": 1000, "p90": 1000,
         "p99": 1027, "p99.9": 3600809983, "p99.99": 3600809983, "max": 3600809983}
PERCENTILES = [0.0, 0.1, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]


def payload(encoded: bytes) -> bytes:
    """The uncompressed V2 payload of ``encoded`` (what is compared: zlib builds may deflate differently)."""
    raw = base64.b64decode(encoded)
    assert raw[:4] == bytes.fromhex("1c849314") and int.from_bytes(raw[4:8], "big") == len(raw) - 8
    return zlib.decompress(raw[8:])


def present(hist: Any) -> Dict[int, int]:
    """The counts that are not 0, by index."""
    counts = hist.counts
    return {index: counts[index] for index in compress(range(len(counts)), counts)}


def summary(hist: Any) -> Tuple[Any, ...]:
    """Everything the load generator reads from a histogram, and the counts (the stddev aside: a float sum)."""
    if isinstance(hist, HdrHistogram):
        at = [hist.get_value_at_percentile(p) for p in PERCENTILES]
    else:
        # hdrhistogram's get_value_at_percentile, in one pass: it walks the counts in Python
        at = [hist.get_percentile_to_value_dict(PERCENTILES).get(p, 0) for p in PERCENTILES]
    return (hist.get_total_count(), hist.get_min_value(), hist.get_max_value(), hist.get_mean_value(), at,
            present(hist))


# -- without hdrhistogram ----------------------------------------------------------------------


@pytest.mark.parametrize("encoded", [HDRH_ENCODED, JAVA_ENCODED], ids=["hdrhistogram", "java"])
def test_decodes_what_hdrhistogram_and_java_encode(encoded: bytes) -> None:
    for given_as in (encoded, encoded.decode("ascii")):
        hist = HdrHistogram.decode(given_as)
        assert (hist.lowest_trackable_value, hist.highest_trackable_value, hist.significant_figures) == (1, MAX, 3)
        assert present(hist) == COUNTS
        assert histogram.percentiles(hist) == STATS


def test_encodes_as_hdrhistogram_does() -> None:
    hist = histogram.new_histogram()
    for value, count in VALUES:
        assert hist.record_value(value, count)
    assert present(hist) == COUNTS and histogram.percentiles(hist) == STATS
    # the very payload hdrhistogram wrote: header, then the counts up to the maximum's
    assert payload(hist.encode()) == payload(HDRH_ENCODED)
    assert present(HdrHistogram.decode(hist.encode())) == COUNTS


def test_empty_histogram() -> None:
    hist = histogram.new_histogram()
    assert (hist.get_total_count(), hist.get_min_value(), hist.get_max_value()) == (0, 0, 0)
    assert (hist.get_mean_value(), hist.get_stddev(), hist.get_value_at_percentile(99)) == (0.0, 0.0, 0)
    assert histogram.percentiles(hist) is None and histogram.percentiles(None) is None
    assert payload(hist.encode()) == payload(HDRH_EMPTY)
    for encoded in (hist.encode(), HDRH_EMPTY):
        back = HdrHistogram.decode(encoded)
        assert back.get_total_count() == 0 and not any(back.counts) and back.get_max_value() == 0
    assert histogram.fold([0] * histogram.COUNTS_LEN).get_total_count() == 0


def test_zero_is_a_value() -> None:
    hist = histogram.new_histogram()
    assert hist.record_value(0, 4)
    assert histogram.percentiles(hist) == {"count": 4, "min": 0, "mean": 0.0, "stddev": 0.0, "p50": 0, "p90": 0,
                                           "p99": 0, "p99.9": 0, "p99.99": 0, "max": 0}
    assert present(HdrHistogram.decode(hist.encode())) == {0: 4}


def test_the_range_and_beyond() -> None:
    # the producer records a lag, and MAX_LATENCY_US (or 0) instead when record_value says False
    hist = histogram.new_histogram()
    assert hist.record_value(MAX)
    assert hist.get_max_value() == 3600809983
    # the last bucket's slots go a little past the highest trackable value, as in HdrHistogram
    top = hist.get_highest_equivalent_value(hist.get_value_from_index(hist.counts_len - 1))
    assert top == 2**32 - 1 and hist.record_value(top)
    assert not hist.record_value(top + 1) and not hist.record_value(-1)
    assert hist.get_total_count() == 2 and hist.get_max_value() == top
    assert histogram.latency_index(MAX) == histogram.COUNTS_LEN - 1 < hist.counts_len
    wider = HdrHistogram(1, 2**40, 3)
    wider.record_value(2**39)
    with pytest.raises(IndexError, match="do not fit"):
        hist.add(wider)
    with pytest.raises(ValueError):
        hist.get_counts_array_index(-1)
    with pytest.raises(ValueError, match="do not fit"):
        hist.add_counts([0] * (hist.counts_len + 1))


@pytest.mark.parametrize("args", [(0, 100, 3), (10, 19, 3), (1, 100, 0), (1, 100, 6)])
def test_impossible_layouts(args: Tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        HdrHistogram(*args)


def test_counts_of_every_varint_length() -> None:
    hist = HdrHistogram(1, 10**12, 2)
    # ZigZag doubles a count: from 2**55 on it takes 9 bytes, the 9th a full byte
    counts = [1, 63, 64, 2**13, 2**20, 2**27, 2**34, 2**41, 2**48, 2**55, 2**62, 2**63 - 1]
    for i, count in enumerate(counts):
        hist.record_value(10**i, count)
    back = HdrHistogram.decode(hist.encode())
    assert back.counts == hist.counts and back.get_total_count() == sum(counts)
    hist.record_value(10**11)
    with pytest.raises(OverflowError):
        hist.encode()


def test_a_trailing_run_of_empty_slots() -> None:
    # record_value(v, 0) moves the maximum alone: the counts up to it end in empty slots
    hist = histogram.new_histogram()
    hist.record_value(5)
    hist.record_value(5000, 0)
    back = HdrHistogram.decode(hist.encode())
    assert present(back) == {5: 1} and back.get_total_count() == 1


@pytest.mark.parametrize("bad", [
    b"not base64!", b"", base64.b64encode(b"\x1c\x84\x93\x14\x00\x00\x00\x05hello"),
    base64.b64encode(bytes.fromhex("1c849314") + (3).to_bytes(4, "big") + b"abcd"),
    base64.b64encode(bytes.fromhex("1c849315") + (2).to_bytes(4, "big") + b"ab"),
])
def test_refuses_what_is_not_an_encoded_histogram(bad: bytes) -> None:
    with pytest.raises(ValueError):
        HdrHistogram.decode(bad)


def _with_payload(data: bytes) -> bytes:
    compressed = zlib.compress(data)
    return base64.b64encode(bytes.fromhex("1c849314") + len(compressed).to_bytes(4, "big") + compressed)


def test_refuses_broken_payloads() -> None:
    good = payload(HDRH_ENCODED)
    header, counts = good[:40], good[40:]
    # a varint cut short
    with pytest.raises(ValueError, match="inside a varint"):
        HdrHistogram.decode(_with_payload(header[:4] + (len(counts) + 1).to_bytes(4, "big") + header[8:]
                                          + counts + b"\x80"))
    # counts beyond the layout's slots: a run of 30,000 empty slots, then a count
    run = bytes([0xDF, 0xD4, 0x03])  # ZigZag LEB128 of -30000
    with pytest.raises(ValueError, match="beyond"):
        HdrHistogram.decode(_with_payload(header[:4] + (4).to_bytes(4, "big") + header[8:] + run + b"\x02"))
    # another cookie
    with pytest.raises(ValueError, match="cookie"):
        HdrHistogram.decode(_with_payload(bytes.fromhex("1c849302") + good[4:]))


def test_add() -> None:
    a, b, both = histogram.new_histogram(), histogram.new_histogram(), histogram.new_histogram()
    for value, count in VALUES[:4]:
        a.record_value(value, count)
        both.record_value(value, count)
    for value, count in VALUES[3:]:
        b.record_value(value, count)
        both.record_value(value, count)
    a.add(b)
    assert summary(a) == summary(both)
    # an empty histogram adds nothing (hdrhistogram 0.10.8 would set the minimum to 0)
    a.add(histogram.new_histogram())
    assert summary(a) == summary(both)
    # another layout: each slot's lowest value recorded
    coarse = HdrHistogram(1, 10**6, 1)
    coarse.record_value(123456, 7)
    a.add(coarse)
    assert a.get_total_count() == both.get_total_count() + 7
    assert a.counts[a.get_counts_array_index(coarse.get_lowest_equivalent_value(123456))] == 7


def test_fold_is_record_value() -> None:
    counts = [0] * histogram.COUNTS_LEN
    recorded = histogram.new_histogram()
    for value, count in VALUES:
        counts[histogram.latency_index(value)] += count
        recorded.record_value(value, count)
    folded = histogram.fold(counts)
    assert summary(folded) == summary(recorded) and payload(folded.encode()) == payload(recorded.encode())
    # the worker reuses its list: the histogram holds a copy
    counts[0] += 1
    assert folded.counts[0] == 3


def test_no_deprecation_warning_and_no_hdrhistogram() -> None:
    code = "import sys, stompfast.loadgen.histogram, stompfast.loadgen; assert 'hdrh' not in sys.modules"
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()


def _values(highest: int, beyond: bool = True, min_size: int = 0) -> st.SearchStrategy[List[Tuple[int, int]]]:
    """value, count pairs in a layout's range (and, with ``beyond``, past it, where record_value says False)."""
    value = st.one_of(st.integers(0, 3000), st.integers(0, 2 * highest if beyond else highest),
                      st.sampled_from([0, 1, 2047, 2048, highest]))
    return st.lists(st.tuples(value, st.integers(1, 300)), min_size=min_size, max_size=80)


#: lowest, highest, significant figures: the load generator's, and others (not too many
#: counts: hdrhistogram walks them in Python); every figure in test_round_trip
LAYOUTS = st.sampled_from([(1, MAX, 3), (1, 10**4, 3), (2, 10**6, 2), (1000, MAX, 1), (1, 10**4, 4)])
ALL_LAYOUTS = st.tuples(st.sampled_from([1, 1, 2, 1000]), st.sampled_from([10**4, 10**6, MAX]), st.integers(1, 5))


@given(ALL_LAYOUTS, st.data())
def test_round_trip(layout: Tuple[int, int, int], data: st.DataObject) -> None:
    lowest, highest, figures = layout
    hist = HdrHistogram(lowest, highest, figures)
    for value, count in data.draw(_values(highest)):
        hist.record_value(value, count)
    back = HdrHistogram.decode(hist.encode())
    assert back.get_stddev() == hist.get_stddev()
    # a decoded maximum is the top of its slot, as in hdrhistogram and Java (recorded, 0 stays 0)
    top = hist.get_highest_equivalent_value(hist.get_max_value()) if hist.get_total_count() else 0
    assert back.get_max_value() == top
    assert summary(back)[3:] == summary(hist)[3:] and summary(back)[:2] == summary(hist)[:2]
    assert payload(back.encode()) == payload(hist.encode())


# -- against hdrhistogram ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> Any:
    """hdrhistogram's HdrHistogram class (the test is skipped without it)."""
    with warnings.catch_warnings():
        # its ctypes structures without _layout_: deprecated by CPython 3.14
        warnings.simplefilter("ignore", DeprecationWarning)
        module = pytest.importorskip("hdrh.histogram")
    return module.HdrHistogram


def _both(reference: Any, layout: Tuple[int, int, int], values: List[Tuple[int, int]]) -> Tuple[Any, Any]:
    ours, theirs = HdrHistogram(*layout), reference(*layout)
    for value, count in values:
        assert ours.record_value(value, count) == theirs.record_value(value, count), value
    return ours, theirs


def assert_same(ours: Any, theirs: Any) -> None:
    assert summary(ours) == summary(theirs)
    assert ours.get_stddev() == pytest.approx(theirs.get_stddev(), rel=1e-12, abs=1e-9)


@given(LAYOUTS, st.data())
def test_same_statistics_as_hdrhistogram(reference: Any, layout: Tuple[int, int, int], data: st.DataObject) -> None:
    ours, theirs = _both(reference, layout, data.draw(_values(layout[1])))
    assert (ours.counts_len, ours.bucket_count, ours.unit_magnitude) == (
        theirs.counts_len, theirs.bucket_count, theirs.unit_magnitude)
    assert_same(ours, theirs)
    assert histogram.percentiles(ours) == histogram.percentiles(theirs)
    for p in data.draw(st.lists(st.floats(0, 100), max_size=2)):
        assert ours.get_value_at_percentile(p) == theirs.get_value_at_percentile(p), p


@given(LAYOUTS, st.data())
def test_encodings_cross(reference: Any, layout: Tuple[int, int, int], data: st.DataObject) -> None:
    ours, theirs = _both(reference, layout, data.draw(_values(layout[1])))
    assert payload(ours.encode()) == payload(theirs.encode())
    # each encoding read by both: the same histogram, with the counts that were recorded
    for encoded in (ours.encode(), theirs.encode()):
        decoded = reference.decode(encoded)
        assert present(decoded) == present(ours)
        assert_same(HdrHistogram.decode(encoded), decoded)


@given(st.data())
def test_add_as_hdrhistogram_does(reference: Any, data: st.DataObject) -> None:
    layout = (1, MAX, 3)
    # not empty: hdrhistogram 0.10.8 sets the minimum to 0 when it adds an empty histogram
    parts = [_both(reference, layout, data.draw(_values(MAX, beyond=False, min_size=1))) for _ in range(3)]
    ours, theirs = _both(reference, layout, [])
    for _, other in parts:
        # what the coordinator does: decode each worker's interval and add it
        ours.add(HdrHistogram.decode(other.encode()))
        theirs.add(other)
    assert_same(ours, theirs)


def test_add_another_layout_as_hdrhistogram_does(reference: Any) -> None:
    values = [(5, 1), (1500, 3), (123456, 7), (999_999, 2)]
    ours, theirs = _both(reference, (1, MAX, 3), VALUES)
    coarse_ours, coarse_theirs = _both(reference, (1, 10**6, 1), values)
    ours.add(coarse_ours)
    theirs.add(coarse_theirs)
    assert_same(ours, theirs)
