"""The 10 s windows of the OMB documents (spark_jobs/brokerbench_spark/omb.py) and their
merged histograms on the executors (workerfiles.py, level 2), without Spark: which interval
goes to which window, and that a window's percentiles are those of the raw samples of its
intervals (merged buckets, never averaged percentiles)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark_jobs"))
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.histogram import LogHistogram  # noqa: E402
from brokerbench_spark.omb import OMB_INTERVAL_S, window_map  # noqa: E402
from brokerbench_spark.workerfiles import read_phase_dirs  # noqa: E402

FIELDS = ["publish_latency_us", "e2e_latency_us", "publish_delay_us"]
COMBO = ["workload", "broker", "driver", "variant"]
RANKED = [50.0, 99.0, 99.9]
NS = 1_000_000_000


def windows_of(mapping: list[tuple[int, int, bool]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for index, window, _ in mapping:
        out.setdefault(window, []).append(index)
    return out


def test_omb_charts_assume_10_s_between_points():
    assert OMB_INTERVAL_S == 10


def test_5_s_intervals_pair_up_and_the_drain_joins_the_last_window_untimed():
    # 6 full sending intervals of 5 s, then a 0.35 s drain that sends nothing
    sent = {0: 5000, 1: 5000, 2: 5000, 3: 5000, 4: 5000, 5: 5000, 6: 0}
    seconds = {i: 5.0 for i in range(6)} | {6: 0.35}
    mapping = window_map(sent, 5, seconds)
    assert windows_of(mapping) == {0: [0, 1], 1: [2, 3], 2: [4, 5, 6]}
    assert [timed for _, _, timed in mapping] == [True] * 6 + [False]


def test_a_short_last_interval_with_late_sends_joins_the_last_window_timed():
    sent = {0: 5000, 1: 5000, 2: 5000, 3: 5000, 4: 5000, 5: 5000, 6: 5}
    seconds = {i: 5.0 for i in range(6)} | {6: 0.26}
    mapping = window_map(sent, 5, seconds)
    assert windows_of(mapping) == {0: [0, 1], 1: [2, 3], 2: [4, 5, 6]}
    assert mapping[-1] == (6, 2, True)


def test_10_s_intervals_are_the_windows():
    mapping = window_map({0: 1, 1: 1, 2: 1}, 10)
    assert mapping == [(0, 0, True), (1, 1, True), (2, 2, True)]


def test_intervals_that_do_not_divide_10_s_go_to_the_window_they_start_in():
    # 3 s intervals start at 0, 3, 6, 9 | 12, 15, 18 | 21, 24, 27
    mapping = window_map({i: 1 for i in range(10)}, 3)
    assert windows_of(mapping) == {0: [0, 1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9]}


def test_intervals_longer_than_10_s_repeat_in_every_window_they_span():
    # 30 s intervals: 0-30 s and 30-60 s span windows 0-2 and 3-5
    mapping = window_map({0: 1, 1: 1}, 30)
    assert windows_of(mapping) == {0: [0], 1: [0], 2: [0], 3: [1], 4: [1], 5: [1]}


def test_a_phase_that_sends_nothing_has_no_drain():
    # consumer-only: every full interval is a window, a short last one joins the last window
    mapping = window_map({0: 0, 1: 0, 2: 0}, 10, {0: 10.0, 1: 10.0, 2: 4.0})
    assert mapping == [(0, 0, True), (1, 1, True), (2, 1, True)]


def test_a_stalled_interval_in_the_middle_stays_in_its_window():
    mapping = window_map({0: 1, 1: 0, 2: 1}, 10)
    assert windows_of(mapping) == {0: [0], 1: [1], 2: [2]}
    assert all(timed for _, _, timed in mapping)


def test_a_nonpositive_interval_is_refused():
    with pytest.raises(ValueError, match="interval_s"):
        window_map({0: 1}, 0)


def _record(index: int, start_s: float, length_s: float, sent: int, values: dict[str, np.ndarray]) -> dict:
    rec = {"record": "interval", "index": index, "sent": sent,
           "start_ns": int(start_s * NS), "end_ns": int((start_s + length_s) * NS)}
    for field, v in values.items():
        rec[field] = LogHistogram.from_values(v).to_dict()
    return rec


def test_window_histograms_merge_the_raw_samples_of_their_intervals(tmp_path):
    """Two workers, 5 s intervals, 6 full ones and a drain: level 2 holds 3 windows whose counts
    and percentiles are those of the pooled raw samples of their intervals (the drain's in the last)."""
    rng = np.random.default_rng(11)
    samples: dict[tuple[int, str], list[np.ndarray]] = {}
    files = []
    for w in range(2):
        records: list[dict] = [{"record": "meta", "workload": "w", "broker": "kafka", "driver": "d",
                                "variant": "fsync-on", "phase": "measure", "worker": f"c-{w}", "interval_s": 5.0}]
        for i in range(7):
            drain = i == 6
            values = {f: rng.lognormal(8 + i % 3, 1.0, 20 if drain else 300).astype(np.int64) + 1 for f in FIELDS}
            for f, v in values.items():
                samples.setdefault((i, f), []).append(v)
            records.append(_record(i, 5.0 * i, 0.3 if drain else 5.0, 0 if drain else 1500, values))
        path = tmp_path / "raw/w/d/fsync-on/measure" / f"c-{w}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        files.append(str(path))

    out = list(read_phase_dirs([(0, files)], FIELDS, COMBO, RANKED))
    level2 = {(h[7], h[9]): h for h in (r[1:] for r in out if r[0] == "h") if h[6] == 2}  # (index = window, metric)
    mapping = [r[1:] for r in out if r[0] == "w"]
    assert [m[-3:] for m in mapping] == [(0, 0, True), (1, 0, True), (2, 1, True), (3, 1, True),
                                          (4, 2, True), (5, 2, True), (6, 2, False)]
    assert all(m[:6] == (0, False, "w", "kafka", "d", "fsync-on") for m in mapping)
    members = {0: [0, 1], 1: [2, 3], 2: [4, 5, 6]}
    assert sorted(level2) == [(w, m) for w in range(3) for m in range(3)]
    for (window, m), h in level2.items():
        raw = LogHistogram.from_values(np.concatenate(
            [v for i in members[window] for v in samples[(i, FIELDS[m])]]))
        count, r = h[10], h[11]
        assert count == raw.count
        assert [min(k, raw.max) for k in r] == [raw.percentile(p) for p in RANKED]
