"""Time to answer: seconds from the end of a run's last measured phase to its report, step by step.

Runs ``brokerbench bench`` (the smoke suite by default, one broker and variant to keep it short, or the full
suite with ``--all``) in a fresh results root, then reads the run's log: when the last ``measure done`` line was
written, when each later task started, and when the report was written. Prints one JSON line per run:

    {"suite": "smoke", "brokers": "rabbitmq", "measure_end_to_report_s": 31.2,
     "steps_s": {"benchmark...undeploy": 2.3, "analysis.aggregate": 23.1, ...}, "exit_code": 4, ...}

Usage (from the project root):  .venv/bin/python bench/time_to_answer.py [--runs 2] [--all]
The machine's load during the run is printed with it (load average before and after): the figure is meant for
an idle machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")

_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")
_TASK = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")


def _when(line: str) -> dt.datetime | None:
    m = _TS.match(line)
    return dt.datetime.fromisoformat(m.group(1)) if m else None


def timeline(log_text: str) -> dict:
    """From a run's log: the last measured phase's end, each later task's start, the report's time."""
    lines = log_text.splitlines()
    ends = [i for i, ln in enumerate(lines) if "] measure done:" in ln or "] sweep done:" in ln]
    if not ends:
        raise SystemExit("no 'measure done' line in the log: the run measured nothing")
    start_i = ends[-1]
    t0 = _when(lines[start_i])
    steps: list[tuple[str, dt.datetime]] = []
    report_at = None
    for ln in lines[start_i:]:
        when = _when(ln)
        m = _TASK.search(ln)
        if m and when:
            steps.append((m.group(1), when))
        if "[brokerbench]" in ln and "] report: " in ln and when:
            report_at = when
            break
    if t0 is None or report_at is None:
        raise SystemExit("no report line after the last measured phase in the log")
    bounds = steps + [("(report written)", report_at)]
    per_step = {name: round((bounds[k + 1][1] - when).total_seconds(), 1) for k, (name, when) in enumerate(steps)}
    return {"measure_end_to_report_s": round((report_at - t0).total_seconds(), 1), "steps_s": per_step}


def one_run(args: argparse.Namespace) -> dict:
    results = Path(tempfile.mkdtemp(prefix="bb-time-to-answer-"))
    cmd = [BROKERBENCH, "bench", "--suite", args.suite, "--duration", str(args.duration),
           "--conf", json.dumps({"results_root": str(results), "warmup_duration_minutes": 0.05})]
    if not args.all:
        cmd += ["--brokers", args.brokers, "--variants", args.variants]
    load_before = os.getloadavg()[0]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    load_after = os.getloadavg()[0]
    log = max((results / "logs").glob("*.log"), key=lambda f: f.stat().st_mtime)
    return {"suite": args.suite, "brokers": "all" if args.all else args.brokers,
            "variants": "all" if args.all else args.variants, **timeline(log.read_text()),
            "exit_code": p.returncode, "load_1min_before": round(load_before, 2),
            "load_1min_after": round(load_after, 2), "log": str(log)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="smoke")
    ap.add_argument("--brokers", default="rabbitmq")
    ap.add_argument("--variants", default="fsync-off")
    ap.add_argument("--all", action="store_true", help="every broker and variant of the suite")
    ap.add_argument("--duration", type=float, default=0.25, help="measured phase (min)")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.runs):
        print(json.dumps(one_run(args)), flush=True)


if __name__ == "__main__":
    main()
