"""brokerbench: command line for people (``make bench`` calls ``bench``).

    brokerbench list                      suites, workloads, drivers, variants
    brokerbench validate [SUITE ...]      validate suite files and all they reference
    brokerbench bench --suite smoke [--conf JSON]
                                          run the suite's DAG once (airflow dags test)
                                          and print the summary and the report's path
    brokerbench aws-sweep [--dry-run]     terminate brokerbench EC2 instances of any run
                                          past their lifetime (brokerbench_aws_sweeper DAG)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

#: brokerbench's own log records in `airflow dags test` output: "<ts> [info ] MESSAGE [brokerbench] loc=..."
_OWN = re.compile(r"^\S+ \[(\w+)\s*\] (.*?)\s+\[brokerbench[\w.]*\]")
#: other lines worth showing: failures, exceptions, the run's end
_SHOW = re.compile(r"(\[error\s*\]|^\w*(Error|Exception)\b.*:|DagRun Finished|new_state=(failed|up_for_retry))")


def _terminal_line(line: str) -> str | None:
    """What of an Airflow output line to show on the terminal (None = log file only)."""
    m = _OWN.match(line)
    if m:
        level, message = m.groups()
        return message if level == "info" else f"{level.upper()}: {message}"
    if _SHOW.search(line):
        return re.sub(r"\s+(correlation_id|loc|ti_id|hostname|rows_affected)=\S+", "", line.rstrip())
    return None


def _cmd_list(_args) -> int:
    from brokerbench.spec import list_drivers, list_suites, list_variants, list_workloads

    for title, names in (("suites", list_suites()), ("workloads", list_workloads()),
                         ("drivers", list_drivers()), ("variants", list_variants())):
        print(f"{title}:")
        for n in names:
            print(f"  {n}")
    return 0


def _cmd_validate(args) -> int:
    from brokerbench.spec import SpecError, build_plan, list_suites, load_suite

    bad = 0
    for name in args.suites or list_suites():
        try:
            plan = build_plan(load_suite(name), {})
            print(f"ok     {name}: {len(plan.items)} measurements")
        except SpecError as e:
            bad += 1
            print(f"error  {e}")
    return 1 if bad else 0


def _latest_run_dir(results_root: Path, dag_id: str, since: float) -> Path | None:
    base = results_root / "runs" / dag_id
    if not base.is_dir():
        return None
    runs = [p for p in base.iterdir() if p.is_dir() and p.stat().st_mtime >= since - 1]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def _cmd_bench(args) -> int:
    from brokerbench.pipeline import default_results_root
    from brokerbench.spec import SpecError, load_suite

    try:
        suite = load_suite(args.suite)
    except SpecError as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return 1
    dag_id = f"brokerbench_{suite.name}".replace("-", "_")
    conf = json.loads(args.conf) if args.conf else {}
    results_root = Path(conf.get("results_root") or default_results_root())
    log_dir = results_root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{dag_id}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    cmd = ["airflow", "dags", "test", dag_id]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    print(f"brokerbench: running {dag_id} on the {conf.get('environment', suite.environment)} environment "
          f"(full log: {log_path})", flush=True)
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            shown = line.rstrip("\n") if args.verbose else _terminal_line(line)
            if shown is not None:
                print(shown, flush=True)
        rc = proc.wait()
    elapsed = time.time() - started
    run_dir = _latest_run_dir(results_root, dag_id, started)
    report = run_dir / "report.html" if run_dir else None
    if run_dir and (run_dir / "summary" / "summary.csv").exists():
        from brokerbench.report import render_text_summary

        print(render_text_summary(run_dir))
    print(f"brokerbench: {dag_id} finished in {elapsed:.0f} s with exit code {rc}")
    if report and report.exists():
        print(f"brokerbench: summary: {run_dir / 'summary' / 'summary.csv'}")
        print(f"brokerbench: report:  {report}")
    else:
        print(f"brokerbench: no report was written; see {log_path}", file=sys.stderr)
        return rc or 1
    return rc


def _cmd_aws_sweep(args) -> int:
    import logging

    from brokerbench.environments.aws_fleet import sweep_expired

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    record = sweep_expired(args.aws_conn_id, args.region or None, args.grace_minutes, args.dry_run)
    print(json.dumps(record, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="brokerbench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list suites, workloads, drivers and variants").set_defaults(fn=_cmd_list)
    p_val = sub.add_parser("validate", help="validate suites and everything they reference")
    p_val.add_argument("suites", nargs="*", help="suite names (default: all)")
    p_val.set_defaults(fn=_cmd_validate)
    p_bench = sub.add_parser("bench", help="run one suite's DAG now and print its report")
    p_bench.add_argument("--suite", default="smoke")
    p_bench.add_argument("--conf", help="params as JSON, e.g. '{\"brokers\": [\"rabbitmq\"]}'")
    p_bench.add_argument("-v", "--verbose", action="store_true", help="show the whole Airflow output")
    p_bench.set_defaults(fn=_cmd_bench)
    p_sweep = sub.add_parser("aws-sweep", help="terminate brokerbench EC2 instances past their lifetime "
                                               "(what the brokerbench_aws_sweeper DAG runs hourly)")
    p_sweep.add_argument("--aws-conn-id", default="brokerbench_aws", help="Airflow connection of the account")
    p_sweep.add_argument("--region", help="region (default: the connection's)")
    p_sweep.add_argument("--grace-minutes", type=float, default=15.0,
                         help="minutes past the brokerbench:expires-at tag before terminating (default 15)")
    p_sweep.add_argument("--dry-run", action="store_true", help="only list what would be terminated")
    p_sweep.set_defaults(fn=_cmd_aws_sweep)
    args = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
