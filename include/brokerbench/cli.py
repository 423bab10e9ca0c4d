"""brokerbench: command line for people (``make bench`` calls ``bench``).

    brokerbench list                      each suite's description, brokers (driver, client library, default
                                          version), variants and workloads (rate, message size); every workload,
                                          driver and variant; the broker versions already in the broker cache
    brokerbench history [--suite S] [--broker B] [--variant V] [--workload W] [--version V] [--last N]
                                          the runs in <results root>/history, a table per broker x workload x
                                          variant x environment: time, run id, broker version, status, figures
                                          and verdicts (no Airflow)
    brokerbench compare RUN_A RUN_B | --broker B --versions V1 V2 [--variant V] [--workload W] [--no-page]
                                          two runs, or the latest ok runs of two versions of a broker: each
                                          metric and its change from the older version to the newer, and the
                                          comparison page <results root>/comparisons/<name>/comparison.html
                                          (exit 0 compared, 1 nothing to compare, 2 refused argument)
    brokerbench validate [SUITE ...]      validate suite files and all they reference; warn where a
                                          worker process is asked for more than its client library's
                                          measured ceiling (docs/benchmarks-harness.md)
    brokerbench bench --suite smoke [--brokers kafka,rabbitmq] [--variants fsync-on] [--duration MIN]
                      [--rate MSG_S] [--trials N] [--client BROKER=LIBRARY] [--workload PATH] [--driver PATH]
                      [--conf JSON] [--fail-on regression|not-judged]
                                          run the suite's DAG once (airflow dags test)
                                          and print the summary and this run's report
                                          (an s3:// results root: its URI and the local
                                          staging copy); a refused param or a failed
                                          task is named on the terminal, the full log
                                          is <results root>/logs/<dag>-<time>-<pid>-<rand>.log
                                          (for s3://, in the local staging copy)
    brokerbench calibrate --broker rabbitmq [--seconds 10] [--warmup 5] [--rates 1000,10000] [--sizes 100,1024]
                      [--no-max] [--no-e2e] [--max-processes N]
                      [--endpoint JSON --version V] [--results-root DIR]
                                          the vendor's perf tool and brokerbench's worker on one
                                          broker (brokerbench.crosscheck); without --endpoint the
                                          local environment deploys it on loopback and tears it
                                          down; the agreement table goes to
                                          <results root>/calibration/<broker>/<UTC time>/agreement.{csv,json}
    brokerbench bisect --broker kafka --good 3.7.0 --bad 4.1.1 [--metric publish_latency_p99_ms] [--suite smoke]
                      [--variant fsync-off] [--workload W] [--trials N] [--duration MIN] [--conf JSON] [--dry-run]
                                          the first release between good and bad (final releases
                                          on Maven Central) that changed the metric: the end
                                          points, then a binary search, each step one A/B run
                                          (side A the last release without the change, side B
                                          the candidate); every step's line, and the record
                                          <results root>/bisect/<broker>-<good>-<bad>-<UTC time>/
                                          bisect.{json,html} (exit 0 found or no regression,
                                          1 not in one release or undecided, 2 refused argument)
    brokerbench aws-sweep [--dry-run]     terminate brokerbench EC2 instances of any run
                                          past their lifetime (brokerbench_aws_sweeper DAG)
    brokerbench export-metrics RUN_DIR [--out DIR]
                                          a run's broker metrics for your own Prometheus and Grafana:
                                          prometheus.yml, grafana-<broker>.json, series.openmetrics.txt
                                          (default RUN_DIR/monitoring; exit 1 no broker metrics)
    brokerbench grafana --broker kafka    a broker's Grafana dashboard (JSON) on stdout

Exit codes of ``bench`` (the run's outcome, said in its last line; docs/cli.md, docs/analytics.md "Outcome"):
    0    no regression (at least one track judged), or not judged: no baseline yet (a first run) or no valid
         measurement - the last line says NOT JUDGED and why; with --fail-on not-judged: 4
    3    regression found                          1    failed (a step failed, or no report)
    2    refused before the run (argument or param)  130  interrupted (the run was stopped and torn down)
  --fail-on not-judged gives the strict codes (CI pipelines, scheduled gates): 0 no regression, 3 regression,
  4 not judged, 1 failed; outcome.json's exit_code is always the strict one.

Works from a plain shell: without AIRFLOW_HOME it uses the project's own Airflow home (``.airflow`` next to
``dags/``; never ``~/airflow``) and creates its database on first use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from brokerbench import local_airflow, monitoring, run_guard, spec
from brokerbench.airflow_output import OutputScan, terminal_line
from brokerbench.environments.registry import environment_kind
from brokerbench.outcome import EXIT_CODES, FAIL_ON, Outcome, RunOutcome, exit_code_for, read_outcome, write_outcome
from brokerbench.pipeline.benchmark import client_rate_warnings, processes_for
from brokerbench.pipeline.context import RunContext
from brokerbench.run_guard import lookup_run_id, stop_run
from brokerbench.spec import SpecError, build_plan, list_suites, load_suite
from brokerbench.spec.params import AB_DEFAULT_TRIALS, AB_MIN_TRIALS
from brokerbench.spec.roots import default_results_root
from brokerbench.spec.run_conf import check_conf
from brokerbench.storage import aws_conn_id, is_s3, split_s3, staging_root
from brokerbench.util import dag_id_for

#: exit codes besides the outcomes' (brokerbench.outcome.exit_code_for: 0 no regression, 1 failed, 3 regression,
#: not judged 0, or 4 with --fail-on not-judged)
EXIT_FAILED = EXIT_CODES[Outcome.FAILED]
EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130

#: ``brokerbench bench --help``'s epilog: the exit codes (brokerbench.outcome)
BENCH_EXIT_CODES = """exit codes (the outcome is also the last line: brokerbench: OUTCOME: ...):
  outcome                                                   default  --fail-on not-judged
  no regression: at least one track judged, none regressed  0        0
  not judged: no baseline yet (a first run), or no valid    0        4
    measurement (the last line says NOT JUDGED and why)
  regression: at least one metric regressed                 3        3
  failed: a step failed, or no report                       1        1
  refused before the run (argument or param)                2        2
  interrupted (stopped and torn down)                       130      130
