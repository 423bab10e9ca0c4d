"""Synthetic worker result files in the documented format (docs/results-format.md).

Tests build run directories from *raw* samples so they know the exact truth the
aggregation must reproduce: histograms are made with
:class:`brokerbench.histogram.LogHistogram` from the raw values, exactly as the
worker does.

Two levels:

- :func:`write_worker_file` writes one ``<worker>.jsonl`` from a meta dict and
  a list of interval dicts that carry raw value lists.
- :func:`build_synthetic_run` writes a whole run directory (several brokers,
  variants, workers, intervals, a warm-up phase, provenance, plan.json) and
  returns the raw truth per combination.

And, for the report, a run as the aggregation and the verdict step leave it
(:func:`write_report_run`: summary.csv, timeseries.csv, sweep.csv, OMB
documents, regression.json), without running Spark.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from brokerbench.histogram import LogHistogram

HISTOGRAM_FIELDS = ("publish_latency_us", "publish_delay_us", "e2e_latency_us")
COUNTER_FIELDS = ("sent", "acked", "send_errors", "received", "backlog")

_DEFAULT_END = object()


def histogram_dict(values: Sequence[int] | np.ndarray) -> dict:
    """The serialised histogram of raw values (the worker's own conversion)."""
    return LogHistogram.from_values(np.asarray(values, dtype=np.int64)).to_dict()


def default_meta(**overrides: Any) -> dict:
    meta = {
        "record": "meta",
        "format_version": 1,
        "workload": "1-topic-1-partition-1kb",
        "driver": "kafka-latency",
        "broker": "kafka",
        "variant": "default",
        "phase": "measure",
        "worker": "client1-0",
        "host": "client1",
        "interval_s": 10,
        "lead_in_s": 1.5,
        "target_rate_msg_s": 1000,
        "message_size_bytes": 1024,
        "topics": 1,
        "partitions_per_topic": 1,
        "producers": 1,
        "consumers": 1,
        "client_library": "kafka-python",
        "client_library_version": "3.0.12",
        "brokerbench_version": "0.1.0",
        "start_ns": 1_700_000_000_000_000_000,
    }
    meta.update(overrides)
    return meta


def write_worker_file(
    path: str | Path,
    meta: Mapping[str, Any],
    intervals: Iterable[Mapping[str, Any]],
    end: Mapping[str, Any] | None | object = _DEFAULT_END,
) -> Path:
    """Write one worker's JSON Lines file.

    ``meta``: the meta record's fields (``record`` is added). ``intervals``:
    dicts with ``index``, ``start_ns``, ``end_ns``, the counters (default 0)
    and, for each histogram field, a list of raw integer values (µs).
    ``end``: the end record's fields; default ``{"status": "ok"}``; ``None``
    writes no end record (a worker that was killed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [dict(meta, record="meta")]
    last_end_ns = meta.get("start_ns", 0)
    for interval in intervals:
        rec: dict[str, Any] = {"record": "interval"}
        rec["index"] = interval["index"]
        rec["start_ns"] = interval["start_ns"]
        rec["end_ns"] = interval["end_ns"]
        last_end_ns = interval["end_ns"]
        for counter in COUNTER_FIELDS:
            rec[counter] = int(interval.get(counter, 0))
        for hist in HISTOGRAM_FIELDS:
            rec[hist] = histogram_dict(interval.get(hist, []))
        lines.append(rec)
    if end is _DEFAULT_END:
        end = {"status": "ok"}
    if end is not None:
        end_rec = {"record": "end", "end_ns": last_end_ns + 1_000_000, "status": "ok", "error": None, "cpu_percent": 42.0}
        end_rec.update(end)  # type: ignore[arg-type]
        lines.append(end_rec)
    with path.open("w") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    return path


# -- whole synthetic runs --------------------------------------------------------


@dataclass
class ComboTruth:
    """Raw truth of one workload x broker x driver x variant (measured phase only)."""

    workload: str
    broker: str
    driver: str
    variant: str
    samples: dict[str, list[np.ndarray]] = field(default_factory=lambda: {h: [] for h in HISTOGRAM_FIELDS})
    #: per interval index: per histogram field, the raw values of all workers
    interval_samples: dict[int, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: {c: 0 for c in COUNTER_FIELDS})
    interval_counters: dict[int, dict[str, int]] = field(default_factory=dict)
    #: backlog of each worker's last interval, summed
    backlog_end: int = 0
    starts_ns: list[int] = field(default_factory=list)
    ends_ns: list[int] = field(default_factory=list)
    interval_bounds: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    phase_start_ns: int = 0
    target_rate_msg_s: float = 0.0
    workers: int = 0
    partial_workers: list[str] = field(default_factory=list)

    def values(self, hist: str) -> np.ndarray:
        return np.concatenate(self.samples[hist]) if self.samples[hist] else np.array([], dtype=np.int64)

    def interval_values(self, index: int, hist: str) -> np.ndarray:
        return np.concatenate(self.interval_samples[index][hist])

    @property
    def measured_seconds(self) -> float:
        return (max(self.ends_ns) - min(self.starts_ns)) / 1e9

    def interval_seconds(self, index: int) -> float:
        bounds = self.interval_bounds[index]
        return (max(e for _, e in bounds) - min(s for s, _ in bounds)) / 1e9


BROKER_DRIVERS = {"kafka": "kafka-latency", "pulsar": "pulsar-latency", "rabbitmq": "rabbitmq-latency"}
BROKER_CLIENTS = {
    "kafka": ("kafka-python", "3.0.12"),
    "pulsar": ("pulsar-client", "3.13.0"),
    "rabbitmq": ("pika", "1.4.4"),
}


def build_synthetic_run(
    run_dir: str | Path,
    brokers: Sequence[str] = ("kafka", "pulsar"),
    variants: Sequence[str] = ("default", "fsync"),
    workers: int = 2,
    intervals: int = 3,
    warmup_intervals: int = 2,
    workload: str = "1-topic-16-partitions-1kb",
    samples_per_interval: int = 400,
    interval_s: int = 10,
    seed: int = 7,
    killed: Sequence[tuple[str, str, int]] = (),
    not_honoured: Mapping[tuple[str, str], str] | None = None,
    write_provenance: bool = True,
    validity: Mapping[tuple[str, str, int], dict] | None = None,
    kinds: Mapping[tuple[str, str], str] | None = None,
    target_rates: Mapping[tuple[str, str], float] | None = None,
    phases: Mapping[tuple[str, str, str], Mapping[str, dict]] | None = None,
    latency_scale: float = 1.0,
) -> dict[tuple[str, str, str, str], ComboTruth]:
    """Write a synthetic run directory and return the raw truth per combination.

    ``killed``: (broker, variant, worker number) whose measure file has no end
    record. ``not_honoured``: (broker, variant) -> note, written into the
    provenance with ``honoured: false``. Warm-up files carry much larger
    latencies (x1000) so a test notices if they leak into the summary.
    ``kinds``: (broker, variant) -> workload kind in the meta records (default:
    none, as files of workers before kinds existed). ``target_rates``:
    (broker, variant) -> target rate per worker (default 45 msg/s; each worker
    acks 40-45 msg/s). ``phases``: (broker, variant, phase) -> the ``hosts``
    of ``provenance/phases/<label>.json`` (see :func:`write_phase_record`). ``latency_scale``: every
    latency of the run multiplied by it (a faster or slower broker).
    """
    run_dir = Path(run_dir)
    rng = np.random.default_rng(seed)
    not_honoured = dict(not_honoured or {})
    base_ns = 1_700_000_000_000_000_000
    truth: dict[tuple[str, str, str, str], ComboTruth] = {}
    interval_ns = interval_s * 1_000_000_000

    for b_i, broker in enumerate(brokers):
        driver = BROKER_DRIVERS.get(broker, f"{broker}-latency")
        client, client_version = BROKER_CLIENTS.get(broker, ("client", "1.0"))
        for v_i, variant in enumerate(variants):
            combo = ComboTruth(workload, broker, driver, variant)
            truth[(workload, broker, driver, variant)] = combo
            # publish latency scale differs per combo so combos are distinguishable
            scale_us = 800.0 * (1 + b_i) * (1 + 2 * v_i) * latency_scale
            target = float((target_rates or {}).get((broker, variant), 45.0))
            for (pb, pv, phase_name), hosts in (phases or {}).items():
                if (pb, pv) == (broker, variant):
                    write_phase_record(run_dir, workload, driver, variant, phase_name, hosts)
            for phase, n_intervals in (("warmup", warmup_intervals), ("measure", intervals)):
                phase_start = base_ns + (0 if phase == "warmup" else (warmup_intervals + 1) * interval_ns)
                for w in range(workers):
                    worker = f"client{w + 1}-0"
                    # workers start a few ms apart, as real processes do
                    w_start = phase_start + w * 3_000_000
                    meta = default_meta(
                        workload=workload, driver=driver, broker=broker, variant=variant, phase=phase,
                        worker=worker, host=f"client{w + 1}", interval_s=interval_s,
                        target_rate_msg_s=target, message_size_bytes=1024, topics=1,
                        partitions_per_topic=16, producers=1, consumers=1,
                        client_library=client, client_library_version=client_version, start_ns=w_start,
                    )
                    if (kinds or {}).get((broker, variant)):
                        meta["kind"] = kinds[(broker, variant)]  # type: ignore[index]
                    recs = []
                    for i in range(n_intervals):
                        n = samples_per_interval + int(rng.integers(0, 50))
                        pub = rng.lognormal(np.log(scale_us), 0.6, n).astype(np.int64) + 1
                        delay = rng.exponential(40.0, n).astype(np.int64)
                        e2e = (pub * 1.5).astype(np.int64) + rng.integers(0, 500, n)
                        if phase == "warmup":
                            pub, delay, e2e = pub * 1000, delay * 1000, e2e * 1000
                        elif i == 1 and w == 0:
                            e2e = np.concatenate([e2e, [-5, -17]])  # clock disagreement
                        sent = n + 3
                        acked = n
                        errors = 3
                        received = len(e2e)
                        backlog = int(rng.integers(0, 20))
                        start = w_start + i * interval_ns
                        end = start + interval_ns + int(rng.integers(0, 2_000_000))
                        recs.append({
                            "index": i, "start_ns": start, "end_ns": end, "sent": sent, "acked": acked,
                            "send_errors": errors, "received": received, "backlog": backlog,
                            "publish_latency_us": pub, "publish_delay_us": delay, "e2e_latency_us": e2e,
                        })
                        if phase == "measure":
                            combo.samples["publish_latency_us"].append(pub)
                            combo.samples["publish_delay_us"].append(delay)
                            combo.samples["e2e_latency_us"].append(e2e[e2e >= 0])
                            per_i = combo.interval_samples.setdefault(i, {h: [] for h in HISTOGRAM_FIELDS})
                            per_i["publish_latency_us"].append(pub)
                            per_i["publish_delay_us"].append(delay)
                            per_i["e2e_latency_us"].append(e2e[e2e >= 0])
                            ic = combo.interval_counters.setdefault(i, {c: 0 for c in COUNTER_FIELDS})
                            for c, val in (("sent", sent), ("acked", acked), ("send_errors", errors),
                                           ("received", received), ("backlog", backlog)):
                                combo.counters[c] += val
                                ic[c] += val
                            combo.starts_ns.append(start)
                            combo.ends_ns.append(end)
                            combo.interval_bounds.setdefault(i, []).append((start, end))
                    if phase == "measure":
                        combo.backlog_end += recs[-1]["backlog"] if recs else 0
                        combo.target_rate_msg_s += target
                        combo.workers += 1
                        combo.phase_start_ns = min(combo.phase_start_ns or w_start, w_start)
                    is_killed = phase == "measure" and (broker, variant, w) in killed
                    if is_killed:
                        combo.partial_workers.append(worker)
                    path = run_dir / "raw" / workload / driver / variant / phase / f"{worker}.jsonl"
                    end_rec: dict[str, Any] = {"status": "ok"}
                    if phase == "measure" and (broker, variant, w) in (validity or {}):
                        end_rec["validity"] = dict(validity[(broker, variant, w)])  # type: ignore[index]
                    write_worker_file(path, meta, recs, end=None if is_killed else end_rec)

            if write_provenance:
                note = not_honoured.get((broker, variant))
                provenance = {
                    "broker": broker,
                    "implementation": f"{broker}-impl",
                    "version": f"{3 + b_i}.{v_i}.0",
                    "durability": {
                        "variant": variant,
                        "honoured": note is None,
                        "note": note or f"{variant} applied",
                        "settings": {"flush.messages": 1 if variant == "fsync" else None},
                    },
                }
                prov_path = run_dir / "provenance" / f"{broker}__{variant}.json"
                prov_path.parent.mkdir(parents=True, exist_ok=True)
                prov_path.write_text(json.dumps(provenance, indent=2))

    if write_provenance:
        hosts = {"hosts": [
            {"name": "localhost", "tuned": {"profile": "latency-performance", "applied": False,
                                            "reason": "tuned-adm not installed"},
             "time_sync": {"clock_offset_ms": 0.0, "note": "single host: shared clock"},
             "description": {"cpus": 2, "memory_gb": 8, "os": "Debian 12"}},
        ]}
        (run_dir / "provenance" / "hosts.json").write_text(json.dumps(hosts, indent=2))
    plan = {"suite": {"name": "synthetic-suite"}, "environment": {"name": "local"},
            "dag_id": "brokerbench_synthetic", "run_id": "manual__test"}
    (run_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    return truth


def host_summary(foreign_mean: float = 3.0, foreign_max: float = 8.0, other_runs: Sequence[str] = (),
                 other_cpu: float = 0.0, samples: int = 30) -> dict:
    """One host's entry of a phase record, as hostmetrics.summarise writes it (CPU in % of all cores)."""
    return {"role": "all", "samples": samples, "cpu_percent_avg": foreign_mean + 20.0,
            "own_cpu_mean_percent": 20.0, "foreign_cpu_mean_percent": foreign_mean,
            "foreign_cpu_max_percent": foreign_max, "unattributed_cpu_mean_percent": 0.5,
            "other_runs": list(other_runs), "other_runs_cpu_mean_percent": other_cpu,
            "other_runs_samples": samples if other_runs else 0}


def write_phase_record(run_dir: str | Path, workload: str, driver: str, variant: str, phase: str,
                       hosts: Mapping[str, dict]) -> Path:
    """``provenance/phases/<label>.json`` as brokerbench.pipeline.benchmark.run_phase writes it (label as there)."""
    import re

    label = re.sub(r"[^A-Za-z0-9._=-]", "_", f"{workload}__{driver}__{variant}__{phase}")
    path = Path(run_dir) / "provenance" / "phases" / f"{label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"phase": phase, "label": label, "page_cache": [],
                                "metrics": [{"host": h} for h in hosts], "hosts": dict(hosts)}, indent=2))
    return path


