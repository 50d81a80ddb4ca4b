"""An HDR histogram in pure Python: HdrHistogram's bucket layout, arithmetic and V2 wire format.

:class:`HdrHistogram` gives the results of hdrhistogram 0.10.8 (PyPI, module ``hdrh``)
for the same recorded values, under the same method names, and encodes to the same
bytes: HdrHistogram's V2 compressed format, base64, which hdrhistogram, Java's
HdrHistogram and HistogramLogAnalyzer decode. It decodes what they encode. Only
:mod:`struct`, :mod:`zlib` and :mod:`base64`: hdrhistogram's codec declares ctypes
structures that CPython 3.14 deprecates.

The layout: with ``half = 2**HALF_MAGNITUDE`` sub-buckets per half bucket, values below
``2 * half`` (times the unit) have a slot each; above, bucket ``b`` holds ``[half, 2 * half)
<< b`` in ``half`` slots of width ``2**b``, so every slot is within ``10**-figures`` of its
values. A value's counts index is
``((b + 1) << HALF_MAGNITUDE) + (value >> b) - half`` with
``b = bit_length(value | SUB_MASK) - (HALF_MAGNITUDE + 1)`` (unit 1).

Wire format (big-endian): ``cookie 0x1c849314, length`` then the zlib-deflated payload:
``cookie 0x1c849313, payload length, normalizing index offset (0), significant figures,
lowest, highest (8 bytes each), integer-to-double ratio (a double, 1.0)`` and the counts
up to the maximum's index as ZigZag LEB128 varints (at most 9 bytes, the 9th a full
byte), a run of ``n`` empty slots written as ``-n``.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import sys
import zlib
from itertools import compress
from typing import Dict, Iterable, Iterator, List, Sequence, Union

#: the V2 cookies (the 0x10 bit: varint counts), matched without their word-size nibble
_ENCODING_COOKIE = 0x1C849303 | 0x10
_COMPRESSION_COOKIE = 0x1C849304 | 0x10
_COOKIE_BASE_MASK = ~0xF0
_OUTER = struct.Struct(">II")
_PAYLOAD = struct.Struct(">IIIIQQd")
# a count must fit a signed 64-bit integer once ZigZag-encoded
_MAX_COUNT = (1 << 63) - 1


class HdrHistogram:
    """Counts of integer values from 0 to about ``highest_trackable_value`` at ``significant_figures``.

    A value is counted in the slot of the values equivalent to it (within
    ``10**-significant_figures`` of it); the statistics are those of the slots.
    ``counts`` holds them by index (``counts_len`` of them), ``total_count`` their sum,
    ``min_value`` and ``max_value`` the smallest and largest value recorded
    (``sys.maxsize`` and 0 while empty); read them with the methods.

    Raises:
        ValueError: ``lowest_trackable_value`` below 1, ``highest_trackable_value`` below
            twice that, or ``significant_figures`` not from 1 to 5.
    """

    def __init__(self, lowest_trackable_value: int, highest_trackable_value: int, significant_figures: int) -> None:
        if lowest_trackable_value < 1:
            raise ValueError(f"lowest_trackable_value must be at least 1, not {lowest_trackable_value}")
        if highest_trackable_value < 2 * lowest_trackable_value:
            raise ValueError(f"highest_trackable_value must be at least twice lowest_trackable_value"
                             f" ({lowest_trackable_value}), not {highest_trackable_value}")
        if not 1 <= significant_figures <= 5:
            raise ValueError(f"significant_figures must be from 1 to 5, not {significant_figures}")
        self.lowest_trackable_value = lowest_trackable_value
        self.highest_trackable_value = highest_trackable_value
        self.significant_figures = significant_figures
        # floor(log2) in floats, as HdrHistogram computes it (its layout is what must match)
        self.unit_magnitude = int(math.floor(math.log(lowest_trackable_value) / math.log(2)))
        sub_bucket_count_magnitude = int(math.ceil(math.log(2 * 10**significant_figures) / math.log(2)))
        self.sub_bucket_half_count_magnitude = max(sub_bucket_count_magnitude, 1) - 1
        self.sub_bucket_count = 1 << (self.sub_bucket_half_count_magnitude + 1)
        self.sub_bucket_half_count = self.sub_bucket_count // 2
        self.sub_bucket_mask = (self.sub_bucket_count - 1) << self.unit_magnitude
        self.bucket_count = _buckets_needed(highest_trackable_value, self.sub_bucket_count, self.unit_magnitude)
        self.counts_len = (self.bucket_count + 1) * self.sub_bucket_half_count
        self.counts: List[int] = [0] * self.counts_len
        self.total_count = 0
        self.min_value = sys.maxsize
        self.max_value = 0
        # kept from a decoded histogram and written back by encode() (1.0: integer values)
        self.int_to_double_conversion_ratio = 1.0
        # bit_length(value | sub_bucket_mask) - _shift is the bucket of a value
        self._shift = self.unit_magnitude + self.sub_bucket_half_count_magnitude + 1

    def __repr__(self) -> str:
        return (f"HdrHistogram({self.lowest_trackable_value}, {self.highest_trackable_value},"
                f" {self.significant_figures}, total_count={self.total_count})")

    # -- the layout -------------------------------------------------------------------------

    def get_counts_array_index(self, value: int) -> int:
        """The counts index of ``value`` (``counts_len`` or more: beyond the range)."""
        if value < 0:
            raise ValueError(f"a histogram value cannot be negative: {value}")
        bucket = (value | self.sub_bucket_mask).bit_length() - self._shift
        return (((bucket + 1) << self.sub_bucket_half_count_magnitude)
                + (value >> (bucket + self.unit_magnitude)) - self.sub_bucket_half_count)

    def get_value_from_index(self, index: int) -> int:
        """The lowest value counted at ``index``."""
        bucket = (index >> self.sub_bucket_half_count_magnitude) - 1
        sub_bucket = (index & (self.sub_bucket_half_count - 1)) + self.sub_bucket_half_count
        if bucket < 0:
            sub_bucket -= self.sub_bucket_half_count
            bucket = 0
        return sub_bucket << (bucket + self.unit_magnitude)

    def _slot_width(self, index: int) -> int:
        return 1 << (self.unit_magnitude + max((index >> self.sub_bucket_half_count_magnitude) - 1, 0))

    def get_lowest_equivalent_value(self, value: int) -> int:
        """The lowest value counted in the same slot as ``value``."""
        bucket = (value | self.sub_bucket_mask).bit_length() - self._shift
        return (value >> (bucket + self.unit_magnitude)) << (bucket + self.unit_magnitude)

    def get_highest_equivalent_value(self, value: int) -> int:
        """The highest value counted in the same slot as ``value``."""
        bucket = (value | self.sub_bucket_mask).bit_length() - self._shift
        shift = bucket + self.unit_magnitude
        return ((value >> shift) << shift) + (1 << shift) - 1

    def get_count_at_index(self, index: int) -> int:
        return self.counts[index]

    # -- recording --------------------------------------------------------------------------

    def record_value(self, value: int, count: int = 1) -> bool:
        """Count ``value`` ``count`` times; False (nothing recorded) when it is negative or beyond the counts.

        Values up to the top of the last bucket are recorded (a little more than
        ``highest_trackable_value``), as HdrHistogram does.
        """
        if value < 0:
            return False
        bucket = (value | self.sub_bucket_mask).bit_length() - self._shift
        index = (((bucket + 1) << self.sub_bucket_half_count_magnitude)
                 + (value >> (bucket + self.unit_magnitude)) - self.sub_bucket_half_count)
        if index >= self.counts_len:
            return False
        self.counts[index] += count
        self.total_count += count
        if value < self.min_value:
            self.min_value = value
        if value > self.max_value:
            self.max_value = value
        return True

    def add_counts(self, counts: Sequence[int]) -> None:
        """Add ``counts`` (by counts index, at most ``counts_len`` of them) to this histogram's.

        Into an empty histogram this is a copy: how a worker's interval, counted by
        index, becomes a histogram.
        """
        n = len(counts)
        if n > self.counts_len:
            raise ValueError(f"{n} counts do not fit a histogram of {self.counts_len}")
        present = list(compress(range(n), counts))
        if not present:
            return
        if self.total_count:
            mine = self.counts
            for index in present:
                mine[index] += counts[index]
        else:
            self.counts[:n] = counts
        self.total_count += sum(counts)
        self._track(present[0], present[-1])

    def _track(self, first: int, last: int) -> None:
        """Widen ``min_value`` and ``max_value`` to the slots at ``first`` and ``last`` (counts indexes)."""
        self.min_value = min(self.min_value, self.get_value_from_index(first))
        self.max_value = max(self.max_value, self.get_highest_equivalent_value(self.get_value_from_index(last)))

    def add(self, other: HdrHistogram) -> None:
        """Add ``other``'s counts to this histogram's (an empty ``other`` changes nothing).

        Raises:
            IndexError: ``other`` holds values beyond this histogram's range.
        """
        top = self.get_highest_equivalent_value(self.get_value_from_index(self.counts_len - 1))
        if top < other.get_max_value():
            raise IndexError(f"the other histogram holds values that do not fit: {top} < {other.get_max_value()}")
        if not other.total_count:
            return
        theirs = other.counts
        present = compress(range(other.counts_len), theirs)
        if (self.unit_magnitude, self.sub_bucket_count, self.counts_len) == (
                other.unit_magnitude, other.sub_bucket_count, other.counts_len):
            mine = self.counts
            for index in present:
                mine[index] += theirs[index]
            self.total_count += other.total_count
            self.min_value = min(self.min_value, other.get_min_value())
            self.max_value = max(self.max_value, other.get_max_value())
        else:
            for index in present:
                self.record_value(other.get_value_from_index(index), theirs[index])

    # -- statistics -------------------------------------------------------------------------

    def get_total_count(self) -> int:
        return self.total_count

    def get_min_value(self) -> int:
        """The lowest value of the lowest slot counted (0 when empty)."""
        if self.counts[0] > 0 or self.total_count == 0:
            return 0
        if self.min_value == sys.maxsize:
            return sys.maxsize
        return self.get_lowest_equivalent_value(self.min_value)

    def get_max_value(self) -> int:
        """The highest value of the highest slot counted (0 when empty)."""
        if self.max_value == 0:
            return 0
        return self.get_highest_equivalent_value(self.max_value)

    def _present(self) -> Iterator[int]:
        """The indexes of the counts that are not 0, in order."""
        return compress(range(self.counts_len), self.counts)

    def get_mean_value(self) -> float:
        """The mean of the slots' middle values, weighted by their counts (0.0 when empty)."""
        if not self.total_count:
            return 0.0
        counts = self.counts
        value_at = self.get_value_from_index
        width = self._slot_width
        total = 0
        for index in self._present():
            total += counts[index] * (value_at(index) + (width(index) >> 1))
        return float(total) / self.total_count

    def get_stddev(self) -> float:
        """The standard deviation of the slots' middle values, weighted by their counts (0.0 when empty)."""
        if not self.total_count:
            return 0.0
        mean = self.get_mean_value()
        counts = self.counts
        value_at = self.get_value_from_index
        width = self._slot_width
        # summed in HdrHistogram's order, so the float result is the same to the last bit
        geometric_dev_total = 0.0
        for index in self._present():
            dev = (value_at(index) + (width(index) >> 1)) * 1.0 - mean
            geometric_dev_total += (dev * dev) * counts[index]
        return math.sqrt(geometric_dev_total / self.total_count)

    def get_target_count_at_percentile(self, percentile: float) -> int:
        count = int((min(percentile, 100.0) * self.total_count / 100) + 0.5)
        return max(count, 1)

    def get_value_at_percentile(self, percentile: float) -> int:
        """The highest value of the slot that holds ``percentile`` (0 to 100) of the counts (0 when empty).

        At percentile 0: the lowest value of the lowest slot counted.
        """
        return self.get_percentile_to_value_dict((percentile,)).get(percentile, 0)

    def get_percentile_to_value_dict(self, percentile_list: Iterable[float]) -> Dict[float, int]:
        """:meth:`get_value_at_percentile` of each percentile, in one pass (empty histogram: {})."""
        wanted = sorted(set(percentile_list))
        result: Dict[float, int] = {}
        if not self.total_count or not wanted:
            return result
        counts = self.counts
        at = 0
        target = self.get_target_count_at_percentile(wanted[0])
        running = 0
        for index in self._present():
            running += counts[index]
            while running >= target:
                value = self.get_value_from_index(index)
                percentile = wanted[at]
                result[percentile] = self.get_highest_equivalent_value(value) if percentile else value
                at += 1
                if at == len(wanted):
                    return result
                target = self.get_target_count_at_percentile(wanted[at])
        return result

    # -- the wire format --------------------------------------------------------------------

    def encode(self) -> bytes:
        """This histogram in HdrHistogram's V2 compressed format, base64 (ASCII bytes)."""
        limit = self.get_counts_array_index(self.max_value) + 1 if self.total_count else 0
        counts = self.counts
        out = bytearray()
        put = out.append
        previous = -1
        for index in compress(range(limit), counts):
            zeros = index - previous - 1
            if zeros:
                # ZigZag of -zeros; hdrhistogram writes a single empty slot as -1 too
                _put_varint(out, 2 * zeros - 1)
            count = counts[index]
            if count > _MAX_COUNT:
                raise OverflowError(f"a count of {count} does not fit the wire format (63 bits)")
            zigzag = count << 1
            if zigzag < 0x80:
                put(zigzag)
            else:
                _put_varint(out, zigzag)
            previous = index
        # empty slots up to the maximum's (record_value(v, 0) moves the maximum alone)
        if limit - previous - 1 > 0:
            _put_varint(out, 2 * (limit - previous - 1) - 1)
        header = _PAYLOAD.pack(_ENCODING_COOKIE, len(out), 0, self.significant_figures, self.lowest_trackable_value,
                               self.highest_trackable_value, self.int_to_double_conversion_ratio)
        compressed = zlib.compress(header + out)
        return base64.b64encode(_OUTER.pack(_COMPRESSION_COOKIE, len(compressed)) + compressed)

    @classmethod
    def decode(cls, encoded: Union[bytes, str]) -> HdrHistogram:
        """A histogram from HdrHistogram's V2 compressed format, base64 (what :meth:`encode` and hdrhistogram give).

        Raises:
            ValueError: ``encoded`` is not that format (bad base64, cookie, length,
                compression or counts).
        """
        try:
            raw = base64.b64decode(encoded)
        except binascii.Error as exc:
            raise ValueError(f"not an encoded histogram: {exc}") from None
        if len(raw) < _OUTER.size:
            raise ValueError(f"not an encoded histogram: {len(raw)} bytes")
        cookie, length = _OUTER.unpack_from(raw)
        if cookie & _COOKIE_BASE_MASK != _COMPRESSION_COOKIE & _COOKIE_BASE_MASK:
            raise ValueError(f"not an encoded histogram: cookie {cookie:#x}")
        if length != len(raw) - _OUTER.size:
            raise ValueError(f"encoded histogram of {len(raw) - _OUTER.size} bytes says {length}")
        try:
            data = zlib.decompress(raw[_OUTER.size:])
        except zlib.error as exc:
            raise ValueError(f"encoded histogram does not decompress: {exc}") from None
        if len(data) < _PAYLOAD.size:
            raise ValueError(f"encoded histogram payload of {len(data)} bytes")
        cookie, payload_len, offset, figures, lowest, highest, ratio = _PAYLOAD.unpack_from(data)
        if cookie & _COOKIE_BASE_MASK != _ENCODING_COOKIE & _COOKIE_BASE_MASK:
            raise ValueError(f"encoded histogram payload cookie {cookie:#x} is not V2")
        if payload_len > len(data) - _PAYLOAD.size:
            raise ValueError(f"encoded histogram counts of {len(data) - _PAYLOAD.size} bytes say {payload_len}")
        if offset:
            raise ValueError(f"encoded histogram has a normalizing index offset ({offset}): not supported")
        hist = cls(lowest, highest, figures)
        hist.int_to_double_conversion_ratio = ratio
        hist.add_counts(_read_counts(data, _PAYLOAD.size, _PAYLOAD.size + payload_len, hist.counts_len))
        return hist


