"""The tables of one phase, built in the executor task that reads its worker files.

A phase's files are its tables' only input (workerfiles.py): the task that merges a phase's
histograms holds every record of that phase, so it builds the phase's rows of every table there
(:func:`phase_rows`) and the job is one Spark stage and one collect (entry.py). The rules are those of
docs/aggregation-and-report.md, spelled out here in plain Python on a few hundred records per phase:

- every record is read as Spark's ``from_json`` reads it with schema.RECORD_SCALARS (:func:`converter`:
  a field of another type is null, a line that is no JSON object is a record of nulls);
- a file's interval and end records belong to each of its meta records of a measured (``measure``)
  or sweep phase; files without one give nothing;
- aggregates skip nulls (a sum, minimum or maximum of nulls only is null), integer columns stay
  integers, and a ratio of integers is taken in floating point of both (Spark's division);
- latencies come from the merged histograms: ``<prefix>_count`` is the merged histogram's count,
  every percentile its bucket key capped at the exact maximum (workerfiles.py); never an average
  of percentiles.

:func:`finish_summary` adds, on the driver, what a phase's files do not hold: the broker's provenance,
the hosts' contention during the phase and the row's status (docs/results-format.md, "Status").

Nothing here imports pyspark but its type classes (schema.py).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, Callable, Iterable, Iterator, Sequence

from pyspark.sql import types as T

from .schema import (
    ALL_PERCENTILES,
    COMBO,
    FIXED_RATE_KINDS,
    FOREIGN_CPU_LIMIT_PERCENT,
    METRIC_NAMES,
    METRICS,
    PHASE,
    PROVENANCE,
    RATE_MIN_RATIO,
    RECORD_SCALARS,
    STANDARD_PERCENTILES,
)
from .workerfiles import PhaseDir, read_phase_dirs

#: the percentiles read by rank (p100 is the exact maximum)
RANKED = [p for p in ALL_PERCENTILES if p < 100]
#: a sweep step's interval carries its load when it sent at least this share of the step's busiest interval
LOAD_SHARE = 0.01
#: the tables a task yields rows of, as ``(table, run, row)``
TABLES = ("summary", "timeseries", "quantiles", "omb", "sweep")

STATS = ("avg", "min", *[label for label, _ in STANDARD_PERCENTILES], "max")
#: the latency columns of the summary and the sweep steps
LATENCY = [f"{prefix}_{stat}_{unit}" for prefix, unit, _ in METRICS.values() for stat in STATS]
#: the latency columns of the time series and the OMB windows (no minimum)
SERIES_LATENCY = [f"{prefix}_{stat}_{unit}" for prefix, unit, _ in METRICS.values() for stat in STATS if stat != "min"]


def pct_col(index: int) -> str:
    """Column of the value at ALL_PERCENTILES[index] (µs)."""
    return f"q{index}"


# -- records as Spark's JSON reader gives them ------------------------------------------------


def _string(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))  # another JSON value keeps its text


def _long(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _double(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def converter(dtype: T.DataType) -> Callable[[Any], Any]:
    """A parsed JSON value -> the value of a ``dtype`` column (null when it is of another type)."""
    if isinstance(dtype, T.StringType):
        return _string
    if isinstance(dtype, (T.LongType, T.IntegerType)):
        return _long
    if isinstance(dtype, T.DoubleType):
        return _double
    if isinstance(dtype, T.BooleanType):
        return _bool
    if isinstance(dtype, T.ArrayType):
        element = converter(dtype.elementType)
        return lambda v: [element(x) for x in v] if isinstance(v, list) else None
    if isinstance(dtype, T.MapType):
        value = converter(dtype.valueType)
        return lambda v: {k: value(x) for k, x in v.items()} if isinstance(v, dict) else None
    if isinstance(dtype, T.StructType):
        fields = [(f.name, converter(f.dataType)) for f in dtype.fields]
        return lambda v: {name: conv(v.get(name)) for name, conv in fields} if isinstance(v, dict) else None
    raise TypeError(f"no converter for {dtype}")


_RECORD = converter(RECORD_SCALARS)


def parse_record(text: str) -> dict | None:
    """One line of a worker file as a record (None: no JSON object, a record of nulls)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return as_record(value)


def as_record(value: Any) -> dict | None:
    """A parsed line as a record of schema.RECORD_SCALARS (None: no JSON object, a record of nulls)."""
    return _RECORD(value) if isinstance(value, dict) else None


# -- aggregates ---------------------------------------------------------------------------------


def _present(values: Iterable) -> list:
    return [v for v in values if v is not None]


def _sum(values: Iterable):
    present = _present(values)
    return sum(present) if present else None


def _min(values: Iterable):
    present = _present(values)
    return min(present) if present else None


def _max(values: Iterable):
    present = _present(values)
    return max(present) if present else None


