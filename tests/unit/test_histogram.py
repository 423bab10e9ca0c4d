"""The histogram: HdrHistogram layout, exact merges, counted out-of-range values."""

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from brokerbench.histogram import LogHistogram, bucket_key, bucket_keys

PCTS = (50, 75, 90, 95, 99, 99.9, 99.99)


def exact(values, p):
    return float(np.percentile(values, p, method="inverted_cdf"))


def test_percentiles_within_a_tenth_of_a_percent_of_exact():
    rng = np.random.default_rng(1)
    values = (rng.lognormal(7, 1.2, 100_000)).astype(np.int64) + 1
    h = LogHistogram.from_values(values)
    for p in PCTS:
        assert h.percentile(p) == pytest.approx(exact(values, p), rel=1e-3), p
    assert h.percentile(100) == values.max()
    assert h.mean() == pytest.approx(values.mean())
    assert h.count == len(values)


def test_bucket_keys_match_hdrhistogram_layout():
    rng = np.random.default_rng(2)
    values = rng.integers(1, 10**9, 5_000)
    ref = HdrHistogram(1, 3_600_000_000, 3)
    keys = bucket_keys(values)
    for v, k in zip(values.tolist(), keys.tolist()):
        assert k == ref.get_highest_equivalent_value(v) == bucket_key(v)
    # values below 2048 are exact
    assert bucket_keys(np.arange(0, 2048)).tolist() == list(range(2048))


def test_merge_of_parts_equals_histogram_of_concatenation():
    rng = np.random.default_rng(3)
    parts = [rng.integers(50, 200_000, n) for n in (10, 5_000, 1, 20_000)]
    merged = LogHistogram()
    for part in parts:
        merged.merge(LogHistogram.from_values(part))
    whole = LogHistogram.from_values(np.concatenate(parts))
    assert merged.to_dict() == whole.to_dict()
    # and through the serialised form the worker writes
    again = LogHistogram()
    for part in parts:
        again.merge(LogHistogram.from_dict(LogHistogram.from_values(part).to_dict()))
    assert again.to_dict() == whole.to_dict()


def test_out_of_range_values_are_counted_not_fatal():
    h = LogHistogram.from_values([-5, -1, 0, 10, 4_000_000_000], max_value=3_600_000_000)
    assert h.negative == 2
    assert h.overflow == 1
    assert h.count == 2
    assert h.percentile(100) == 10


def test_empty_histogram_has_no_percentiles():
    h = LogHistogram()
    assert h.percentile(99) is None and h.mean() is None
    assert LogHistogram.from_dict(h.to_dict()).count == 0
