"""The executors' pass over the worker files (spark_jobs/brokerbench_spark/workerfiles.py),
without Spark: merged percentiles equal LogHistogram's on the raw samples, levels, sweeps,
cut-short lines and the packing of work into tasks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark_jobs"))
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.histogram import LogHistogram  # noqa: E402
from brokerbench_spark.workerfiles import (  # noqa: E402
    read_phase_dirs,
    sum_by_group_and_bucket,
    task_slices,
)

FIELDS = ["publish_latency_us", "e2e_latency_us", "publish_delay_us"]
COMBO = ["workload", "broker", "driver", "variant"]
RANKED = [1.0, 50.0, 90.0, 99.0, 99.9, 99.99]


def meta(phase: str = "measure", worker: str = "c1-0") -> dict:
    return {"record": "meta", "workload": "w", "broker": "kafka", "driver": "d", "variant": "fsync-off",
            "phase": phase, "worker": worker}


def interval(index: int, values: dict[str, np.ndarray], **extra) -> dict:
    rec = {"record": "interval", "index": index, "sent": 1, **extra}
    for field, v in values.items():
        rec[field] = LogHistogram.from_values(v).to_dict()
    return rec


def write(path: Path, records: list, tail: str = "") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n" + tail)
    return str(path)


def rows_of(out: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    return [r[1:] for r in out if r[0] == "s"], [r[1:] for r in out if r[0] == "h"]


def test_merged_percentiles_equal_the_raw_samples_per_interval_and_per_phase(tmp_path):
    rng = np.random.default_rng(7)
    samples: dict[tuple[int, str], list[np.ndarray]] = {}
    files = []
    for w in range(3):
        records = [meta(worker=f"c1-{w}")]
        for i in range(4):
            values = {f: rng.lognormal(8, 1.2, 500).astype(np.int64) + 1 for f in FIELDS}
            for f, v in values.items():
                samples.setdefault((i, f), []).append(v)
            records.append(interval(i, values))
        records.append({"record": "end", "status": "ok"})
        files.append(write(tmp_path / "raw/w/d/fsync-off/measure" / f"c1-{w}.jsonl", records))

    _, hists = rows_of(list(read_phase_dirs([(5, files)], FIELDS, COMBO, RANKED)))
    by_key = {(h[6], h[7], h[9]): h for h in hists}  # (level, index, metric)
    assert len(hists) == 4 * 3 + 3  # level 0 per interval and metric, level 1 per metric
    for (level, index, m), h in by_key.items():
        assert h[:6] == (5, False, "w", "kafka", "d", "fsync-off")
        parts = [v for (i, f), vs in samples.items() if f == FIELDS[m] and (level == 1 or i == index) for v in vs]
        raw = LogHistogram.from_values(np.concatenate(parts))
        count, r = h[10], h[11]
        assert count == raw.count
        # r is the bucket key; LogHistogram caps it at the exact maximum (so does the job)
        assert [min(k, raw.max) for k in r] == [raw.percentile(p) for p in RANKED]


def test_records_pass_without_bucket_arrays_and_a_cut_line_as_it_is(tmp_path):
    values = {"publish_latency_us": np.array([5, 7, 900])}
    f = write(tmp_path / "raw/w/d/fsync-off/measure/c1-0.jsonl", [meta(), interval(0, values)],
              tail='{"record": "interval", "index": 1, "publish_lat')
    scalars, hists = rows_of(list(read_phase_dirs([(0, [f])], FIELDS, COMBO, RANKED)))
    assert [s[0:2] for s in scalars] == [(0, f)] * 3
    rec = json.loads(scalars[1][2])
    assert rec["publish_latency_us"]["count"] == 3 and rec["publish_latency_us"]["max"] == 900
    assert "buckets" not in rec["publish_latency_us"] and "counts" not in rec["publish_latency_us"]
    assert scalars[2][2] == '{"record": "interval", "index": 1, "publish_lat'  # Spark reads it as nulls
    assert sorted((h[6], h[7], h[9], h[10]) for h in hists) == [(0, 0, 0, 3), (1, None, 0, 3)]


def test_sweep_levels_are_per_step_and_intervals_without_a_step_are_left_out(tmp_path):
    v = {"publish_latency_us": np.array([10, 20, 30, 40])}
    records = [meta("sweep"), interval(0, v, step=0), interval(1, v, step=0), interval(2, v, step=1),
               interval(3, v)]
    f = write(tmp_path / "raw/w/d/fsync-off/sweep/c1-0.jsonl", records)
    _, hists = rows_of(list(read_phase_dirs([(0, [f])], FIELDS, COMBO, RANKED)))
    assert all(h[1] is True for h in hists)
    assert sorted((h[6], h[7], h[8], h[10]) for h in hists) == [
        (0, 0, 0, 4), (0, 1, 0, 4), (0, 2, 1, 4), (1, None, 0, 8), (1, None, 1, 4)]


def test_warmup_files_give_records_but_no_histograms(tmp_path):
    f = write(tmp_path / "raw/w/d/fsync-off/warmup/c1-0.jsonl",
              [meta("warmup"), interval(0, {"publish_latency_us": np.array([1, 2])})])
    scalars, hists = rows_of(list(read_phase_dirs([(0, [f])], FIELDS, COMBO, RANKED)))
    assert len(scalars) == 2 and hists == []


def test_sum_by_group_and_bucket_with_and_without_the_packed_key():
    g = np.array([1, 0, 1, 0, 1], np.int64)
    n = np.array([1, 2, 3, 4, 5], np.int64)
    for b in (np.array([5, 3, 5, 3, 2], np.int64), np.array([5, 3, 5, 3, 2], np.int64) << 45):
        gs, bs, ns = sum_by_group_and_bucket(g, b, n)
        assert gs.tolist() == [0, 1, 1] and ns.tolist() == [6, 5, 4]
        assert bs.tolist() == [b[1], b[4], b[0]]


def test_task_slices_balance_bytes_and_keep_every_item():
    work = [((i, [f"f{i}"]), size) for i, size in enumerate([100, 10, 60, 50, 40, 1])]
    slices = task_slices(work, 3)
    assert sorted(i for s in slices for i, _ in s) == list(range(6))
    sizes = {i: size for (i, _), size in work}
    assert sorted(sum(sizes[i] for i, _ in s) for s in slices) == [71, 90, 100]
    assert task_slices(work, 100) and len(task_slices(work, 100)) == 6
    assert task_slices([], 4) == []