def _distinct(values: Iterable) -> int:
    return len(set(_present(values)))


def _span_s(starts: Iterable, ends: Iterable) -> float | None:
    """(latest end - earliest start) in seconds, of nanosecond times."""
    first, last = _min(starts), _max(ends)
    return None if first is None or last is None else float(last - first) / 1e9


def _per(value, seconds):
    """``value`` per second when ``seconds`` > 0."""
    return float(value) / seconds if value is not None and seconds is not None and seconds > 0 else None


def _joined(values: Iterable[str | None]) -> str:
    """The distinct values, sorted, comma-separated ("" for none)."""
    return ",".join(sorted(set(_present(values))))


def sort_key(values: Sequence) -> tuple:
    """Spark's ascending order: nulls first."""
    return tuple((v is not None, v if v is not None else 0) for v in values)


#: a version number: an optional "v", dot-separated numbers, then anything (a pre-release, a package revision)
_RELEASE = re.compile(r"[vV]?(\d+(?:\.\d+)*)(.*)", re.S)
#: what makes the rest of a version a pre-release of its numbers (4.0.0-rc1, 3.0.0.dev2, 2.8.0-SNAPSHOT)
_PRE_RELEASE = re.compile(r"[-_.+~]?(dev|alpha|a|beta|b|c|pre|preview|rc|m|milestone|snapshot)(?![a-z])", re.I)
_TOKENS = re.compile(r"\d+|[A-Za-z]+")