@dataclass
class StepTruth:
    """Raw truth of one sweep step of one combination (all workers)."""

    target_rate_msg_s: float = 0.0
    samples: dict[str, list[np.ndarray]] = field(default_factory=lambda: {h: [] for h in HISTOGRAM_FIELDS})
    acked: int = 0
    starts_ns: list[int] = field(default_factory=list)
    ends_ns: list[int] = field(default_factory=list)
    stable: bool = True

    def values(self, hist: str) -> np.ndarray:
        return np.concatenate(self.samples[hist])

    @property
    def seconds(self) -> float:
        return (max(self.ends_ns) - min(self.starts_ns)) / 1e9


def write_sweep_run(
    run_dir: str | Path,
    broker: str = "kafka",
    variant: str = "default",
    workload: str = "1-topic-16-partitions-1kb",
    workers: int = 2,
    step_rates: Sequence[float] = (1000.0, 5000.0, 20000.0),
    intervals_per_step: int = 2,
    unstable_from: int = 2,
    seed: int = 11,
    drain_intervals: int = 0,
) -> dict[int, StepTruth]:
    """Throughput-sweep files (phase ``sweep``) of one combination; truth per step.

    Each worker's share of a step's target is rate / workers; steps from
    ``unstable_from`` on are reported unstable by worker 0 only. ``drain_intervals``:
    intervals after each step's last full interval that count a few late acknowledgements (as
    a worker waiting for its consumers between steps writes them), the first with one message
    sent (one that crossed the interval boundary): their acknowledgements count, their time
    does not (the truth's ``seconds``).
    """
    run_dir = Path(run_dir)
    rng = np.random.default_rng(seed)
    driver = BROKER_DRIVERS.get(broker, f"{broker}-latency")
    base_ns = 1_700_000_900_000_000_000
    interval_ns = 10_000_000_000
    truth: dict[int, StepTruth] = {}
    for w in range(workers):
        worker = f"client{w + 1}-0"
        meta = default_meta(workload=workload, driver=driver, broker=broker, variant=variant, phase="sweep",
                            worker=worker, host=f"client{w + 1}", kind="throughput-sweep", start_ns=base_ns)
        recs, steps_doc = [], []
        index = 0
        for step, rate in enumerate(step_rates):
            st = truth.setdefault(step, StepTruth())
            st.target_rate_msg_s += rate / workers
            for _ in range(intervals_per_step):
                n = 200 + int(rng.integers(0, 40))
                pub = rng.lognormal(np.log(500.0 * (step + 1)), 0.5, n).astype(np.int64) + 1
                delay = rng.exponential(30.0 * (step + 1), n).astype(np.int64)
                e2e = (pub * 2).astype(np.int64)
                start = base_ns + index * interval_ns + w * 1_000_000
                end = start + interval_ns
                recs.append({"index": index, "start_ns": start, "end_ns": end, "sent": n, "acked": n,
                             "received": n, "publish_latency_us": pub, "publish_delay_us": delay,
                             "e2e_latency_us": e2e, "step": step, "step_target_rate_msg_s": rate / workers})
                for h, v in (("publish_latency_us", pub), ("publish_delay_us", delay), ("e2e_latency_us", e2e)):
                    st.samples[h].append(v)
                st.acked += n
                st.starts_ns.append(start)
                st.ends_ns.append(end)
                index += 1
            for k in range(drain_intervals):
                start = base_ns + index * interval_ns + w * 1_000_000
                late = 3
                # the first: one message that crossed the interval boundary after the step's last full interval
                recs.append({"index": index, "start_ns": start, "end_ns": start + interval_ns, "sent": int(k == 0),
                             "acked": late, "received": 0, "publish_latency_us": np.array([], dtype=np.int64),
                             "publish_delay_us": np.array([], dtype=np.int64),
                             "e2e_latency_us": np.array([], dtype=np.int64), "step": step,
                             "step_target_rate_msg_s": rate / workers})
                st.acked += late
                index += 1
            stable = not (w == 0 and step >= unstable_from)
            st.stable = st.stable and stable
            steps_doc.append({"step": step, "target_rate_msg_s": rate / workers, "achieved_rate_msg_s": rate / workers,
                              "stable": stable, "reason": None if stable else "backlog grew",
                              "publish_p99_bound_ms": 200.0})
        path = run_dir / "raw" / workload / driver / variant / "sweep" / f"{worker}.jsonl"
        lines_recs = []
        for r in recs:
            extra = {"step": r.pop("step"), "step_target_rate_msg_s": r.pop("step_target_rate_msg_s")}
            lines_recs.append((r, extra))
        write_worker_file(path, meta, [r for r, _ in lines_recs],
                          end={"status": "ok", "sweep_steps": steps_doc,
                               "highest_stable_rate_msg_s": max(d["target_rate_msg_s"] for d in steps_doc
                                                                if d["stable"])})
        # add the step fields to the interval lines
        lines = path.read_text().splitlines()
        out, k = [], 0
        for line in lines:
            rec = json.loads(line)
            if rec["record"] == "interval":
                rec.update(lines_recs[k][1])
                k += 1
            out.append(json.dumps(rec))
        path.write_text("\n".join(out) + "\n")
    return truth


