"""History append wall time for 1, 10 and 100 runs, and the Spark jobs it takes.

One run = the summary of a run of three brokers x two variants (six rows: the
aggregation of the tests' synthetic run, spark_jobs/aggregate.py once, not
timed) with its own ``run_meta.json`` (nightly run of another day). For every
size N the script appends N such runs to an empty history store with ONE
``spark-submit spark_jobs/history.py --history-root H --run-dir R1 ... --run-dir RN``
and prints the wall time of the whole spark-submit (JVM start included) and the
number of Spark jobs of the application (from its event log)::

    SPARK_LOCAL_IP=127.0.0.1 PATH=$PWD/.venv/bin:$PATH \\
      .venv/bin/python bench/history_scale.py --runs 1 10 100 --master 'local[2]'

``--job`` measures another version of the job on the same runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from aggregation_scale import spark_submit  # noqa: E402
from fixtures_results import build_synthetic_run  # noqa: E402

from brokerbench.history import read_history, run_meta, write_run_meta  # noqa: E402

JOB = ROOT / "spark_jobs" / "history.py"


def template_summary(work: Path, master: str) -> Path:
    """summary/ of one aggregated run (3 brokers x 2 variants)."""
    run_dir = work / "template" / "runs" / "brokerbench_nightly" / "template"
    build_synthetic_run(run_dir, brokers=("kafka", "pulsar", "rabbitmq"), variants=("fsync-off", "fsync-on"),
                        workers=2, intervals=3, samples_per_interval=100)
    wall, proc, _ = spark_submit(master, ROOT / "spark_jobs" / "aggregate.py", ["--run-dir", str(run_dir)],
                                 work / "eventlog")
    if proc.returncode != 0:
        raise SystemExit(f"aggregation of the template run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return run_dir / "summary"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", help="where to write the runs (default: a temporary directory)")
    ap.add_argument("--job", type=Path, default=JOB, help="the history job to run (default: %(default)s)")
    args = ap.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="brokerbench-history-scale-"))
    try:
        t = time.monotonic()
        summary = template_summary(work, args.master)
        print(f"one run: {sum(1 for _ in (summary / 'summary.csv').open()) - 1} summary rows; template aggregated "
              f"in {time.monotonic() - t:.1f} s", flush=True)
        results = []
        for n in args.runs:
            base = work / f"n{n}"
            shutil.rmtree(base, ignore_errors=True)
            dirs = []
            for i in range(n):
                day = f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}"
                run_id = f"scheduled__{day}T00:00:00+00:00"
                d = base / "runs" / "brokerbench_nightly" / run_id.replace(":", "_").replace("+", "_")
                shutil.copytree(summary, d / "summary", ignore=shutil.ignore_patterns("run_meta.json"))
                write_run_meta(d, run_meta("brokerbench_nightly", run_id, "scheduled", f"{day}T00:00:00+00:00",
                                           "local", "nightly-latency"))
                dirs.append(d)
            history = base / "history"
            run_args = ["--history-root", str(history)] + [a for d in dirs for a in ("--run-dir", str(d))]
            wall, proc, jobs = spark_submit(args.master, args.job, run_args, work / "eventlog")
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                return 1
            rows = len(read_history(history))
            assert len({r["run_key"] for r in read_history(history)}) == n, "every run appended once"
            results.append((n, wall))
            print(f"runs={n:<4d} rows={rows:<5d} wall={wall:7.1f} s  per run={wall / n:6.2f} s  spark jobs={jobs}  "
                  f"(master {args.master}, job {args.job})", flush=True)
            shutil.rmtree(base)
        if len(results) >= 2:
            (n0, w0), (n1, w1) = results[-2], results[-1]
            print(f"marginal cost per run between {n0} and {n1} runs: {(w1 - w0) / (n1 - n0):.2f} s")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
