"""The one pass over the worker files, on the executors: each file read and parsed once,
every histogram's buckets merged once per level with numpy, every percentile read in one
vectorised step per level, and every record handed on without its bucket arrays.

Work is one phase directory of one run (``raw/<workload>/<driver>/<variant>/<phase>/``,
all worker files of that phase: the only input of its histograms), so no bucket is ever
shuffled. The driver packs the directories into tasks of about equal bytes
(:func:`task_slices`); a task yields, in order:

- ``("s", run, file, text)`` for every non-blank line: the record as JSON without the
  histograms' ``buckets`` and ``counts`` (the line as it is when it is no JSON object, e.g.
  cut short by a killed worker), for Spark's ``from_json`` (reading.py);
- ``("h", run, sweep, <COMBO>..., level, index, s, metric, count, r)`` for every merged
  histogram of a measured or sweep phase, keyed as the file's meta record says
  (``sweep``: its phase is ``sweep``; COMBO: workload, broker, driver, variant):

  - level 0: per interval index (measured phase) or per interval index and step (sweep):
    the workers' buckets of that interval summed per bucket key;
  - level 1: per phase (measured) or per step (sweep), summed from level 0 (not from the
    raw buckets again);
  - level 2 (measured phase only): per 10 s window of the OMB documents (``index`` = the
    window), summed from level 0 as :func:`omb.window_map` assigns the intervals;

  ``count`` = the sum of the merged positive bucket counts and ``r`` = the bucket key at
  each percentile of ``ranked`` (the first bucket whose running count reaches
  ceil(p/100 x count), at least 1): the semantics of
  ``brokerbench.histogram.LogHistogram.percentile``. Histograms whose merged count is 0
  give no row. The cap at the exact maximum is applied by the caller (the maximum is a
  scalar of the records);
- ``("w", run, sweep, <COMBO>..., index, window, timed)`` for every interval index of a
  measured phase: the OMB window it belongs to (omb.py), so Spark merges the counters and
  the histograms' scalars into the same windows as the buckets.

Executors need numpy (docs/aggregation-and-report.md, "Running the jobs on a cluster").
Nothing here imports pyspark: the functions are tested on plain files.
"""

from __future__ import annotations

import json
from itertools import chain
from typing import Iterable, Iterator, Sequence

import numpy as np

from .omb import window_map
from .store import is_s3, local_path, s3_client, split_s3

#: raw (level 0) pairs held before they are summed into the running merge
PENDING_PAIRS = 4_000_000
#: bits of the bucket key in the combined sort key (group << BUCKET_BITS | bucket)
BUCKET_BITS = 40

#: one phase directory of work: (run, its worker files)
PhaseDir = tuple[int, Sequence[str]]