# -- history store --------------------------------------------------------------


def write_history_rows(history_root: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows in the history store's layout (as spark_jobs/history.py writes them), with pyarrow.

    Partition values must be plain (letters, digits, '.', '-', '_').
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = ("broker", "broker_version", "workload", "variant", "date", "run_key")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        r = dict(r)
        r.setdefault("date", str(r.get("run_ts", "2026-01-01"))[:10])
        groups.setdefault(tuple(str(r[p]) for p in parts), []).append({k: v for k, v in r.items() if k not in parts})
    for key, group in groups.items():
        d = Path(history_root).joinpath(*(f"{p}={v}" for p, v in zip(parts, key)))
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(group), d / "part-00000.parquet")


def history_row(day: int, broker: str = "kafka", version: str = "3.8.0", p99: float = 5.0, **kw: Any) -> dict:
    """One history row of a nightly run on 2026-11-<day>; every latency stat derived from ``p99``."""
    row = {
        "run_key": f"brokerbench_nightly__scheduled__2026-11-{day:02d}", "dag_id": "brokerbench_nightly",
        "run_id": f"scheduled__2026-11-{day:02d}", "run_type": "scheduled",
        "run_ts": f"2026-11-{day:02d}T00:00:00+00:00", "environment": "local", "suite": "nightly-latency",
        "broker": broker, "broker_version": version, "broker_implementation": f"{broker}-impl",
        "workload": "w1", "driver": f"{broker}-latency", "variant": "fsync-on", "durability_honoured": True,
        "client_library": "lib", "client_library_version": "1.0", "brokerbench_version": "0.1.0",
        "target_rate_msg_s": 1000.0, "publish_rate_msg_s": 1000.0, "consume_rate_msg_s": 1000.0, "status": "ok",
        "publish_delay_p99_us": 50.0,
    }
    for prefix, scale in (("publish_latency", 1.0), ("e2e_latency", 2.0)):
        for stat, f in (("avg", 0.4), ("p50", 0.3), ("p75", 0.5), ("p95", 0.8), ("p99", 1.0), ("p999", 1.5),
                        ("p9999", 2.0), ("max", 3.0)):
            row[f"{prefix}_{stat}_ms"] = p99 * scale * f
    row.update(kw)
    return row


