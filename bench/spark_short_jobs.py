"""The analysis' two Spark steps on one run, with the Spark conf the Airflow operators give them and without it.

Each step handles one run: a few thousand rows, so its time is the fixed cost of a cold JVM.
``operators/spark.SHORT_JOB_CONF`` (the driver on the client compiler alone) cuts that cost. This script submits the
aggregation (spark_jobs/aggregate.py) and the history append (spark_jobs/history.py) of a copy of one run directory
exactly as the operators do (``spark-submit --master 'local[*]'``), alternating in one loop:

    before:  Spark's defaults
    after:   SHORT_JOB_CONF

and checks that both produce the same summary.csv and timeseries.csv. Prints one line per submission and the
median of each, with the ratio measured in this run:

    .venv/bin/python bench/spark_short_jobs.py --run-dir results/runs/brokerbench_smoke/<run id> [--rounds 3]

Without ``--run-dir``: the newest run under the results root (``BROKERBENCH_RESULTS_ROOT`` or ./results) that
holds worker files.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.operators.spark import SHORT_JOB_CONF  # noqa: E402

CONFS: dict[str, dict[str, str]] = {"before": {}, "after": SHORT_JOB_CONF}


def newest_run(results_root: Path) -> Path:
    runs = [d for d in (results_root / "runs").glob("*/*") if any(d.glob("raw/**/*.jsonl"))]
    if not runs:
        raise SystemExit(f"no run with worker files under {results_root}/runs: give --run-dir")
    return max(runs, key=lambda d: d.stat().st_mtime)


def submit(script: str, conf: dict[str, str], args: list[str], log: Path) -> float:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    argv = [str(bin_dir / "spark-submit"), "--master", "local[*]"]
    for k, v in conf.items():
        argv += ["--conf", f"{k}={v}"]
    argv += [str(ROOT / "spark_jobs" / script), *args]
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{script} failed ({p.returncode}): see {log}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, help="a run directory (default: the newest under the results root)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of before / after")
    args = ap.parse_args()
    source = args.run_dir or newest_run(Path(os.environ.get("BROKERBENCH_RESULTS_ROOT", ROOT / "results")))
    work = Path(tempfile.mkdtemp(prefix="bb-short-jobs-"))
    print(f"run {source} (copied to {work}); load average {os.getloadavg()[0]:.2f}", flush=True)
    took: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, conf in CONFS.items():
            run = work / name / "runs" / "brokerbench_smoke" / "run"
            shutil.rmtree(work / name, ignore_errors=True)
            shutil.copytree(source, run, ignore=shutil.ignore_patterns("summary"))
            agg = submit("aggregate.py", conf, ["--run-dir", str(run)], work / f"{name}-aggregate.log")
            hist = submit("history.py", conf, ["--history-root", str(work / name / "history"), "--run-dir", str(run)],
                          work / f"{name}-history.log")
            took.setdefault((name, "aggregate"), []).append(agg)
            took.setdefault((name, "history"), []).append(hist)
            print(f"round {r + 1} {name:6s}  aggregate {agg:5.1f} s  history {hist:5.1f} s  "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
        for f in ("summary.csv", "timeseries.csv"):
            a, b = (work / n / "runs" / "brokerbench_smoke" / "run" / "summary" / f for n in CONFS)
            if not filecmp.cmp(a, b, shallow=False):
                raise SystemExit(f"{f} differs between the two confs: {a} {b}")
    print("median of", args.rounds, "rounds (same summary.csv and timeseries.csv both ways):")
    for step in ("aggregate", "history"):
        before, after = (statistics.median(took[(n, step)]) for n in CONFS)
        print(f"  {step:9s}  before {before:5.1f} s  after {after:5.1f} s  after/before {after / before:.2f}")
    both = [statistics.median([a + h for a, h in zip(took[(n, "aggregate")], took[(n, "history")])]) for n in CONFS]
    print(f"  both       before {both[0]:5.1f} s  after {both[1]:5.1f} s  after/before {both[1] / both[0]:.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