def _read_counts(data: bytes, start: int, end: int, counts_len: int) -> List[int]:
    """The ``counts_len`` counts written as varints in ``data[start:end]``."""
    counts = [0] * counts_len
    index = 0
    i = start
    try:
        while i < end:
            byte = data[i]
            i += 1
            value = byte
            if byte >= 0x80:
                value &= 0x7F
                shift = 7
                while True:
                    byte = data[i]
                    i += 1
                    if shift == 56:
                        # the 9th byte: 8 bits, no continuation
                        value |= byte << 56
                        break
                    value |= (byte & 0x7F) << shift
                    if byte < 0x80:
                        break
                    shift += 7
            if value & 1:
                # -n: n empty slots
                index += (value >> 1) + 1
                continue
            if index >= counts_len:
                raise ValueError(f"encoded histogram has counts beyond its {counts_len} slots")
            counts[index] = value >> 1
            index += 1
    except IndexError:
        raise ValueError("encoded histogram counts end inside a varint") from None
    if i != end:
        raise ValueError("encoded histogram counts end inside a varint")
    return counts


def _put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (0 to 2**64 - 1) as LEB128 of at most 9 bytes, the 9th a full byte."""
    for _ in range(8):
        if value < 0x80:
            break
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _buckets_needed(highest: int, sub_bucket_count: int, unit_magnitude: int) -> int:
    """How many buckets cover 0 to ``highest``."""
    smallest_untrackable = sub_bucket_count << unit_magnitude
    needed = 1
    while smallest_untrackable <= highest:
        if smallest_untrackable > sys.maxsize // 2:
            return needed + 1
        smallest_untrackable <<= 1
        needed += 1
    return needed