def version_key(version: object) -> tuple:
    """Sort key of a broker version, older to newer: release numbers compared as numbers (3.9.1 < 3.10.0 <
    4.1.1), a pre-release before its release, a package revision after it, text that is no version number
    after every number, None first. The same function as brokerbench.changepoint.version_key (this package
    imports nothing of brokerbench; a unit test keeps the two the same)."""
    if version is None:
        return (0,)
    text = str(version).strip()
    m = _RELEASE.fullmatch(text)
    if m is None:
        return (2, text.lower(), text)
    release = tuple(int(x) for x in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    rest = m.group(2)
    rank = 1 if not rest else 0 if _PRE_RELEASE.match(rest) else 2
    tokens = tuple((0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in _TOKENS.findall(rest))
    return (1, release, rank, tokens, text)


def summary_order(row: dict) -> tuple:
    """The order of summary rows (docs/aggregation-and-report.md): by broker, implementation, version in version
    order (so the rows of two versions of a broker are adjacent, the older first), variant, workload and driver;
    nulls first."""
    return (*sort_key([row.get("broker"), row.get("broker_implementation")]), version_key(row.get("broker_version")),
            *sort_key([row.get("variant"), row.get("workload"), row.get("driver")]))


# -- the merged histograms ----------------------------------------------------------------------


class Histograms:
    """Every merged histogram of one phase key (sweep, COMBO) and its scalars, by (level, index, s)."""

    def __init__(self):
        # (level, index, s, metric) -> [sum, min, max, overflow, negative]
        self.scalars: dict[tuple, list] = {}
        # (level, index, s, metric) -> (count, bucket keys at RANKED)
        self.ranked: dict[tuple, tuple[int, list]] = {}

    def add_interval(self, index, s, record: dict) -> None:
        """Level 0: one interval record's histograms' scalars."""
        for m, field in enumerate(METRIC_NAMES):
            h = record.get(field) or {}
            acc = self.scalars.setdefault((0, index, s, m), [[], [], [], [], []])
            for i, name in enumerate(("sum", "min", "max", "overflow", "negative")):
                acc[i].append(h.get(name))

    def finish(self, windows: Sequence[tuple[int, int, bool]]) -> None:
        """Level 0 summed, level 1 (per phase or step) and level 2 (per OMB window) from level 0."""
        level0 = {}
        for key, (sums, mins, maxes, overflow, negative) in self.scalars.items():
            level0[key] = [_sum(sums), _min(mins), _max(maxes), _sum(overflow) or 0, _sum(negative) or 0]
        out = dict(level0)

        def remerge(target: dict, key: tuple, v: list) -> None:
            target.setdefault(key, []).append(v)

        upper: dict[tuple, list] = {}
        for (_, index, s, m), v in level0.items():
            remerge(upper, (1, None, s, m), v)
        windows_of: dict = defaultdict(list)
        for index, window, _ in windows:
            windows_of[index].append(window)
        for (_, index, s, m), v in level0.items():
            if s is None:
                for window in windows_of.get(index, []):
                    remerge(upper, (2, window, None, m), v)
        for key, vs in upper.items():
            out[key] = [_sum(v[0] for v in vs), _min(v[1] for v in vs), _max(v[2] for v in vs),
                        _sum(v[3] for v in vs), _sum(v[4] for v in vs)]
        self.scalars = out

    def stats(self, level: int, index, s, metric: int) -> dict | None:
        """count, sum, min, max, overflow, negative and every ``q<i>`` (µs) of one merged histogram."""
        scalars = self.scalars.get((level, index, s, metric))
        if scalars is None:
            return None
        total, mn, mx, overflow, negative = scalars
        count, ranks = self.ranked.get((level, index, s, metric), (None, None))
        out = {"count": count or 0, "sum": total, "min": mn, "max": mx, "overflow": overflow, "negative": negative}
        ranked = iter(range(len(RANKED)))
        for i, p in enumerate(ALL_PERCENTILES):
            if p >= 100:
                out[pct_col(i)] = mx  # the exact maximum
            else:
                k = next(ranked)
                bucket = ranks[k] if ranks is not None and k < len(ranks) else None
                # a bucket's key may exceed the exact maximum: never report more
                out[pct_col(i)] = _min([bucket, mx])
        return out

    def wide(self, level: int, index, s, with_min: bool = True) -> dict | None:
        """One column per metric x statistic in the metric's unit; None without any histogram there."""
        per_metric = [self.stats(level, index, s, m) for m in range(len(METRIC_NAMES))]
        if all(st is None for st in per_metric):
            return None
        row: dict[str, Any] = {}
        for st, metric in zip(per_metric, METRIC_NAMES):
            prefix, unit, divisor = METRICS[metric]
            st = st or {}

            def unit_value(v):
                return None if v is None else float(v) / divisor

            count, total = st.get("count"), st.get("sum")
            row[f"{prefix}_avg_{unit}"] = (float(total) / float(count) / divisor
                                           if count is not None and count > 0 and total is not None else None)
            if with_min:
                row[f"{prefix}_min_{unit}"] = unit_value(st.get("min"))
            for label, p in STANDARD_PERCENTILES:
                row[f"{prefix}_{label}_{unit}"] = unit_value(st.get(pct_col(ALL_PERCENTILES.index(p))))
            row[f"{prefix}_max_{unit}"] = unit_value(st.get("max"))
            row[f"{prefix}_count"] = st.get("count")
            row[f"{prefix}_overflow_count"] = st.get("overflow")
            row[f"{prefix}_negative_count"] = st.get("negative")
        return row


def _latency(wide: dict | None, columns: Sequence[str]) -> dict:
    return {c: (wide or {}).get(c) for c in columns}


# -- one phase ----------------------------------------------------------------------------------


class _Phase:
    """What one phase directory's worker files hold, by phase key (sweep, *COMBO)."""

    def __init__(self):
        self.metas: dict[tuple, list[tuple[str, dict]]] = defaultdict(list)  # key -> (file, meta) per meta record
        self.intervals: dict[str, list[dict]] = defaultdict(list)  # file -> interval records
        self.ends: dict[str, list[dict]] = defaultdict(list)  # file -> end records
        self.histograms: dict[tuple, Histograms] = defaultdict(Histograms)
        self.windows: dict[tuple, list[tuple[int, int, bool]]] = defaultdict(list)

    def add_file(self, uri: str, records: list[dict | None]) -> None:
        metas = [r for r in records if r is not None and r["record"] == "meta" and r["phase"] in ("measure", "sweep")]
        if not metas:
            return  # a warm-up's or a file without a meta record: no table reads it
        for r in records:
            if r is None:
                continue
            if r["record"] == "interval":
                self.intervals[uri].append(r)
            elif r["record"] == "end":
                self.ends[uri].append(r)
        for meta in metas:
            sweep = meta["phase"] == "sweep"
            key = (sweep, *[meta[c] for c in COMBO])
            self.metas[key].append((uri, meta))
            hist = self.histograms[key]
            for r in self.intervals[uri]:
                if sweep and r["step"] is None:
                    continue  # a sweep's interval without a step is merged nowhere
                hist.add_interval(r["index"], r["step"] if sweep else None, r)

    def rows(self, run: int) -> Iterator[tuple[str, int, dict]]:
        """``(table, run, row)`` of every phase key: a sweep's step rows, a measured phase's summary part,
        interval, OMB window and quantile rows."""
        for key, metas in self.metas.items():
            hist = self.histograms[key]
            hist.finish(self.windows.get(key, []))
            combo = dict(zip(COMBO, key[1:]))
            if key[0]:
                for row in _sweep_rows(run, combo, metas, self, hist):
                    yield "sweep", run, row
                continue
            # the interval records of the phase, each with its file's meta record (measured_intervals)
            intervals = [(f, m, r) for f, m in metas for r in self.intervals.get(f, [])]
            yield "summary", run, _summary_part(run, combo, metas, intervals, self.ends, hist)
            for row in _timeseries_rows(run, combo, intervals, hist):
                yield "timeseries", run, row
            for row in _omb_rows(run, combo, intervals, self.windows.get(key, []), hist):
                yield "omb", run, row
            for m, metric in enumerate(METRIC_NAMES):
                st = hist.stats(1, None, None, m)
                if st is not None:
                    yield "quantiles", run, {"run": run, **combo, "metric": metric, **st}


def phase_rows(work: Iterable[PhaseDir]) -> Iterator[tuple[str, int, dict]]:
    """Executor side: ``(table, run, row)`` for every row of every table (TABLES) of the phase
    directories of ``work``; the summary's rows without what :func:`finish_summary` adds."""
    combo = COMBO
    for run, files in work:
        phase = _Phase()
        by_file: dict[str, list] = defaultdict(list)
        for row in read_phase_dirs([(run, files)], METRIC_NAMES, COMBO, RANKED, as_text=False):
            kind = row[0]
            if kind == "s":
                by_file[row[2]].append(as_record(row[3]))
            elif kind == "h":
                _, _, sweep, *rest = row
                key, (level, index, s, metric, count, r) = (sweep, *rest[:len(combo)]), rest[len(combo):]
                phase.histograms[key].ranked[(level, index, s, metric)] = (count, r)
            else:  # "w"
                _, _, sweep, *rest = row
                key, (index, window, timed) = (sweep, *rest[:len(combo)]), rest[len(combo):]
                phase.windows[key].append((index, window, timed))
        for uri, records in by_file.items():
            phase.add_file(uri, records)
        yield from phase.rows(run)


# -- the tables ---------------------------------------------------------------------------------


def _worker_invalid(end: dict | None) -> list:
    """The worker's invalidating reasons (files of workers before invalid_reasons: client-bound alone)."""
    validity = (end or {}).get("validity") or {}
    if validity.get("invalid_reasons") is not None:
        return validity["invalid_reasons"]
    if validity.get("client_bound"):
        return ["client-bound: " + "; ".join(_present(validity.get("reasons") or []))]
    return []


def _concat(*parts) -> str | None:
    """Spark's concat: null when any part is."""
    return None if any(p is None for p in parts) else "".join(parts)


def _sorted_nulls_last(values: list) -> list:
    return sorted(_present(values)) + [v for v in values if v is None]


def _summary_part(run: int, combo: dict, metas, intervals, ends, hist: Histograms) -> dict:
    """One summary row before provenance, contention and status (finish_summary)."""
    files = [(m, e) for f, m in metas for e in (ends.get(f) or [None])]
    problems: list[str | None] = []
    invalid_plain: set[str | None] = set()
    invalid_named: list[str | None] = []
    reasons: set[str | None] = set()
    bound: list[int | None] = []
    for m, e in files:
        status = e["status"] if e else None
        if status is None:
            problems.append(_concat("worker ", m["worker"], " has no end record"))
        elif status != "ok":
            problems.append(_concat("worker ", m["worker"], " ended with ", status, ": ",
                                    e["error"] if e["error"] is not None else "no error message"))
        validity = (e or {}).get("validity") or {}
        bound.append(None if validity.get("client_bound") is None else int(validity["client_bound"]))
        reasons.update(validity.get("reasons") or [])
        invalid = _worker_invalid(e)
        invalid_plain.update(invalid)
        invalid_named += [_concat("worker ", m["worker"], ": ", r) if r is not None else None for r in invalid]
    found = sorted(_present(problems))
    workers = _distinct(m["worker"] for m, _ in files)
    row = {
        "run": run, **combo,
        "workers": workers,
        "client_library": _joined(m["client_library"] for m, _ in files),
        "client_library_version": _joined(m["client_library_version"] for m, _ in files),
        "brokerbench_version": _joined(m["brokerbench_version"] for m, _ in files),
        "client_hosts": _joined(m["host"] for m, _ in files),
        "target_rate_msg_s": _sum(m["target_rate_msg_s"] for m, _ in files),
        "message_size_bytes": _max(m["message_size_bytes"] for m, _ in files),
        "interval_s": _max(m["interval_s"] for m, _ in files),
        "lead_in_s": _max(m["lead_in_s"] for m, _ in files),
        "topics": _max(m["topics"] for m, _ in files),
        "partitions_per_topic": _max(m["partitions_per_topic"] for m, _ in files),
        "producers": _sum(m["producers"] for m, _ in files),
        "consumers": _sum(m["consumers"] for m, _ in files),
        "client_cpu_max_percent": _max((e or {}).get("cpu_percent") for _, e in files),
        "client_bound": None if _max(bound) is None else bool(_max(bound)),
        "validity_reasons": "; ".join(sorted(_present(reasons))),
        "kind": _max(m["kind"] for m, _ in files),
        "partial": "partial: " + "; ".join(found) if found else None,
        # one worker: its reasons as they are; several: each names its worker
        "worker_invalid": _sorted_nulls_last(invalid_named) if workers > 1 else _sorted_nulls_last(list(invalid_plain)),
    }
    row.update(_counters(intervals, [e for _, e in files]))
    row.update(_latency(hist.wide(1, None, None), _WIDE_SUMMARY))
    # the phase's clock (its first interval's start, wall-clock ns): the brokers' metrics are aligned to it
    row["phase_start_ns"] = _min(r["start_ns"] for _, _, r in intervals)
    return row


_WIDE_SUMMARY = LATENCY + \
    [f"{prefix}_{suffix}" for prefix, _, _ in METRICS.values() for suffix in ("count", "overflow_count", "negative_count")]


def _counters(intervals, ends: list[dict | None]) -> dict:
    """Messages sent, acknowledged, received, errors, the backlog at the end, and the seconds of load.

    Rates are per second of load: the seconds the producers ran (``load_s`` of the end records, the longest
    of the workers', which share one schedule), when every worker file of the phase has one. The last
    interval of a phase whose length is no multiple of the interval runs on into the drain (acks and receipts
    of messages in flight, a late send), which counts its messages but not its time: a 6-s phase's interval
    span was about 6.3 s and read its rate 5 % low. Files without ``load_s`` (a worker killed, older files):
    the span of the intervals in which messages were sent. A phase that sends nothing (consumer-only) uses
    its whole span."""
    if not intervals:
        return dict.fromkeys(("intervals", "measured_seconds", "messages_sent", "messages_acked",
                              "messages_received", "send_errors", "backlog_end_msgs"))
    records = [r for _, _, r in intervals]
    sending = [r for r in records if r["sent"] is not None and r["sent"] > 0]
    seconds = _span_s((r["start_ns"] for r in sending), (r["end_ns"] for r in sending))
    loads = [(e or {}).get("load_s") for e in ends]
    loaded = [float(v) for v in loads if v is not None and v > 0]
    if seconds is not None and loaded and len(loaded) == len(loads):
        seconds = max(loaded)
    if seconds is None:
        seconds = _span_s((r["start_ns"] for r in records), (r["end_ns"] for r in records))
    last: dict[str, dict] = {}  # file -> its interval with the highest index (the backlog at the end)
    for f, _, r in intervals:
        held = last.get(f)
        if held is None or (r["index"] is not None and (held["index"] is None or r["index"] > held["index"])):
            last[f] = r
    return {
        "intervals": _distinct(r["index"] for r in records),
        "measured_seconds": seconds,
        "messages_sent": _sum(r["sent"] for r in records),
        "messages_acked": _sum(r["acked"] for r in records),
        "messages_received": _sum(r["received"] for r in records),
        "send_errors": _sum(r["send_errors"] for r in records),
        "backlog_end_msgs": _sum(r["backlog"] for r in last.values()),
    }


def _timeseries_rows(run: int, combo: dict, intervals, hist: Histograms) -> list[dict]:
    """One row per interval index, sorted."""
    by_index: dict = defaultdict(list)
    for _, m, r in intervals:
        by_index[r["index"]].append((m, r))
    rows = []
    for index, items in by_index.items():
        records = [r for _, r in items]
        rows.append({
            "index": index,
            "workers": _distinct(m["worker"] for m, _ in items),
            "start_ns": _min(r["start_ns"] for r in records),
            "interval_seconds": _span_s((r["start_ns"] for r in records), (r["end_ns"] for r in records)),
            **{c: _sum(r[c] for r in records) for c in ("sent", "acked", "received", "send_errors")},
            "backlog_msgs": _sum(r["backlog"] for r in records),
        })
    # the phase starts with its earliest interval (workers share one schedule)
    phase_start = _min(r["start_ns"] for r in rows)
    sent_max = _max(r["sent"] for r in rows)
    out = []
    for r in sorted(rows, key=lambda r: sort_key([r["index"]])):
        seconds = r["interval_seconds"]
        # the short interval after the last send of a phase that sends: acks and receipts of messages in
        # flight, over a fraction of a second (null-aware AND, as Spark's)
        drain = _and(None if r["sent"] is None else r["sent"] == 0, None if sent_max is None else sent_max > 0)
        out.append({
            "run": run, **combo,
            "interval_index": r["index"],
            "interval_start_s": (None if r["start_ns"] is None or phase_start is None
                                 else float(r["start_ns"] - phase_start) / 1e9),
            "interval_seconds": seconds,
            "drain_interval": drain,
            "workers": r["workers"],
            "publish_rate_msg_s": _per(r["acked"], seconds),
            "send_rate_msg_s": _per(r["sent"], seconds),
            "consume_rate_msg_s": _per(r["received"], seconds),
            "publish_error_rate_msg_s": _per(r["send_errors"], seconds),
            "backlog_msgs": r["backlog_msgs"],
            **_latency(hist.wide(0, r["index"], None, with_min=False), SERIES_LATENCY),
        })
    return out


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _omb_rows(run: int, combo: dict, intervals, windows: Sequence[tuple[int, int, bool]],
              hist: Histograms) -> list[dict]:
    """One row per OMB window (10 s, omb.py), sorted: the per-interval lists of the OMB documents.

    Counters are summed over the window's intervals and workers; rates are per second of the window's timed
    intervals (the tail after the last full sending interval joins the last window; its time counts only when
    it sent something, as the summary's seconds of load); ``backlog_msgs`` is the backlog after the window's
    last interval; latencies come from the level-2 merged histograms (``<prefix>_count`` = their sample count,
    0 when the window holds no sample of that metric)."""
    windows_of: dict = defaultdict(list)
    for index, window, timed in windows:
        windows_of[index].append((window, timed))
    by_window: dict = defaultdict(list)
    for _, _, r in intervals:
        for window, timed in windows_of.get(r["index"], []):
            by_window[window].append((r, timed))
    out = []
    for window in sorted(by_window):
        items = by_window[window]
        records = [r for r, _ in items]
        timed_records = [r for r, t in items if t]
        seconds = _span_s((r["start_ns"] for r in timed_records), (r["end_ns"] for r in timed_records))
        last_index = max(r["index"] for r in records)
        sums = {c: _sum(r[c] for r in records) for c in ("acked", "received", "send_errors")}
        row = {
            "run": run, **combo, "window": window,
            "intervals": _distinct(r["index"] for r in records),
            "window_seconds": seconds,
            "publish_rate_msg_s": _per(sums["acked"], seconds),
            "consume_rate_msg_s": _per(sums["received"], seconds),
            "publish_error_rate_msg_s": _per(sums["send_errors"], seconds),
            "backlog_msgs": _sum(r["backlog"] for r in records if r["index"] == last_index),
        }
        wide = hist.wide(2, window, None, with_min=False)
        row.update(_latency(wide, SERIES_LATENCY))
        for prefix, _, _ in METRICS.values():
            row[f"{prefix}_count"] = (wide or {}).get(f"{prefix}_count") or 0
        out.append(row)
    return out


def _sweep_rows(run: int, combo: dict, metas, phase: _Phase, hist: Histograms) -> list[dict]:
    """One row per sweep step, sorted (docs/aggregation-and-report.md, sweep.csv).

    Latencies are merged exactly per step across workers and intervals; target rate = sum over workers of the
    step's target; achieved rates = counter / seconds of load of the step; ``stable`` = every worker's end
    record calls the step stable (null when none says); ``publish_p99_bound_ms`` = the publish latency p99 bound
    they judged it by; ``reasons`` = the workers' distinct reasons."""
    by_step: dict = defaultdict(list)
    verdicts: dict = defaultdict(list)
    for f, m in metas:
        for r in phase.intervals.get(f, []):
            if r["step"] is not None:
                by_step[r["step"]].append((f, m, r))
        for e in phase.ends.get(f, []):
            for s in e["sweep_steps"] or []:
                s = s or {}
                if s.get("step") is not None:
                    verdicts[s["step"]].append(s)
    rows = []
    for step in sorted(by_step):
        items = by_step[step]
        records = [r for _, _, r in items]
        per_file: dict = defaultdict(list)
        for f, _, r in items:
            per_file[f].append(r["step_target_rate_msg_s"])
        busiest = _max(r["sent"] for r in records)
        threshold = max(1.0, busiest * LOAD_SHARE) if busiest is not None else 1.0
        # seconds of load: the span of the step's intervals that carried its load (at least LOAD_SHARE of its
        # busiest interval's sends); the intervals after its last send count their acknowledgements, not their time
        load = [r for r in records if r["sent"] is not None and r["sent"] >= threshold]
        seconds = _span_s((r["start_ns"] for r in load), (r["end_ns"] for r in load))
        if seconds is None:
            seconds = _span_s((r["start_ns"] for r in records), (r["end_ns"] for r in records))
        sums = {c: _sum(r[c] for r in records) for c in ("sent", "acked", "received", "send_errors")}
        said = verdicts.get(step, [])
        stable = _min(None if s.get("stable") is None else int(s["stable"]) for s in said)
        reasons = "; ".join(sorted(set(_present(s.get("reason") for s in said))))
        bound = _max(s.get("publish_p99_bound_ms") for s in said)
        wide = hist.wide(1, None, step)
        rows.append({
            "run": run, **combo, "step": step,
            # what generated the load (e.g. pulsar-client against pulsar-client-java): the sweep's answer is the
            # client's when the client is the limit
            "client_library": _joined(m["client_library"] for _, m, _ in items),
            "client_library_version": _joined(m["client_library_version"] for _, m, _ in items),
            "target_rate_msg_s": _sum(_max(v) for v in per_file.values()),
            "publish_rate_msg_s": _per(sums["acked"], seconds),
            "send_rate_msg_s": _per(sums["sent"], seconds),
            "consume_rate_msg_s": _per(sums["received"], seconds),
            "publish_error_rate_msg_s": _per(sums["send_errors"], seconds),
            "measured_seconds": seconds,
            "workers": _distinct(m["worker"] for _, m, _ in items),
            "intervals": _distinct(r["index"] for r in records),
            "messages_sent": sums["sent"], "messages_acked": sums["acked"],
            "messages_received": sums["received"], "send_errors": sums["send_errors"],
            **_latency(wide, LATENCY),
            "stable": None if stable is None else bool(stable),
            "publish_p99_bound_ms": bound,
            "reasons": reasons or None,
        })
    highest = _max(r["target_rate_msg_s"] for r in rows if r["stable"])
    for r in rows:
        r["highest_stable_rate_msg_s"] = highest
    return rows


# -- the driver's part of the summary -----------------------------------------------------------

_PROVENANCE = converter(PROVENANCE)
_PHASE = converter(PHASE)
_PROVENANCE_NAME = re.compile(r"([^/]+?)__([^/]+)\.json$")


def _json_doc(text: str | None, convert: Callable) -> dict | None:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        value = None
    return convert(value) if isinstance(value, dict) else None


def provenance_row(uri: str, text: str | None, raw_settings: str | None) -> tuple[str, str, dict]:
    """(broker, variant, provenance columns) of provenance/<broker>__<variant>.json."""
    m = _PROVENANCE_NAME.search(uri)
    broker, variant = (m.group(1), m.group(2)) if m else ("", "")
    doc = _json_doc(text, _PROVENANCE) or {}
    durability = doc.get("durability") or {}
    settings = raw_settings if raw_settings is not None else durability.get("settings")
    return broker, variant, {
        "broker_implementation": doc.get("implementation"),
        "broker_version": doc.get("version"),
        "durability_honoured": durability.get("honoured"),
        "durability_note": durability.get("note"),
        # an object's JSON text as in the file, on one line
        "durability_settings": None if settings is None else re.sub(r"\s*\n\s*", " ", settings),
    }


def _pct(value: float | None) -> str | None:
    """Spark's format_number(value, 1)."""
    return None if value is None else f"{value:,.1f}"


def contention_rows(texts: Iterable[str | None]) -> dict[str | None, tuple[list[str], float | None]]:
    """label -> (contention reasons, the highest foreign CPU mean %) of the measured phases'
    provenance/phases/*.json (host metrics of every host during the phase)."""
    by_label: dict[str | None, tuple[set, list]] = {}
    for text in texts:
        doc = _json_doc(text, _PHASE)
        if doc is None or doc.get("phase") != "measure" or doc.get("hosts") is None:
            continue
        reasons, foreign_means = by_label.setdefault(doc.get("label"), (set(), []))
        for host, h in doc["hosts"].items():
            h = h or {}
            if h.get("other_runs"):
                reasons.add(f"contended: another brokerbench run ({', '.join(_present(h['other_runs']))}) on {host} "
                            f"during the phase (its processes: mean {_pct(h.get('other_runs_cpu_mean_percent')) or '?'}"
                            f" % CPU of all cores)")
            mean = h.get("foreign_cpu_mean_percent")
            if mean is not None and mean > FOREIGN_CPU_LIMIT_PERCENT:
                reasons.add(f"foreign load: mean {_pct(mean)} % CPU (of all cores) of processes not of this run on "
                            f"{host} during the phase (limit {FOREIGN_CPU_LIMIT_PERCENT:g} %; max "
                            f"{_pct(h.get('foreign_cpu_max_percent')) or '?'} %)")
            foreign_means.append(mean)
    return {label: (sorted(reasons), _max(means)) for label, (reasons, means) in by_label.items()}


def phase_label(workload, driver, variant) -> str:
    """The phase label of pipeline.run_phase: safe_name(workload__driver__variant__measure)."""
    return re.sub(r"[^A-Za-z0-9._=-]", "_", "__".join(_present([workload, driver, variant, "measure"])))


#: the summary's first columns: what ran (broker, its implementation and version, the client library and its
#: version), then the rest of the row's identity (COMBO)
SUMMARY_FIRST = ["broker", "broker_implementation", "broker_version", "client_library", "client_library_version",
                 "variant", "workload", "driver"]
#: the summary's columns, in order (docs/aggregation-and-report.md)
SUMMARY_COLUMNS = [
    *SUMMARY_FIRST,
    "durability_honoured", "durability_note", "durability_settings", "brokerbench_version", "client_hosts",
    "message_size_bytes", "topics", "partitions_per_topic", "producers", "consumers",
    "target_rate_msg_s", "publish_rate_msg_s", "send_rate_msg_s", "consume_rate_msg_s", "publish_error_rate_msg_s",
    "measured_seconds", "interval_s", "lead_in_s", "workers", "intervals",
    "messages_sent", "messages_acked", "messages_received", "send_errors", "backlog_end_msgs",
    *LATENCY,
    *[f"{prefix}_count" for prefix, _, _ in METRICS.values()],
    "e2e_negative_count", "latency_overflow_count",
    "client_cpu_max_percent", "client_bound", "validity_reasons", "kind", "host_foreign_cpu_mean_percent",
    "invalid_reasons", "status",
]


def finish_summary(part: dict, provenance: dict | None, contention: tuple[list[str], float | None] | None) -> dict:
    """A summary row of :func:`phase_rows` with its broker's provenance (None: nulls), the contention of its
    phase (None: none known) and its status: which rows may serve as a baseline (docs/results-format.md)."""
    row = dict(part)
    row.update(provenance or dict.fromkeys(("broker_implementation", "broker_version", "durability_honoured",
                                            "durability_note", "durability_settings")))
    seconds = row["measured_seconds"]
    row["publish_rate_msg_s"] = _per(row["messages_acked"], seconds)
    row["send_rate_msg_s"] = _per(row["messages_sent"], seconds)
    row["consume_rate_msg_s"] = _per(row["messages_received"], seconds)
    row["publish_error_rate_msg_s"] = _per(row["send_errors"], seconds)
    rate, target = row["publish_rate_msg_s"], row["target_rate_msg_s"]
    below_target = None
    if (row["kind"] in FIXED_RATE_KINDS and target is not None and target > 0 and rate is not None
            and rate < RATE_MIN_RATIO * target):
        below_target = (f"publish rate {rate:,.0f} msg/s is {rate / target * 100:,.1f} % of the target "
                        f"{target:,.0f} msg/s (minimum {RATE_MIN_RATIO * 100:g} % for a fixed-rate workload)")
    reasons, foreign = contention or (None, None)
    invalid = list(row["worker_invalid"] or []) + _present([below_target]) + list(reasons or [])
    invalid_reasons = "; ".join(_present(invalid)) if invalid else None
    partial = row["partial"]
    if partial is not None and invalid_reasons is not None:
        status = f"{partial} | invalid: {invalid_reasons}"
    elif partial is not None:
        status = partial
    elif invalid_reasons is not None:
        status = f"invalid: {invalid_reasons}"
    else:
        status = "ok"
    row.update({
        "e2e_negative_count": row["e2e_latency_negative_count"] or 0,
        "latency_overflow_count": sum((row[f"{prefix}_overflow_count"] or 0) for prefix, _, _ in METRICS.values()),
        "validity_reasons": row["validity_reasons"] or None,
        "host_foreign_cpu_mean_percent": foreign,
        "invalid_reasons": invalid_reasons,
        "status": status,
    })
    return {"run": row["run"], **{c: row[c] for c in SUMMARY_COLUMNS}}


def _summary_type(name: str) -> T.DataType:
    if name in ("durability_honoured", "client_bound"):
        return T.BooleanType()
    if name in (*COMBO, "broker_implementation", "broker_version", "durability_note", "durability_settings",
                "client_library", "client_library_version", "brokerbench_version", "client_hosts",
                "validity_reasons", "kind", "invalid_reasons", "status"):
        return T.StringType()
    if name.endswith(("_count", "_msgs", "_bytes")) or name in (
            "topics", "partitions_per_topic", "producers", "consumers", "workers", "intervals", "messages_sent",
            "messages_acked", "messages_received", "send_errors"):
        return T.LongType()
    return T.DoubleType()


#: columns never null: the joined lists of a row's workers ("" for none), its worker count and its counts of
#: negative and overflowed latencies (0 for none)
_NEVER_NULL = ("client_library", "client_library_version", "brokerbench_version", "client_hosts", "workers",
               "e2e_negative_count", "latency_overflow_count")
#: summary.parquet's schema (docs/aggregation-and-report.md lists every column and its unit)
SUMMARY_SCHEMA = T.StructType([T.StructField(c, _summary_type(c), c not in _NEVER_NULL) for c in SUMMARY_COLUMNS])
#: timeseries.csv's columns, in order
TIMESERIES_COLUMNS = [
    *COMBO, "interval_index", "interval_start_s", "interval_seconds", "drain_interval", "workers",
    "publish_rate_msg_s", "send_rate_msg_s", "consume_rate_msg_s", "publish_error_rate_msg_s", "backlog_msgs",
    *SERIES_LATENCY,
]