# -- a run as the report reads it (aggregated, verdicts written) ---------------------------

#: the reason of the invalid row of :func:`write_report_run` (as the validity rules write it)
FOREIGN_LOAD = ("foreign load: mean 43.6 % CPU (of all cores) of processes not of this run on localhost during "
                "the phase (limit 25 %; max 49.6 %)")
PARTIAL = "partial: worker client2-0 has no end record"


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


#: what each broker of :func:`write_report_run` ran: (implementation, version), as the local environment's brokers
REPORT_BROKERS = {"kafka": ("apache-kafka", "4.1.1"), "pulsar": ("apache-pulsar", "4.0.7"),
                  "rabbitmq": ("rabbitmq", "3.10.8")}


def write_report_run(run_dir: str | Path, workload: str = "1-topic-16-partitions-1kb",
                     brokers: Sequence[str] = ("kafka", "pulsar", "rabbitmq"),
                     variants: Sequence[str] = ("fsync-off", "fsync-on"), sweep: bool = True) -> Path:
    """The files a run's report reads, as the aggregation and the verdict step write them
    (docs/aggregation-and-report.md): summary/summary.csv (one row per broker x variant; kafka/fsync-on
    invalid by foreign load, pulsar/fsync-off partial), timeseries.csv (6 intervals of 10 s), OMB documents
    with quantile maps, sweep.csv (kafka and rabbitmq fsync-off, 4 steps, the last unstable) and
    regression.json (kafka/fsync-off: p99 publish latency regressed; the invalid and partial rows not judged;
    pulsar/fsync-on: insufficient history; the rest unchanged). Returns the run directory."""
    run_dir = Path(run_dir)
    summary, timeseries, verdicts = [], [], []
    for b_i, broker in enumerate(brokers):
        for v_i, variant in enumerate(variants):
            p50 = 0.8 * (1 + b_i) * (1 + 2 * v_i)
            status, reasons = "ok", ""
            if (broker, variant) == ("kafka", "fsync-on"):
                status, reasons = f"invalid: {FOREIGN_LOAD}", FOREIGN_LOAD
            elif (broker, variant) == ("pulsar", "fsync-off"):
                status = PARTIAL
            summary.append({
                "workload": workload, "broker": broker, "driver": BROKER_DRIVERS.get(broker, f"{broker}-latency"),
                "variant": variant, "broker_implementation": REPORT_BROKERS.get(broker, (f"{broker}-impl", ""))[0],
                "broker_version": REPORT_BROKERS.get(broker, ("", f"{3 + b_i}.{v_i}.0"))[1],
                "durability_honoured": True, "client_library": BROKER_CLIENTS.get(broker, ("client", "1.0"))[0],
                "client_library_version": BROKER_CLIENTS.get(broker, ("client", "1.0"))[1],
                "target_rate_msg_s": 1000.0, "publish_rate_msg_s": 1000.0 - 3.5 * b_i - v_i,
                "consume_rate_msg_s": 999.0 - 3.5 * b_i, "publish_error_rate_msg_s": 0.0,
                "measured_seconds": 60.0, "workers": 2, "messages_sent": 60000,
                "publish_latency_p50_ms": p50, "publish_latency_p99_ms": p50 * 4.5, "publish_latency_p999_ms": p50 * 9,
                "publish_latency_max_ms": p50 * 20, "e2e_latency_avg_ms": p50 * 1.6, "e2e_latency_p50_ms": p50 * 1.5,
                "e2e_latency_p99_ms": p50 * 6, "e2e_latency_max_ms": p50 * 30, "publish_delay_p99_us": 180.0 + b_i,
                "backlog_end_msgs": 3 * b_i, "invalid_reasons": reasons, "status": status,
            })
            for i in range(6):
                wobble = 1 + 0.1 * ((i * (b_i + 2)) % 3)
                timeseries.append({
                    "workload": workload, "broker": broker, "driver": summary[-1]["driver"], "variant": variant,
                    "interval_index": i, "interval_start_s": 10.0 * i, "drain_interval": False,
                    "publish_rate_msg_s": 1000.0 - i * b_i, "consume_rate_msg_s": 998.0 - i * b_i,
                    "publish_latency_p99_ms": p50 * 4.5 * wobble, "e2e_latency_p99_ms": p50 * 6 * wobble,
                    "e2e_latency_avg_ms": p50 * 1.6 * wobble,
                })
            quantiles = {str(p): p50 * f for p, f in ((50.0, 1), (90.0, 2), (99.0, 4.5), (99.9, 9), (100.0, 20))}
            omb = run_dir / "summary" / "omb" / f"{workload}__{summary[-1]['driver']}__{variant}.json"
            omb.parent.mkdir(parents=True, exist_ok=True)
            omb.write_text(json.dumps({"workload": workload, "driver": summary[-1]["driver"], "broker": broker,
                                       "variant": variant, "aggregatedPublishLatencyQuantiles": quantiles,
                                       "aggregatedEndToEndLatencyQuantiles": quantiles}))
            verdicts += _report_verdicts(summary[-1])
    _write_csv(run_dir / "summary" / "summary.csv", summary)
    _write_csv(run_dir / "summary" / "timeseries.csv", timeseries)
    if sweep:
        steps = []
        for broker, slower in (("kafka", 1.0), ("rabbitmq", 1.5)):
            for step, rate in enumerate((1000.0, 5000.0, 20000.0, 50000.0)):
                steps.append({"workload": workload, "broker": broker, "driver": BROKER_DRIVERS[broker],
                              "variant": "fsync-off", "step": step, "target_rate_msg_s": rate,
                              "publish_rate_msg_s": rate * (0.99 if step < 3 else 0.6),
                              "consume_rate_msg_s": rate * (0.99 if step < 3 else 0.55),
                              "publish_latency_p50_ms": 0.8 * 2 ** step, "publish_latency_p99_ms": 3.0 * slower * 3 ** step,
                              "e2e_latency_p99_ms": 4.0 * 3 ** step, "publish_delay_p99_us": 100.0 * 2 ** step,
                              "stable": step < 3, "reasons": "" if step < 3 else "backlog grew"})
        _write_csv(run_dir / "summary" / "sweep.csv", steps)
    (run_dir / "summary" / "regression.json").write_text(json.dumps(
        {"run_key": "brokerbench_nightly__scheduled__2026-11-20", "rule": {"baseline_runs": 30, "k": 3.0,
                                                                           "min_runs": 3, "detector": {}},
         "verdicts": verdicts}, indent=2))
    (run_dir / "plan.json").write_text(json.dumps({"suite": {"name": "nightly-latency"},
                                                   "environment": {"name": "local"}}))
    return run_dir


