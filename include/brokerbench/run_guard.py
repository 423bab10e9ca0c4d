"""A command-line run dies with its command line.

``brokerbench bench`` runs ``airflow dags test`` in a session of its own (so that Ctrl-C reaches the command
line first, which then stops the run in order). Were the command line killed outright (``kill -9``, its
terminal closed, its parent gone), that run would live on as an orphan, keep measuring and leave its brokers
running. So the command line starts a guard: a small process in yet another session that watches the command
line's process. When the command line is gone while the run still runs, the guard

1. stops the run's process group (SIGTERM, SIGKILL after :data:`STOP_GRACE_S`),
2. stops the run's workers and everything the run started, and gives the environment's lease back
   (:func:`stop_run`: the same teardown as after Ctrl-C; results already measured stay in the run directory),
3. marks the DAG run and its unfinished task instances failed in Airflow's database,

and appends what it did to the command line's log file. At the run's normal end the command line stops the
guard. The guard never outlives both: it exits once the run's process group is gone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from brokerbench.pipeline import airflow_runs, benchmark, environment_lease, teardown
from brokerbench.pipeline.context import RunContext

#: seconds between SIGTERM and SIGKILL of the run's process group
STOP_GRACE_S = 20.0
#: seconds between two looks at the command line
POLL_S = 0.5


def stop_run(suite: str, dag_id: str, run_id: str, conf: dict[str, Any]) -> str:
    """After a stopped `brokerbench bench`: stop the run's workers and everything it started, give the
    environment's lease back. Results already measured stay in the run directory."""

    ctx = RunContext(dag_id=dag_id, run_id=run_id, suite=suite, params=dict(conf))
    done = []
    try:
        with ctx.synced():
            if ctx.plan_path.exists():
                env = ctx.environment()
                done.append(f"{len(env.stop_workers())} worker(s) stopped")
                kept = benchmark.salvage_attempts(ctx.run_dir)
                if kept:
                    done.append(f"{len(kept)} result file(s) of the killed phase kept")
                record = teardown.teardown(ctx)
                done.append(f"teardown: {len(record.get('stopped', []))} process(es) stopped"
                            + (f", errors: {record['errors']}" if record.get("errors") else ""))
                done.append("lease released" if environment_lease.release_environment(ctx) else "no lease held")
            else:
                done.append("nothing to tear down (the run had not been validated)")
    except Exception as e:  # noqa: BLE001 - say what failed; the sweeper / next teardown is the fallback
        done.append(f"teardown did not complete: {type(e).__name__}: {e}")
    return f"run {run_id}: " + "; ".join(done) + f"; results kept in {ctx.run_dir}"


#: the run id `airflow dags test` created ("creating dag run ... run_id=manual__...") or finished
_RUN_ID = re.compile(r"(?:creating dag run|DagRun Finished).*?\brun_id=([^\s,]+)")


def run_id_from_line(line: str) -> str | None:
    """The run id in a line of `airflow dags test` output, if it names one."""
    m = _RUN_ID.search(line)
    return m.group(1) if m else None


def lookup_run_id(dag_id: str, logical_date: str) -> str | None:
    """Fallback when the output did not name the run (e.g. a logging level above INFO):
    the run of ``dag_id`` with our logical date, from `airflow dags list-runs`."""
    try:
        out = subprocess.run([sys.executable, "-m", "airflow", "dags", "list-runs", dag_id, "-o", "json"],
                             capture_output=True, text=True, timeout=120).stdout
        want = dt.datetime.fromisoformat(logical_date)
        for run in json.loads(out[out.index("["):]):
            ld = run.get("logical_date")
            if ld and dt.datetime.fromisoformat(str(ld).replace("Z", "+00:00")) == want:
                return run.get("run_id")
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None


def stop_group(pgid: int, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group (its task gets on_kill), SIGKILL what is left after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return
            time.sleep(0.2)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def mark_failed(dag_id: str, run_id: str) -> str:
    """The DAG run and its unfinished task instances: failed, in Airflow's database."""
    return airflow_runs.mark_failed(dag_id, run_id)


def start(pgid: int, *, cli_pid: int, suite: str, dag_id: str, logical_date: str, conf: dict[str, Any],
          log_path: Path) -> subprocess.Popen:
    """Start the guard of the run in process group ``pgid`` started by the command line ``cli_pid``."""
    cmd = [sys.executable, "-m", "brokerbench.run_guard", "--cli-pid", str(cli_pid),
           "--cli-started", repr(psutil.Process(cli_pid).create_time()), "--pgid", str(pgid), "--suite", suite,
           "--dag-id", dag_id, "--logical-date", logical_date, "--conf", json.dumps(conf), "--log", str(log_path)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(guard: subprocess.Popen) -> None:
    """The run ended with its command line alive: the guard has nothing to do."""
    if guard.poll() is None:
        guard.terminate()
        try:
            guard.wait(timeout=10)
        except subprocess.TimeoutExpired:
            guard.kill()


def _alive(pid: int, started: float) -> bool:
    """Whether process ``pid`` is still the one that started at ``started`` (pids are reused)."""
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - started) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_id(log_path: Path) -> str | None:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return next((rid for line in f if (rid := run_id_from_line(line))), None)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="brokerbench.run_guard", description=__doc__)
    ap.add_argument("--cli-pid", type=int, required=True)
    ap.add_argument("--cli-started", type=float, required=True)
    ap.add_argument("--pgid", type=int, required=True)
    ap.add_argument("--suite", required=True)
    ap.add_argument("--dag-id", required=True)
    ap.add_argument("--logical-date", required=True)
    ap.add_argument("--conf", default="{}")
    ap.add_argument("--log", type=Path, required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal is what the guard is for
    while _alive(args.cli_pid, args.cli_started):
        if not group_alive(args.pgid):
            return 0  # the run ended; the command line reports it
        time.sleep(POLL_S)
    if not group_alive(args.pgid):
        return 0
    with open(args.log, "a", encoding="utf-8") as log:
        def say(text: str) -> None:
            log.write(f"brokerbench guard: {text}\n")
            log.flush()

        say(f"the command line (pid {args.cli_pid}) is gone: stopping its run (process group {args.pgid})")
        stop_group(args.pgid)
        run_id = _run_id(args.log)
        if run_id is None:
            run_id = lookup_run_id(args.dag_id, args.logical_date)
        if run_id is None:
            say("no DAG run was created: nothing else to stop")
            return 0
        say(stop_run(args.suite, args.dag_id, run_id, json.loads(args.conf)))
        try:
            say(mark_failed(args.dag_id, run_id))
        except Exception as e:  # noqa: BLE001 - the run is stopped; its state in the database is the rest
            say(f"could not mark DAG run {run_id} failed: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