def file_lines(uri: str, client=None) -> list[bytes]:
    """The lines of a worker file (local path or s3:// URI), blank ones dropped."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        data = (client or s3_client()).get_object(Bucket=bucket, Key=key)["Body"].read()
    else:
        with open(local_path(uri), "rb") as fh:
            data = fh.read()
    return [line.rstrip(b"\r") for line in data.split(b"\n") if line.strip()]


def _ints(lists: list[list], total: int) -> np.ndarray:
    return np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=total)


class PhaseMerge:
    """The running level-0 merge of one phase: (group, bucket, n) summed per (group, bucket),
    where a group is (interval index, step, metric) numbered in order of appearance."""

    def __init__(self, sweep: bool, fields: Sequence[str], interval_s: float | None = None):
        self.sweep = sweep
        self.fields = list(fields)  # histogram field of each metric number
        self.interval_s = interval_s  # the workers' reporting interval (the meta record's interval_s)
        self.sent: dict[int, int] = {}  # interval index -> messages sent, summed over the workers
        self.bounds: dict[int, tuple[int, int]] = {}  # interval index -> (first start, last end) in ns
        self.groups: dict[tuple, int] = {}  # (index, s) -> number
        self.g = np.empty(0, np.int64)
        self.b = np.empty(0, np.int64)
        self.n = np.empty(0, np.int64)
        self._pending: list[tuple[list, list, list, int]] = []  # (group per list, buckets, counts, pairs)
        self._pending_pairs = 0

    def add_record(self, r: dict) -> None:
        """One parsed line: interval records only (a sweep's only with a step)."""
        if r.get("record") != "interval":
            return
        s = r.get("step") if self.sweep else None
        if self.sweep and s is None:
            return
        key = (r.get("index"), s)
        if not self.sweep and isinstance(r.get("index"), int):
            self._count_interval(r)
        number = self.groups.get(key)
        if number is None:
            number = self.groups[key] = len(self.groups)
        groups, buckets, counts, pairs = [], [], [], 0
        for m, field in enumerate(self.fields):
            h = r.get(field)
            if not isinstance(h, dict):
                continue
            b, c = h.get("buckets") or [], h.get("counts") or []
            k = min(len(b), len(c))  # a bucket without a count adds nothing
            if k:
                groups.append((number * len(self.fields) + m, k))
                buckets.append(b[:k] if k < len(b) else b)
                counts.append(c[:k] if k < len(c) else c)
                pairs += k
        if pairs:
            self._pending.append((groups, buckets, counts, pairs))
            self._pending_pairs += pairs
            if self._pending_pairs >= PENDING_PAIRS:
                self._fold()

    def _count_interval(self, r: dict) -> None:
        """What omb.window_map needs of a measured interval: its sends and its bounds."""
        index = r["index"]
        self.sent[index] = self.sent.get(index, 0) + (r.get("sent") or 0)
        start, end = r.get("start_ns"), r.get("end_ns")
        if isinstance(start, int) and isinstance(end, int):
            first, last = self.bounds.get(index, (start, end))
            self.bounds[index] = (min(first, start), max(last, end))

    def _fold(self) -> None:
        """Sum the pending raw pairs into the running merge."""
        if not self._pending:
            return
        total = self._pending_pairs
        lists_g = [g for p in self._pending for g in p[0]]
        g = np.repeat(np.array([x for x, _ in lists_g], np.int64), np.array([k for _, k in lists_g], np.int64))
        b_lists = [b for p in self._pending for b in p[1]]
        c_lists = [c for p in self._pending for c in p[2]]
        try:
            b, n = _ints(b_lists, total), _ints(c_lists, total)
        except TypeError:  # a null inside an array: that pair is no pair
            keep = [[(x is not None and y is not None) for x, y in zip(bl, cl)] for bl, cl in zip(b_lists, c_lists)]
            mask = np.fromiter(chain.from_iterable(keep), dtype=bool, count=total)
            b = np.fromiter((x for x, k in zip(chain.from_iterable(b_lists), mask) if k), np.int64)
            n = np.fromiter((x for x, k in zip(chain.from_iterable(c_lists), mask) if k), np.int64)
            g = g[mask]
        self._pending, self._pending_pairs = [], 0
        self.g, self.b, self.n = sum_by_group_and_bucket(
            np.concatenate([self.g, g]), np.concatenate([self.b, b]), np.concatenate([self.n, n]))

    def rows(self, ranked: Sequence[float]) -> list[tuple]:
        """The phase's merged histograms, level 0 then level 1: (level, index, s, metric,
        count, r) (see the module's docstring)."""
        self._fold()
        metrics = len(self.fields)
        keys = list(self.groups)  # number -> (index, s)
        out = [(0, keys[g // metrics][0], keys[g // metrics][1], g % metrics, count, r)
               for g, count, r in ranked_rows(self.g, self.b, self.n, ranked)]
        # level 1: per step (sweep) or per phase, from level 0's sums
        steps: dict = {}
        step_of = np.array([steps.setdefault(s, len(steps)) for _, s in keys] or [0], np.int64)
        g1 = step_of[self.g // metrics] * metrics + self.g % metrics
        g1, b1, n1 = sum_by_group_and_bucket(g1, self.b, self.n)
        step_keys = list(steps)
        out += [(1, None, step_keys[g // metrics], g % metrics, count, r)
                for g, count, r in ranked_rows(g1, b1, n1, ranked)]
        out += self._window_rows(keys, ranked)
        return out

    def windows(self) -> list[tuple[int, int, bool]]:
        """(interval index, OMB window, timed) of a measured phase (omb.window_map); [] for a
        sweep or without the reporting interval."""
        if self.sweep or not self.interval_s or self.interval_s <= 0:
            return []
        seconds = {i: (end - start) / 1e9 for i, (start, end) in self.bounds.items()}
        return window_map(self.sent, self.interval_s, seconds)

    def _window_rows(self, keys: list[tuple], ranked: Sequence[float]) -> list[tuple]:
        """Level 2: the level-0 sums merged per OMB window; an interval in several windows
        (longer than a window) adds its buckets to each."""
        metrics = len(self.fields)
        windows_of: dict[int, list[int]] = {}
        for index, window, _ in self.windows():
            windows_of.setdefault(index, []).append(window)
        g2_parts, b2_parts, n2_parts = [], [], []
        for number, (index, _) in enumerate(keys):
            # self.g is sorted (sum_by_group_and_bucket): the pairs of one interval are one slice
            lo, hi = np.searchsorted(self.g, [number * metrics, (number + 1) * metrics], side="left")
            for window in windows_of.get(index, []):
                g2_parts.append(window * metrics + self.g[lo:hi] % metrics)
                b2_parts.append(self.b[lo:hi])
                n2_parts.append(self.n[lo:hi])
        if not g2_parts:
            return []
        g2, b2, n2 = sum_by_group_and_bucket(np.concatenate(g2_parts), np.concatenate(b2_parts),
                                             np.concatenate(n2_parts))
        return [(2, g // metrics, None, g % metrics, count, r) for g, count, r in ranked_rows(g2, b2, n2, ranked)]


def sum_by_group_and_bucket(g: np.ndarray, b: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, bucket, n) summed per (group, bucket), sorted by group then bucket."""
    if not len(g):
        return g, b, n
    if b.min() >= 0 and b.max() < (1 << BUCKET_BITS) and g.max() < (1 << (62 - BUCKET_BITS)):
        key = (g << BUCKET_BITS) | b
        order = np.argsort(key)
        key = key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        sums = np.add.reduceat(n[order], starts)
        first = key[starts]
        return first >> BUCKET_BITS, first & ((1 << BUCKET_BITS) - 1), sums
    order = np.lexsort((b, g))
    g, b = g[order], b[order]
    starts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (b[1:] != b[:-1])])
    return g[starts], b[starts], np.add.reduceat(n[order], starts)


def ranked_rows(g: np.ndarray, b: np.ndarray, n: np.ndarray, ranked: Sequence[float]
                ) -> Iterator[tuple[int, int, list[int]]]:
    """Per group (sorted input of :func:`sum_by_group_and_bucket`): (group, count, bucket key
    at each percentile of ``ranked``), for groups with a positive count."""
    positive = n > 0  # an empty bucket never reaches a rank first
    g, b, n = g[positive], b[positive], n[positive]
    if not len(g):
        return
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    totals = np.add.reduceat(n, starts)
    running = np.cumsum(n)
    before = running[starts] - n[starts]
    # rank(p) = ceil(p/100 x count), at least 1 (float64 arithmetic, as Spark's ceil(double))
    fractions = np.array([p / 100.0 for p in ranked], dtype=np.float64)
    ranks = np.maximum(1, np.ceil(fractions[None, :] * totals[:, None].astype(np.float64))).astype(np.int64)
    picks = b[np.searchsorted(running, before[:, None] + ranks, side="left")]
    for group, count, r in zip(g[starts].tolist(), totals.tolist(), picks.tolist()):
        yield group, count, r


def _text(v):
    """A meta field as Spark's JSON reader gives it to a string column."""
    return v if v is None or isinstance(v, str) else json.dumps(v)


def _without_buckets(record: dict, fields: Sequence[str]) -> dict:
    for field in fields:
        h = record.get(field)
        if isinstance(h, dict) and ("buckets" in h or "counts" in h):
            record[field] = {k: v for k, v in h.items() if k not in ("buckets", "counts")}
    return record


def read_phase_dirs(work: Iterable[PhaseDir], fields: Sequence[str], combo: Sequence[str],
                    ranked: Sequence[float], as_text: bool = True) -> Iterator[tuple]:
    """Executor side: the rows of the module's docstring for every phase directory of ``work``.
    ``fields``: the histogram field of each metric number (schema.METRIC_NAMES); ``combo``:
    the meta fields that key a phase (schema.COMBO). ``as_text=False``: an ``"s"`` row holds the
    parsed record without its bucket arrays (None for a line that is no JSON object) instead of its
    JSON text, for a caller in the same process (phase_tables.py)."""
    client = None
    for run, files in work:
        merges: dict[tuple, PhaseMerge] = {}
        for uri in files:
            if client is None and is_s3(uri):
                client = s3_client()
            lines = file_lines(uri, client)
            records: list = []  # per line: its record, or None when it is no JSON object
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:  # cut short by a killed worker: Spark makes it a row of nulls
                    record = None
                records.append(record if isinstance(record, dict) else None)
            # every interval record of the file belongs to each measured or sweep meta record's phase
            keys = list(dict.fromkeys(
                (r.get("phase") == "sweep", *[_text(r.get(c)) for c in combo]) for r in records
                if r is not None and r.get("record") == "meta" and r.get("phase") in ("measure", "sweep")))
            interval_s = next((r.get("interval_s") for r in records
                               if r is not None and r.get("record") == "meta" and r.get("interval_s")), None)
            for key in keys:
                merge = merges.get(key)
                if merge is None:
                    merge = merges[key] = PhaseMerge(key[0], fields, interval_s)
                for r in records:
                    if r is not None:
                        merge.add_record(r)
            for line, r in zip(lines, records):
                if not as_text:
                    yield "s", run, uri, None if r is None else _without_buckets(r, fields)
                    continue
                text = line.decode("utf-8", errors="replace") if r is None else json.dumps(_without_buckets(r, fields))
                yield "s", run, uri, text
        for key, merge in merges.items():
            for row in merge.rows(ranked):
                yield ("h", run, *key, *row)
            for index, window, timed in merge.windows():
                yield ("w", run, *key, index, window, timed)


def task_slices(work: Sequence[tuple[PhaseDir, int]], slices: int) -> list[list[PhaseDir]]:
    """Phase directories (with their bytes) packed into at most ``slices`` tasks of about
    equal bytes: largest first, each to the lightest task."""
    loads: list[list] = [[0, i, []] for i in range(max(1, min(slices, len(work))))]
    for item, size in sorted(work, key=lambda w: -w[1]):
        lightest = min(loads, key=lambda t: (t[0], t[1]))
        lightest[0] += size
        lightest[2].append(item)
    return [t[2] for t in loads if t[2]]
