"""Aggregation wall time for 1, 10 and 100 runs of realistic size.

One synthetic run = one workload x broker x variant measured for 15 minutes
at 10-second intervals by 4 hosts x 4 worker processes: 16 worker files of
90 interval records, each record with three histograms (publish latency,
publish delay, end-to-end latency) in the worker's format. The histograms
come from lognormal / exponential samples (``--samples`` values per
histogram and interval), so bucket counts are those of real data.

For every size N the script runs ONE ``spark-submit spark_jobs/aggregate.py
--run-dir R1 ... --run-dir RN`` (the job aggregates all runs in one query, the
run as a key) and prints the wall time of the whole spark-submit, JVM start
included, and the number of Spark jobs of the application (from its event
log)::

    SPARK_LOCAL_IP=127.0.0.1 PATH=$PWD/.venv/bin:$PATH \\
      .venv/bin/python bench/aggregation_scale.py --runs 1 10 100 --master 'local[2]'

``--master`` is handed to spark-submit unchanged (the DAG takes it from the
``brokerbench_spark`` connection); nothing in the job depends on it. ``--master`` may be
repeated: every size is measured under each master, one after the other, on the same runs.
``--standalone`` adds a Spark standalone cluster started for the invocation from the
installed PySpark (tests/support/spark_standalone.py: one master and one worker on
127.0.0.1, ``--standalone-cores`` cores, ``--standalone-memory``), stopped at the end; the
runs are local files, which its executors read from the same disk (a shared filesystem)::

    SPARK_LOCAL_IP=127.0.0.1 PATH=$PWD/.venv/bin:$PATH \\
      .venv/bin/python bench/aggregation_scale.py --runs 10 --master 'local[2]' --standalone
``--job`` measures another version of the job (e.g. a copy of an older
aggregate.py) on the same generated runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.histogram import LogHistogram  # noqa: E402

JOB = ROOT / "spark_jobs" / "aggregate.py"
HOSTS, PROCESSES, MINUTES, INTERVAL_S = 4, 4, 15, 10


def histogram_pool(rng: np.random.Generator, samples: int, size: int = 24) -> dict[str, list[str]]:
    """Serialised histograms to draw from (building one per record would dominate the generation time)."""
    pool: dict[str, list[str]] = {"publish_latency_us": [], "publish_delay_us": [], "e2e_latency_us": []}
    for _ in range(size):
        pub = rng.lognormal(np.log(3000.0), 0.7, samples).astype(np.int64) + 1
        pool["publish_latency_us"].append(json.dumps(LogHistogram.from_values(pub).to_dict()))
        delay = rng.exponential(60.0, samples).astype(np.int64)
        pool["publish_delay_us"].append(json.dumps(LogHistogram.from_values(delay).to_dict()))
        e2e = (pub * 1.4).astype(np.int64) + rng.integers(0, 800, samples)
        pool["e2e_latency_us"].append(json.dumps(LogHistogram.from_values(e2e).to_dict()))
    return pool


def write_run(run_dir: Path, pool: dict[str, list[str]], samples: int, rng: np.random.Generator) -> int:
    """One 15-minute, 4-host x 4-process run; returns its size in bytes."""
    intervals = MINUTES * 60 // INTERVAL_S
    start = 1_700_000_000_000_000_000
    step = INTERVAL_S * 1_000_000_000
    total = 0
    for h in range(HOSTS):
        for p in range(PROCESSES):
            worker = f"client{h + 1}-{p}"
            meta = {"record": "meta", "format_version": 1, "workload": "1-topic-16-partitions-1kb",
                    "driver": "kafka-throughput", "broker": "kafka", "variant": "fsync-off", "phase": "measure",
                    "worker": worker, "host": f"client{h + 1}", "interval_s": INTERVAL_S,
                    "target_rate_msg_s": samples / INTERVAL_S, "message_size_bytes": 1024, "topics": 1,
                    "partitions_per_topic": 16, "producers": 1, "consumers": 1, "client_library": "kafka-python",
                    "client_library_version": "3.0.12", "brokerbench_version": "0.1.0", "kind": "latency"}
            lines = [json.dumps(meta)]
            picks = rng.integers(0, len(pool["publish_latency_us"]), size=(intervals, 3))
            for i in range(intervals):
                s = start + i * step + p * 1_000_000
                head = json.dumps({"record": "interval", "index": i, "start_ns": s, "end_ns": s + step,
                                   "sent": samples, "acked": samples, "send_errors": 0, "received": samples,
                                   "backlog": int(rng.integers(0, 50))})[:-1]
                lines.append(f'{head}, "publish_latency_us": {pool["publish_latency_us"][picks[i, 0]]}, '
                             f'"publish_delay_us": {pool["publish_delay_us"][picks[i, 1]]}, '
                             f'"e2e_latency_us": {pool["e2e_latency_us"][picks[i, 2]]}}}')
            lines.append(json.dumps({"record": "end", "end_ns": start + intervals * step, "status": "ok",
                                     "error": None, "cpu_percent": 35.0}))
            path = run_dir / "raw" / "1-topic-16-partitions-1kb" / "kafka-throughput" / "fsync-off" / "measure"
            path.mkdir(parents=True, exist_ok=True)
            text = "\n".join(lines) + "\n"
            (path / f"{worker}.jsonl").write_text(text)
            total += len(text)
    return total


def spark_submit(master: str, job: Path, args_: list[str], event_dir: Path, conf: dict[str, str] | None = None
                 ) -> tuple[float, subprocess.CompletedProcess, int | None]:
    """Run the job; (wall seconds, process, Spark jobs of the application from its event log)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    shutil.rmtree(event_dir, ignore_errors=True)
    event_dir.mkdir(parents=True)
    args = [str(bin_dir / "spark-submit"), "--master", master, "--conf", "spark.eventLog.enabled=true",
            "--conf", f"spark.eventLog.dir={event_dir.as_uri()}", "--conf", "spark.eventLog.compress=false",
            "--conf", "spark.eventLog.rolling.enabled=false"]
    for k, v in (conf or {}).items():
        args += ["--conf", f"{k}={v}"]
    args += [str(job), *args_]
    started = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    return wall, proc, spark_jobs(event_dir)