summary/outcome.json's exit_code is the strict code (the --fail-on not-judged column)."""


def _cmd_list(_args) -> int:
    from brokerbench.inventory import inventory_text

    print(inventory_text())
    return 0


def _cmd_validate(args) -> int:
    bad = 0
    for name in args.suites or list_suites():
        try:
            plan = build_plan(load_suite(name), {})
            print(f"ok     {name}: {len(plan.items)} measurements")
        except SpecError as e:
            bad += 1
            print(f"error  {e}")
            continue
        for line in client_rate_warnings(plan, processes_for(plan)):  # said, not refused
            print(f"warn   {name}: {line}")
    return 1 if bad else 0


class ConfError(ValueError):
    """--conf is not a JSON object."""


def parse_conf(text: str | None) -> dict:
    """The --conf value as a dict; ConfError (one line) when it is not a JSON object."""
    if not text:
        return {}
    try:
        conf = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfError(f"--conf is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}: {text!r}") from None
    if not isinstance(conf, dict):
        raise ConfError(f"--conf must be a JSON object such as '{{\"brokers\": [\"rabbitmq\"]}}', "
                        f"not {type(conf).__name__}: {text!r}")
    return conf


def run_dir_for(results_root: str, dag_id: str, run_id: str) -> Path:
    """The local directory of run ``run_id``: the one RunContext writes to
    (for an s3:// results root, its local staging copy)."""
    return RunContext(dag_id=dag_id, run_id=run_id, suite="", params={"results_root": results_root}).run_dir


def run_uri_for(results_root: str, dag_id: str, run_id: str) -> str:
    """Where run ``run_id`` is stored: ``s3://bucket/prefix/runs/<dag>/<run>`` or the local directory."""
    ctx = RunContext(dag_id=dag_id, run_id=run_id, suite="", params={"results_root": results_root})
    if is_s3(results_root):
        return f"{results_root.rstrip('/')}/runs/{ctx.run_key}"
    return str(ctx.run_dir)


def log_dir_for(results_root: str) -> Path:
    """Local directory for the CLI's log files: ``<results root>/logs``, for s3:// its staging copy's."""
    return staging_root(results_root) / "logs"


def log_path_for(log_dir: Path, dag_id: str, when: float | None = None, token: str | None = None) -> Path:
    """``<dag_id>-<UTC time to the ms>-<pid>-<random>.log``: one file per invocation."""
    when = time.time() if when is None else when
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when)) + f".{int(when * 1000) % 1000:03d}Z"
    token = token if token is not None else os.urandom(2).hex()
    return log_dir / f"{dag_id}-{stamp}-{os.getpid()}-{token}.log"


def open_log(log_dir: Path, dag_id: str):
    """A new log file of this invocation (never one another invocation writes)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    while True:
        path = log_path_for(log_dir, dag_id)
        try:
            return path, open(path, "x", encoding="utf-8")
        except FileExistsError:  # pragma: no cover - same pid, ms and random token
            continue


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the `airflow dags test` process group (its task gets on_kill), SIGKILL after 30 s."""
    for s, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, s)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _report_found(results_root: str, run_dir: Path, run_uri: str) -> bool:
    if (run_dir / "report.html").exists():
        return True
    if not is_s3(results_root):
        return False
    try:  # the staging copy may be elsewhere (another machine ran the report task)
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook  # Airflow: only for an s3:// root

        bucket, _ = split_s3(run_uri)
        key = run_uri[len(f"s3://{bucket}/"):] + "/report.html"
        hook = S3Hook(aws_conn_id=aws_conn_id())
        return bool(hook.check_for_key(key, bucket_name=bucket))
    except Exception:  # noqa: BLE001 - no credentials, no network: say it is not known to be there
        return False


