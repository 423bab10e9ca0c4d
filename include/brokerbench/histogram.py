"""Mergeable log-bucketed latency histograms (HdrHistogram layout).

Values are non-negative integers in one unit (brokerbench records latencies in
microseconds). The bucket layout is HdrHistogram's with 3 significant decimal
digits: every value lands in a bucket whose width is at most 1/1024 of its
value, so a percentile read from the histogram is within 0.1 % of the exact
one. Buckets are identified by their *highest equivalent value*, the number
HdrHistogram itself reports for a percentile. Because bucket boundaries are
fixed, histograms from any number of workers and intervals merge exactly by
adding counts per bucket: that is how Spark merges them (group by bucket, sum).

The hot path never touches this module: the worker appends raw integers to a
plain list and converts the list here once per interval (vectorised, numpy).

Values outside ``[0, max_value]`` are not errors: negative values (possible
for end-to-end latency when clocks of two hosts disagree) are counted in
``negative`` and values above the range in ``overflow``; neither is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

SIGNIFICANT_DIGITS = 3
#: HdrHistogram for 3 significant digits: 2048 sub-buckets, half of them 1024.
SUB_BUCKET_HALF_COUNT_MAGNITUDE = 10
SUB_BUCKET_MASK = (1 << (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1)) - 1  # 2047
#: One hour in microseconds: anything slower is counted as overflow.
DEFAULT_MAX_VALUE = 3_600_000_000


def bucket_keys(values: np.ndarray) -> np.ndarray:
    """Highest equivalent value of the bucket of each value (int64 array).

    ``values`` must be non-negative integers below 2**52 (exact in float64).
    """
    v = np.asarray(values, dtype=np.int64)
    # bit length of (v | 2047): frexp's exponent is exact for integers < 2**53
    bit_length = np.frexp((v | SUB_BUCKET_MASK).astype(np.float64))[1].astype(np.int64)
    bucket_index = bit_length - (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1)
    lowest = (v >> bucket_index) << bucket_index
    return lowest + (np.int64(1) << bucket_index) - 1


def bucket_key(value: int) -> int:
    """Scalar form of :func:`bucket_keys`."""
    bucket_index = (value | SUB_BUCKET_MASK).bit_length() - (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1)
    return ((value >> bucket_index) << bucket_index) + (1 << bucket_index) - 1


@dataclass
class LogHistogram:
    """Sparse histogram: bucket key -> count, plus exact count/min/max/sum."""

    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0  # values inside the range (what percentiles are taken of)
    total: int = 0  # exact sum of the in-range values, for the mean
    min: int | None = None
    max: int | None = None
    overflow: int = 0
    negative: int = 0
    max_value: int = DEFAULT_MAX_VALUE

    @classmethod
    def from_values(cls, values: Sequence[int] | np.ndarray, max_value: int = DEFAULT_MAX_VALUE) -> "LogHistogram":
        h = cls(max_value=max_value)
        h.record_many(values)
        return h

    def record_many(self, values: Sequence[int] | np.ndarray) -> None:
        if len(values) == 0:
            return
        v = np.asarray(values, dtype=np.int64)
        negative = v < 0
        over = v > self.max_value
        self.negative += int(negative.sum())
        self.overflow += int(over.sum())
        v = v[~(negative | over)]
        if v.size == 0:
            return
        keys, counts = np.unique(bucket_keys(v), return_counts=True)
        for k, c in zip(keys.tolist(), counts.tolist()):
            self.counts[k] = self.counts.get(k, 0) + c
        self.count += int(v.size)
        self.total += int(v.sum())
        vmin, vmax = int(v.min()), int(v.max())
        self.min = vmin if self.min is None else min(self.min, vmin)
        self.max = vmax if self.max is None else max(self.max, vmax)

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        for k, c in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + c
        self.count += other.count
        self.total += other.total
        self.overflow += other.overflow
        self.negative += other.negative
        if other.min is not None:
            self.min = other.min if self.min is None else min(self.min, other.min)
        if other.max is not None:
            self.max = other.max if self.max is None else max(self.max, other.max)
        return self

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def percentile(self, pct: float) -> int | None:
        """Value at percentile ``pct`` (0..100), HdrHistogram semantics.

        Returns the highest equivalent value of the bucket holding the
        ceil(pct/100 * count)-th smallest value; the exact max for 100.
        """
        if not self.count:
            return None
        if pct >= 100:
            return self.max
        rank = max(1, int(np.ceil(pct / 100.0 * self.count)))
        seen = 0
        for k in sorted(self.counts):
            seen += self.counts[k]
            if seen >= rank:
                # a bucket's key can exceed the exact max: never report more
                return min(k, self.max) if self.max is not None else k
        return self.max

    def percentiles(self, pcts: Iterable[float]) -> dict[float, int | None]:
        return {p: self.percentile(p) for p in pcts}

    # -- serialisation (see docs/results-format.md) -------------------------
    def to_dict(self) -> dict:
        keys = sorted(self.counts)
        return {
            "count": self.count,
            "sum": self.total,
            "min": self.min,
            "max": self.max,
            "overflow": self.overflow,
            "negative": self.negative,
            "max_value": self.max_value,
            "buckets": keys,
            "counts": [self.counts[k] for k in keys],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "LogHistogram":
        return cls(
            counts=dict(zip(d.get("buckets", []), d.get("counts", []))),
            count=d.get("count", 0),
            total=d.get("sum", 0),
            min=d.get("min"),
            max=d.get("max"),
            overflow=d.get("overflow", 0),
            negative=d.get("negative", 0),
            max_value=d.get("max_value", DEFAULT_MAX_VALUE),
        )