def spark_jobs(event_dir: Path) -> int | None:
    """SparkListenerJobStart events in the application's event log (None without a log)."""
    logs = [p for p in event_dir.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]
    if not logs:
        return None
    jobs = 0
    for log in logs:
        with open(log, encoding="utf-8", errors="replace") as fh:
            jobs += sum(1 for line in fh if '"Event":"SparkListenerJobStart"' in line)
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--master", action="append", help="Spark master (repeatable; default local[2])")
    ap.add_argument("--standalone", action="store_true",
                    help="also measure on a 1-worker Spark standalone cluster started for the invocation")
    ap.add_argument("--standalone-cores", type=int, default=2, help="the standalone worker's cores (%(default)s)")
    ap.add_argument("--standalone-memory", default="2g", help="the standalone worker's memory (%(default)s)")
    ap.add_argument("--samples", type=int, default=1000, help="values per histogram per interval and process")
    ap.add_argument("--workdir", help="where to write the synthetic runs (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic runs")
    ap.add_argument("--job", type=Path, default=JOB, help="the aggregation job to run (default: %(default)s)")
    args = ap.parse_args(argv)

    masters = list(args.master or ["local[2]"])
    work = Path(args.workdir or tempfile.mkdtemp(prefix="brokerbench-scale-"))
    cluster = None
    if args.standalone:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.spark_standalone import SparkStandalone

        cluster = SparkStandalone(work / "standalone", cores=args.standalone_cores, memory=args.standalone_memory)
        cluster.start(timeout_s=180)
        masters.append(cluster.master_url)
        print(f"standalone cluster: {cluster.master_url} (1 worker, {args.standalone_cores} cores, "
              f"{args.standalone_memory}; UI {cluster.webui_url})", flush=True)
    rng = np.random.default_rng(1)
    pool = histogram_pool(rng, args.samples)
    t = time.monotonic()
    template = work / "template"
    size = write_run(template, pool, args.samples, rng)
    lines = sum(1 for f in template.rglob("*.jsonl") for _ in open(f))
    print(f"one run: {HOSTS} hosts x {PROCESSES} processes, {MINUTES} min at {INTERVAL_S} s intervals = "
          f"{lines} lines, {size / 1e6:.1f} MB ({args.samples} values per histogram and interval); "
          f"generated in {time.monotonic() - t:.1f} s", flush=True)
    results: dict[str, list] = {m: [] for m in masters}
    try:
        for n in args.runs:
            base = work / f"n{n}" / "runs" / "brokerbench_scale"
            dirs = []
            for i in range(n):
                d = base / f"run{i:03d}"
                if not d.exists():
                    shutil.copytree(template / "raw", d / "raw")
                dirs.append(d)
            for master in masters:
                for d in dirs:
                    shutil.rmtree(d / "summary", ignore_errors=True)
                run_args = [a for d in dirs for a in ("--run-dir", str(d))]
                # on the standalone cluster: the worker's cores and memory
                conf = ({"spark.executor.cores": str(args.standalone_cores),
                         "spark.executor.memory": args.standalone_memory}
                        if cluster is not None and master == cluster.master_url else None)
                wall, proc, jobs = spark_submit(master, args.job, run_args, work / "eventlog", conf)
                if proc.returncode != 0:
                    print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                    return 1
                written = sum(1 for d in dirs if (d / "summary" / "summary.csv").exists())
                assert written == n, (written, n)
                results[master].append((n, n * size, wall))
                print(f"runs={n:<4d} input={n * size / 1e6:8.1f} MB  wall={wall:7.1f} s  per run={wall / n:6.2f} s  "
                      f"spark jobs={jobs}  (master {master}, job {args.job})", flush=True)
            if not args.keep:
                shutil.rmtree(work / f"n{n}")
        if cluster is not None:
            apps = cluster.applications()
            print(f"standalone cluster: {len(apps.get('completedapps', []))} completed applications "
                  f"({', '.join(sorted({a['name'] for a in apps.get('completedapps', [])}))})", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    for master, rows in results.items():
        if len(rows) >= 2:
            (n0, _, w0), (n1, _, w1) = rows[-2], rows[-1]
            print(f"marginal cost per run between {n0} and {n1} runs: {(w1 - w0) / (n1 - n0):.2f} s (master {master})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