#: ``bench`` flags for the common params: flag -> (param, how the value is read)
PARAM_FLAGS = {"brokers": ("brokers", str), "variants": ("variants", str), "duration": ("test_duration_minutes", float),
               "rate": ("rate_override_msg_s", int), "trials": ("trials", int)}


def conf_with_flags(conf: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """--conf with the param flags applied (a flag given twice the same param as --conf must agree)."""
    conf = dict(conf)
    for flag, (param, _) in PARAM_FLAGS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if param in conf and conf[param] != value:
            raise ConfError(f"--{flag} {value!r} and --conf's {param!r} {conf[param]!r} disagree: give one")
        conf[param] = value
    clients = getattr(args, "client", None) or []
    if clients:
        given = conf.get("client_libraries")
        chosen = dict(given) if isinstance(given, dict) else {}
        for text in clients:
            broker, sep, library = (part.strip() for part in text.partition("="))
            if not sep or not broker or not library:
                raise ConfError(f"--client takes BROKER=LIBRARY, e.g. --client kafka=confluent-kafka (got {text!r})")
            if chosen.get(broker, library) != library:
                raise ConfError(f"--client {text!r} and {chosen[broker]!r} for {broker} (--client or --conf's "
                                f"'client_libraries') disagree: give one")
            chosen[broker] = library
        conf["client_libraries"] = chosen  # checked with the other params (names the allowed libraries)
    return conf


def _cmd_bench(args) -> int:
    return bench_run(args)[0]


def bench_run(args) -> tuple[int, Path | None]:
    """``brokerbench bench``: run the suite's DAG once; (exit code, the run's local directory or None when no run
    was created). ``bisect`` runs each of its steps through it."""
    try:
        conf = conf_with_flags(parse_conf(args.conf), args)
    except ConfError as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_REFUSED, None
    try:
        suite = load_suite(args.suite)
        conf = spec.conf_with_files(conf, workloads=args.workload or [], drivers=args.driver or [])
        # the params Airflow and the validate task would refuse, refused now (in well under 2 s)
        conf, plan = check_conf(suite, conf)
        # what the environment refuses without the network (external: variants needing a broker restart, the
        # safety limits)
        environment_kind(plan.environment).refuse_early(plan, conf)
    except SpecError as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_REFUSED, None
    problem = local_airflow.missing()
    if problem:
        print(f"brokerbench: {problem}", file=sys.stderr)
        return EXIT_REFUSED, None
    dag_id = dag_id_for(suite.name)
    results_root = str(conf.get("results_root") or default_results_root())
    log_path, log = open_log(log_dir_for(results_root), dag_id)
    say = functools.partial(print, "brokerbench:", flush=True)
    say(f"{len(plan.items)} measurement(s) of {', '.join(sorted({i.broker for i in plan.items}))} "
        f"on the {plan.environment} environment (full log: {log_path})")
    try:
        local_airflow.ensure_database(say)
    except RuntimeError as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_FAILED, None
    # our own logical date (to the microsecond) identifies the run should the output not name it
    logical_date = dt.datetime.now(dt.timezone.utc).isoformat()
    cmd = [sys.executable, "-m", "airflow", "dags", "test", dag_id, logical_date]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    say(f"starting Airflow for {dag_id} (it parses the DAG before the first task: about 20 s)")
    started = time.time()
    scan = OutputScan()
    # should this command line be killed outright, the guard stops the run and tears it down
    guard = functools.partial(run_guard.start, cli_pid=os.getpid(), suite=suite.name, dag_id=dag_id,
                              logical_date=logical_date, conf=conf, log_path=log_path)
    with log:
        rc = _relay_dags_test(cmd, log, scan, args.verbose, guard)
    if rc is None:  # stopped: tear down what the run started (teardown always runs)
        run_id = scan.run_id or lookup_run_id(dag_id, logical_date)
        if run_id:
            print(f"brokerbench: {stop_run(suite.name, dag_id, run_id, conf)}", file=sys.stderr, flush=True)
        print(f"brokerbench: full log: {log_path}", file=sys.stderr)
        return EXIT_INTERRUPTED, run_dir_for(results_root, dag_id, run_id) if run_id else None
    say(f"{dag_id} finished in {time.time() - started:.0f} s (airflow dags test exit code {rc})")
    if rc < 0:  # the process running the tasks was killed: nothing of the run's own ran after it
        _after_killed_run(-rc, scan, suite.name, dag_id, logical_date, conf, results_root)
    code = _report_outcome(rc, scan, dag_id, logical_date, results_root, log_path, args.fail_on)
    run_id = scan.run_id or (lookup_run_id(dag_id, logical_date) if scan.run_started else None)
    return code, run_dir_for(results_root, dag_id, run_id) if run_id else None


def bench_suite(suite: str, conf: dict[str, Any], verbose: bool = False) -> tuple[int, Path | None]:
    """One run of ``suite`` with the params ``conf``, as ``brokerbench bench`` runs it (a regression fails it):
    (exit code, the run's directory or None). A bisection's step, from the command line or the bisect DAG."""
    return bench_run(argparse.Namespace(suite=suite, conf=json.dumps(conf), workload=None, driver=None,
                                        verbose=verbose, fail_on="regression"))


def _after_killed_run(signum: int, scan: OutputScan, suite: str, dag_id: str, logical_date: str,
                      conf: dict[str, Any], results_root: str) -> None:
    """`airflow dags test` (which runs the tasks in its own process) was killed by ``signum``: its teardown
    tasks never ran. Tear the run down, release the lease, mark the DAG run failed and write the outcome."""
    run_id = scan.run_id or lookup_run_id(dag_id, logical_date)
    if run_id is None:
        return
    name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
    print(f"brokerbench: airflow dags test was killed ({name}); tearing the run down", file=sys.stderr, flush=True)
    print(f"brokerbench: {stop_run(suite, dag_id, run_id, conf)}", file=sys.stderr, flush=True)
    try:
        print(f"brokerbench: {run_guard.mark_failed(dag_id, run_id)}", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - the run is torn down; its state in the database is the rest
        print(f"brokerbench: could not mark DAG run {run_id} failed: {type(e).__name__}: {e}", file=sys.stderr)
    run_dir = run_dir_for(results_root, dag_id, run_id)
    if run_dir.exists() and read_outcome(run_dir) is None:
        write_outcome(run_dir, RunOutcome(Outcome.FAILED, f"the process running the tasks (airflow dags test) "
                                                          f"was killed by {name}; the run was torn down"))


class Ticker:
    """A progress line when the terminal has been silent for ``every_s`` seconds: Airflow still starting, or
    which task is running and for how long (e.g. the Spark aggregation), so a run never looks stuck."""

    def __init__(self, scan: OutputScan, every_s: float = 15.0, out: Callable[[str], None] | None = None):
        self.scan, self.every_s = scan, every_s
        self.out = out or functools.partial(print, flush=True)
        self.started = self.last = time.monotonic()
        self._task: str | None = None
        self._task_since = self.started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="brokerbench-ticker", daemon=True)

    def shown(self) -> None:
        """A line went to the terminal."""
        self.last = time.monotonic()

    def line(self) -> str:
        now = time.monotonic()
        if self.scan.task != self._task:
            self._task, self._task_since = self.scan.task, now
        if self._task is None:
            return f"brokerbench: Airflow is starting (parsing the DAGs), {now - self.started:.0f} s"
        return f"brokerbench: {self._task} running for {now - self._task_since:.0f} s"

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self.last >= self.every_s:
                self.out(self.line())
                self.shown()

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


def _relay_dags_test(cmd: list[str], log, scan: OutputScan, verbose: bool,
                     guard: Callable[[int], subprocess.Popen] | None = None) -> int | None:
    """Run ``airflow dags test``: every line to the log and the scan, the progress lines to the terminal.
    Returns its exit code, or None when Ctrl-C, SIGTERM or SIGHUP stopped it (then the process group is
    stopped). ``guard(pgid)`` starts the process that stops the run should this one be killed outright."""
    # `airflow dags test` runs every task in its own process: the environment's lease is bound to it, so a
    # run stopped with Ctrl-C does not keep the environment until the lease expires
    env = dict(os.environ, BROKERBENCH_LEASE_BOUND_TO_PROCESS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                            start_new_session=True)
    assert proc.stdout is not None
    guarding = guard(proc.pid) if guard else None
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with Ticker(scan) as ticker:
            for line in proc.stdout:
                log.write(line)
                scan.feed(line)
                shown = line.rstrip("\n") if verbose else terminal_line(line)
                if shown is not None:
                    print(shown, flush=True)
                    ticker.shown()
        return proc.wait()
    except KeyboardInterrupt:
        print("brokerbench: stopped; stopping the run and tearing it down", file=sys.stderr, flush=True)
        _stop(proc)
        return None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if guarding is not None:
            run_guard.stop(guarding)


def _report_outcome(rc: int, scan: OutputScan, dag_id: str, logical_date: str, results_root: str,
                    log_path: Path, fail_on: str = "regression") -> int:
    """After the run: why it was refused, or where its summary and report are, which tasks failed, and last
    the outcome; returns the exit code of the outcome (brokerbench.outcome.exit_code_for: ``not judged`` is 0
    unless ``fail_on`` is ``not-judged``)."""
    if rc and not scan.run_started and scan.last_exception:
        # e.g. a param only Airflow refuses: it raises before the run exists
        print("brokerbench: no DAG run was created:", file=sys.stderr)
        for line in scan.reason:
            print(f"  {line}", file=sys.stderr)
        if any("migration" in line.lower() for line in scan.reason):
            print(f"brokerbench: the Airflow database needs `airflow db migrate` (AIRFLOW_HOME="
                  f"{os.environ.get('AIRFLOW_HOME')})", file=sys.stderr)
        print(f"brokerbench: full log: {log_path}", file=sys.stderr)
        return EXIT_REFUSED
    run_id = scan.run_id or lookup_run_id(dag_id, logical_date)  # the latter: output above INFO
    if run_id is None:
        print("brokerbench: could not tell which DAG run this was" + (":" if rc else ""), file=sys.stderr)
        for line in scan.reason if rc else []:
            print(f"  {line}", file=sys.stderr)
        print(f"brokerbench: full log: {log_path}", file=sys.stderr)
        return EXIT_FAILED
    report_found = _print_results(results_root, dag_id, run_id)
    if rc:
        failed = scan.failed_tasks()
        if failed:
            print("brokerbench: the run failed; failed task(s):", file=sys.stderr)
            for task, error in failed.items():
                print(f"  {task}: {_shorten(error) or '(no exception in the output)'}", file=sys.stderr)
        else:
            print("brokerbench: the run failed: " + "\n  ".join(scan.reason), file=sys.stderr)
    if not report_found:
        print(f"brokerbench: no report was written for run {run_id}; see {log_path}", file=sys.stderr)
    if rc:
        print(f"brokerbench: full log: {log_path}", file=sys.stderr)
    outcome = read_outcome(run_dir_for(results_root, dag_id, run_id))
    if outcome is None:  # the run's last task did not write it: the run did not end
        print(f"brokerbench: OUTCOME: FAILED: {_no_outcome_reason(scan.failed_tasks() if rc else {})}", flush=True)
        return EXIT_FAILED
    code = exit_code_for(outcome.outcome, fail_on)
    if code == 0 and (rc or not report_found):
        code = EXIT_FAILED
    elif outcome.outcome == Outcome.NOT_JUDGED and code == 0:
        print(f"brokerbench: not judged is not a failure of the run: exit code 0 (--fail-on not-judged: "
              f"{EXIT_CODES[Outcome.NOT_JUDGED]})", flush=True)
    print(f"brokerbench: OUTCOME: {outcome.headline}", flush=True)
    return code


def _no_outcome_reason(failed: Mapping[str, str]) -> str:
    """The outcome line of a run that ended before its run_outcome task wrote the outcome: the tasks that failed
    first, as the one thing a reader of the last line needs."""
    if not failed:
        return "the run ended without its outcome (run_outcome did not run)"
    names = list(failed)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{shown} failed (the run ended without its outcome: run_outcome did not run)"


def _print_results(results_root: str, dag_id: str, run_id: str) -> bool:
    """The run's text summary and where its files are; whether its report exists."""
    run_dir = run_dir_for(results_root, dag_id, run_id)
    run_uri = run_uri_for(results_root, dag_id, run_id)
    if (run_dir / "summary" / "summary.csv").exists() or (run_dir / "summary" / "sweep.csv").exists():
        from brokerbench.report.html import render_text_summary  # Plotly, matplotlib: only when a report is printed

        print(render_text_summary(run_dir))
    print(f"brokerbench: run {run_id}: {run_uri}")
    report_found = _report_found(results_root, run_dir, run_uri)
    if report_found and run_uri != str(run_dir):  # s3://: the URI, and the local staging copy if present
        print(f"brokerbench: summary: {run_uri}/summary/summary.csv")
        print(f"brokerbench: report:  {run_uri}/report.html")
        if (run_dir / "report.html").exists():
            print(f"brokerbench: local staging copy: {run_dir / 'report.html'}")
    elif report_found:
        print(f"brokerbench: summary: {run_dir / 'summary' / 'summary.csv'}")
        print(f"brokerbench: report:  {run_dir / 'report.html'}")
    return report_found


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _tables_only() -> None:
    """``history`` and ``compare`` print tables: Airflow's INFO lines (an s3:// results root's S3 hook says where
    its credentials came from) are not theirs."""
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"


def _cmd_history(args) -> int:
    from brokerbench import results_view as rv
    from brokerbench.storage import StoreUnreachable

    _tables_only()
    try:
        view = rv.history_view(str(args.results_root or default_results_root()), broker=args.broker,
                               suite=args.suite, variant=args.variant, workload=args.workload, version=args.version,
                               environment=args.environment, last=args.last)
    except rv.Refused as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except StoreUnreachable as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(view.text)
    return 0


def _cmd_compare(args) -> int:
    from brokerbench import results_view as rv
    from brokerbench.storage import StoreUnreachable

    results_root = str(args.results_root or default_results_root())
    _tables_only()
    try:
        if args.versions and args.runs:
            raise rv.Refused("give two runs (RUN_A RUN_B) or --broker B --versions V1 V2, not both")
        if args.versions and not args.broker:
            raise rv.Refused("--versions needs --broker: the broker whose versions are compared")
        if not args.versions and len(args.runs) != 2:
            raise rv.Refused(f"give two runs (RUN_A RUN_B: run ids, as brokerbench history lists them) or "
                             f"--broker B --versions V1 V2 (got {len(args.runs)} run(s))")
        rv.check_choice("--broker", args.broker, spec.SUPPORTED_BROKERS, "broker")
        rows = rv.load_rows(results_root, {"broker": args.broker} if args.broker else None)
        rv.check_filters(rows, None, args.suite, args.variant, args.workload)
        only = {"suite": args.suite, "variant": args.variant, "workload": args.workload,
                "environment": args.environment}
        if args.versions:
            said = " ".join(f"--{k} {v}" for k, v in only.items() if v is not None)
            comparison = rv.compare_versions(rv.select(rows, **only), args.broker, args.versions, said)
        else:
            comparison = rv.compare_runs(rows, args.runs[0], args.runs[1], {**only, "broker": args.broker})
    except rv.Refused as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except StoreUnreachable as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(rv.comparison_text(comparison))
    if not comparison.pairs:
        print("brokerbench: nothing to compare: no broker x workload x variant x environment has both sides "
              "(the notes above say why)", file=sys.stderr)
        return EXIT_FAILED
    if not args.no_page:
        page = rv.write_page(results_root, comparison, rv.page_name(comparison, args.broker, args.versions),
                             args.out)
        print(f"brokerbench: comparison page: {page}")
    return 0


def _cmd_bisect(args) -> int:
    from brokerbench import bisect as bs

    say = functools.partial(print, "brokerbench:", flush=True)

    def refuse(message: str) -> int:
        print(f"brokerbench: {message}", file=sys.stderr)
        return EXIT_REFUSED

    try:
        conf = conf_with_flags(parse_conf(args.conf), args)
    except ConfError as e:
        return refuse(str(e))
    try:
        plan = bs.plan(args.broker, args.good, args.bad, args.metric, args.suite, args.variant, args.workload, conf)
    except bs.Refused as e:
        return refuse(str(e))
    except bs.ReleasesUnavailable as e:
        print(f"brokerbench: {e}", file=sys.stderr)
        return EXIT_FAILED
    span = plan.releases
    say(f"{len(span)} {args.broker} releases from {args.good} to {args.bad} ({plan.maven_metadata}): "
        f"{', '.join(span)}")
    say(f"each step: one A/B run of suite {plan.suite}, {args.broker}, variant {plan.variant}"
        + (f", workload {plan.workload}" if plan.workload else "") + f", judged on {args.metric}")
    if args.dry_run:
        for line in bs.planned_steps(span):
            say(line)
        say("dry run: nothing was run")
        return 0
    out = plan.record_dir(staging_root(str(conf.get("results_root") or default_results_root())))
    params = plan.params()

    runner = plan.step_runner(functools.partial(bench_suite, plan.suite, verbose=args.verbose))

    def announced(version_a: str, version_b: str) -> bs.StepResult:
        say(f"bisect: A/B run: A {args.broker} {version_a} vs B {version_b}")
        return runner(version_a, version_b)

    def on_step(step: bs.Step, b: bs.Bisection) -> None:
        say(f"bisect step {step.step}: A {step.version_a} vs B {step.version_b}: {step.result.verdict}"
            + (f"; {step.result.suspects}" if step.result.suspects else ""))
        print(bs.steps_table(b), flush=True)
        bs.write_record(out, b, params)

    result = bs.bisect(span, announced, args.broker, args.metric, on_step)  # the table so far after each step
    bs.write_record(out, result, params)
    say(result.message)
    say(f"bisect record: {out / 'bisect.json'} and {out / 'bisect.html'}")
    return result.exit_code


def _cmd_aws_sweep(args) -> int:
    from brokerbench.environments.aws.fleet import sweep_expired  # boto3: only for the sweeper

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    record = sweep_expired(args.aws_conn_id, args.region or None, args.grace_minutes, args.dry_run)
    print(json.dumps(record, indent=2))
    return 0


def _cmd_calibrate(args) -> int:
    from brokerbench import crosscheck

    results_root = str(args.results_root or default_results_root())
    if is_s3(results_root):
        print("brokerbench: calibrate writes to a local results root (give --results-root DIR)", file=sys.stderr)
        return EXIT_REFUSED
    say = functools.partial(print, "brokerbench:", flush=True)
    kwargs = crosscheck.phase_kwargs(args)
    try:
        if args.endpoint:
            ep = json.loads(args.endpoint)
            result = crosscheck.crosscheck(args.broker, ep, args.version or ep.get("version"), say=say, **kwargs)
            files = crosscheck.write_results(result, crosscheck.calibration_dir(results_root, args.broker))
        else:
            result, files = crosscheck.calibrate_local(args.broker, results_root, say=say, **kwargs)
    except crosscheck.CrosscheckFailure as e:  # e.g. the vendor tool at the broker's version is not in the registry
        print(f"brokerbench: calibrate: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(crosscheck.format_table(result["rows"]))
    say(f"agreement table: {files['csv']} and {files['json']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="brokerbench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="each suite (description, brokers, default versions, variants, workloads' rates and "
                                "sizes), every workload, driver and variant, and the broker versions in the cache"
                   ).set_defaults(fn=_cmd_list)
    p_val = sub.add_parser("validate", help="validate suites and everything they reference")
    p_val.add_argument("suites", nargs="*", help="suite names (default: all)")
    p_val.set_defaults(fn=_cmd_validate)
    p_bench = sub.add_parser("bench", help="run one suite's DAG now and print its report",
                             description="Run one suite's DAG now (airflow dags test) and print its summary, "
                                         "report and outcome.", epilog=BENCH_EXIT_CODES,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    p_bench.add_argument("--suite", default="smoke")
    p_bench.add_argument("--conf", help="params as JSON, e.g. '{\"brokers\": [\"rabbitmq\"]}' (docs/specs.md)")
    p_bench.add_argument("--brokers", help="param brokers: e.g. kafka,rabbitmq")
    p_bench.add_argument("--variants", help="param variants: e.g. fsync-on,fsync-off")
    p_bench.add_argument("--duration", type=float, metavar="MINUTES", help="param test_duration_minutes")
    p_bench.add_argument("--rate", type=int, metavar="MSG_S", help="param rate_override_msg_s (msg/s)")
    p_bench.add_argument("--trials", type=int, help="param trials")
    p_bench.add_argument("--client", action="append", metavar="BROKER=LIBRARY",
                         help="param client_libraries: e.g. kafka=confluent-kafka (repeatable)")
    p_bench.add_argument("--workload", action="append", metavar="PATH",
                         help="an OMB workload YAML file to run instead of the suite's workloads (repeatable)")
    p_bench.add_argument("--driver", action="append", metavar="PATH",
                         help="an OMB driver YAML file replacing the suite's driver of its broker (repeatable)")
    p_bench.add_argument("--fail-on", choices=FAIL_ON, default="regression",
                         help="the least outcome that exits non-zero besides failed (1): 'regression' (default: "
                              "3; not judged exits 0) or 'not-judged' (the strict codes: not judged exits 4)")
    p_bench.add_argument("-v", "--verbose", action="store_true", help="show the whole Airflow output")
    p_bench.set_defaults(fn=_cmd_bench)
    p_hist = sub.add_parser("history", help="the runs in the results root's history: time, broker version, status, "
                                            "figures and verdicts, a table per broker x workload x variant",
                            description="The runs in <results root>/history, one table per broker x workload x "
                                        "variant x environment, oldest first, with each row's status and verdicts "
                                        "(its run's summary/regression.json). Reads files only: no Airflow.")
    p_cmp = sub.add_parser("compare", help="compare two runs, or the latest runs of two versions of a broker: a "
                                           "table of each metric's change and the comparison page",
                           description="Compare two runs (RUN_A RUN_B: run ids as `brokerbench history` lists "
                                       "them, or a prefix naming one run), or the latest ok run of each of two "
                                       "versions of one broker (--broker kafka --versions 3.9.1 4.1.1), per broker "
                                       "x workload x variant x environment: each metric on both sides and its "
                                       "change from the older broker version to the newer (version order, not the "
                                       "order measured). Writes the comparison page to "
                                       "<results root>/comparisons/<name>/comparison.html. Reads the history: no "
                                       "Airflow. Exit codes: 0 compared, 1 nothing to compare, 2 refused argument.")
    p_cmp.add_argument("runs", nargs="*", metavar="RUN", help="two runs: RUN_A RUN_B")
    p_cmp.add_argument("--versions", nargs=2, metavar=("V1", "V2"), help="two versions of --broker")
    p_cmp.add_argument("--out", metavar="DIR", help="write the page to DIR/comparison.html instead")
    p_cmp.add_argument("--no-page", action="store_true", help="only the terminal table")
    for p in (p_hist, p_cmp):
        p.add_argument("--broker", help=f"only this broker's rows ({', '.join(spec.SUPPORTED_BROKERS)})")
        p.add_argument("--suite", help="only runs of this suite")
        p.add_argument("--variant", help="only this variant (e.g. fsync-on)")
        p.add_argument("--workload", help="only this workload")
        p.add_argument("--environment", choices=["local", "aws", "external"], help="only this environment")
        p.add_argument("--results-root", help="default: BROKERBENCH_RESULTS_ROOT / the project's results/ (as bench)")
    p_hist.add_argument("--version", metavar="V", help="only this broker version")
    p_hist.add_argument("--last", type=int, default=20, metavar="N",
                        help="the last N runs of each table (default 20; 0: all)")
    p_hist.set_defaults(fn=_cmd_history)
    p_cmp.set_defaults(fn=_cmd_compare)
    p_cal = sub.add_parser("calibrate", help="the broker vendor's perf tool and brokerbench's worker on one broker: "
                                             "an agreement table in the results root")
    p_cal.add_argument("--broker", required=True, choices=["kafka", "pulsar", "rabbitmq"])
    from brokerbench.crosscheck import add_phase_arguments

    add_phase_arguments(p_cal)
    p_cal.add_argument("--endpoint", help="an already deployed broker: its endpoint as JSON (e.g. "
                                          "'{\"bootstrap_servers\": \"10.0.0.5:9092\"}'); default: deploy locally")
    p_cal.add_argument("--version", help="the deployed broker's version (with --endpoint)")
    p_cal.add_argument("--results-root", help="default: BROKERBENCH_RESULTS_ROOT / the project's results/")
    p_cal.set_defaults(fn=_cmd_calibrate)
    p_bis = sub.add_parser("bisect", help="the first release of a broker between a good and a bad one that changed "
                                          "a metric: A/B runs in a binary search",
                           description="Bisect a broker's releases between --good and --bad (inclusive; final "
                                       "releases on Maven Central, BROKERBENCH_MAVEN_MIRROR overrides its URL): "
                                       "first the end points (good against bad must show the change), then a "
                                       "binary search, each step one A/B run (`bench` with broker_versions = the "
                                       "last release without the change as side A and compare_with."
                                       "broker_versions = the candidate as side B) judged on --metric. Writes "
                                       "<results root>/bisect/<broker>-<good>-<bad>-<UTC time>/bisect.json and "
                                       "bisect.html. Exit codes: 0 found, or no regression between good and bad; "
                                       "1 not in one release (the two releases the search ended on, measured "
                                       "together, did not differ), could not decide (a step not judged twice) or the "
                                       "releases could not be read; 2 refused argument; 130 interrupted.")
    p_bis.add_argument("--broker", required=True, choices=list(spec.SUPPORTED_BROKERS),
                       help="kafka or pulsar (rabbitmq: its versions come from the Debian package)")
    p_bis.add_argument("--good", required=True, metavar="VERSION", help="a release without the change")
    p_bis.add_argument("--bad", required=True, metavar="VERSION", help="a later release with it")
    p_bis.add_argument("--metric", default="publish_latency_p99_ms", help="the metric judged (default "
                                                                           "publish_latency_p99_ms)")
    p_bis.add_argument("--suite", default="smoke")
    p_bis.add_argument("--variant", help="the one variant each step runs (default: the suite's first)")
    p_bis.add_argument("--workload", metavar="W", help="one workload of the suite (default: all of its workloads)")
    p_bis.add_argument("--trials", type=int, help=f"param trials: trials per side (A/B: at least {AB_MIN_TRIALS}, "
                                                   f"default {AB_DEFAULT_TRIALS})")
    p_bis.add_argument("--duration", type=float, metavar="MINUTES", help="param test_duration_minutes")
    p_bis.add_argument("--conf", help="more params as JSON (not brokers, variants, workloads, broker_versions, "
                                      "compare_with: bisect sets them)")
    p_bis.add_argument("--dry-run", action="store_true", help="list the releases and the first steps; run nothing")
    p_bis.add_argument("-v", "--verbose", action="store_true", help="show the whole Airflow output of each run")
    p_bis.set_defaults(fn=_cmd_bisect)
    p_sweep = sub.add_parser("aws-sweep", help="terminate brokerbench EC2 instances past their lifetime "
                                               "(what the brokerbench_aws_sweeper DAG runs hourly)")
    p_sweep.add_argument("--aws-conn-id", default="brokerbench_aws", help="Airflow connection of the account")
    p_sweep.add_argument("--region", help="region (default: the connection's)")
    p_sweep.add_argument("--grace-minutes", type=float, default=15.0,
                         help="minutes past the brokerbench:expires-at tag before terminating (default 15)")
    p_sweep.add_argument("--dry-run", action="store_true", help="only list what would be terminated")
    p_sweep.set_defaults(fn=_cmd_aws_sweep)
    p_exp = sub.add_parser("export-metrics", help="a run's broker metrics for your own stack: its Prometheus scrape "
                                                  "configuration, a Grafana dashboard per broker, its series in "
                                                  "OpenMetrics text (docs/broker-metrics.md)")
    p_exp.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory (results/runs/<dag>/<run>)")
    p_exp.add_argument("--out", help="where to write them (default RUN_DIR/monitoring)")
    p_exp.set_defaults(fn=lambda a: monitoring.export_command(a.run_dir, a.out))
    p_graf = sub.add_parser("grafana", help="print the Grafana dashboard (JSON) of a broker's catalog")
    p_graf.add_argument("--broker", required=True, choices=monitoring.CATALOG_BROKERS)
    p_graf.set_defaults(fn=lambda a: monitoring.dashboard_command(a.broker))
    args = ap.parse_args(argv)
    local_airflow.apply_defaults()  # a plain shell: the project's Airflow home, never ~/airflow
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