def _report_verdicts(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """regression.json's verdicts of one summary row of :func:`write_report_run`."""
    ident = {k: row[k] for k in ("workload", "broker", "variant", "broker_version")}
    status = str(row["status"])
    if status != "ok":
        kind, _, rest = status.partition(": ")
        return [dict(ident, metric="(all metrics)", verdict=f"not judged: {kind} ({rest})", rule="validity",
                     evidence=f"status {status}: a row whose status is not ok is never judged nor a baseline",
                     value=None, baseline_median=None, change_percent=None, baseline_n=0)]
    out = []
    for metric in ("publish_rate_msg_s", "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_p99_ms"):
        verdict, change = "unchanged", 1.0
        if (row["broker"], row["variant"]) == ("kafka", "fsync-off") and metric == "publish_latency_p99_ms":
            verdict, change = "regressed", 32.0
        elif (row["broker"], row["variant"]) == ("pulsar", "fsync-on"):
            verdict, change = "insufficient history", 0.0
        value = float(row[metric])
        out.append(dict(ident, metric=metric, verdict=verdict, rule="threshold", value=value,
                        baseline_median=round(value / (1 + change / 100), 4), change_percent=change,
                        baseline_n=2 if verdict == "insufficient history" else 12,
                        evidence=f"{metric} {value:.4g} vs median {value / (1 + change / 100):.4g}"))
    return out
