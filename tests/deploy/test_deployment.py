"""brokerbench deployed as teams run it nightly, driven through Airflow's REST API.

tests/deploy/harness.py starts, on loopback: PostgreSQL (metadata), RabbitMQ
(Celery broker), the api-server, scheduler, dag-processor and triggerer with
CeleryExecutor, two Celery workers that share no disk, moto's server as S3
holding the results (``s3://brokerbench-deploy/results``) and a Spark standalone
cluster as the ``brokerbench_spark`` connection. Then, with real measurements on
a loopback RabbitMQ:

- a manual run of the smoke DAG with params, whose measure task's process is killed (SIGKILL) on its Celery
  worker mid-phase: that try fails, the retry stops the leftover load generator before it measures, and the
  run succeeds; its tasks ran on both
  workers; summary, OMB JSON, history and report are in S3; its Spark
  applications ran on the cluster; its Report link is drawn in Airflow's UI
  (headless Chromium) and serves the report from S3;
- a bad conf: refused by the API, naming the param;
- the nightly DAG unpaused, which starts its due scheduled run, and the
  README's backfill command for one date at a rate no client here reaches (its
  rows must come out invalid and stay out of the baseline): both wait for the
  lease the smoke run holds;
- the scheduled run stopped from the API while it loads the broker (must end
  failed, with its workers gone within 10 s);
- the comparison DAG, started by the history asset events, reads the S3 history.

Checks at the end: no two runs measured at the same time (task start/end
times), each run's final state, the lease in S3 free, no process left.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest
from harness import BUCKET, Deployment

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.chromium import chromium  # noqa: E402

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(2400)]

RABBIT = {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "warmup_duration_minutes": 0.05}
SMOKE = "brokerbench_smoke"
NIGHTLY = "brokerbench_nightly_latency"
COMPARE = "brokerbench_compare"
TERMINAL = {"success", "failed"}


def _t(ts: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")) if ts else None


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployment")
    d = Deployment(root)
    try:
        d.start()
        yield d
    finally:
        d.stop()


def test_a_celery_deployment_measures_one_run_at_a_time_and_keeps_everything_in_s3(deployment):
    d = deployment
    dags = d.wait_for("the suite DAGs to be parsed",
                      lambda: {x["dag_id"] for x in d.ok("GET", "/dags", params={"limit": 100})["dags"]}
                      >= {SMOKE, NIGHTLY, COMPARE} or None, 240)
    assert dags
    # the README's deployment steps: the pool, unpause the DAGs to trigger
    d.ok("POST", "/pools", json={"name": "brokerbench_local", "slots": 1,
                                 "description": "brokerbench: tasks that load the local environment's hosts"})
    for dag in (SMOKE, COMPARE):
        d.ok("PATCH", f"/dags/{dag}", json={"is_paused": False})

    # 1. a manual run with params
    m1 = d.ok("POST", f"/dags/{SMOKE}/dagRuns",
              json={"logical_date": None, "conf": {**RABBIT, "test_duration_minutes": 0.25}})["dag_run_id"]

    # 1b. a crash on a Celery worker: the process running m1's measured phase gets SIGKILL 5 s into the phase
    #     (its load generator goes on sending). Airflow fails that try and retries it; the retry must stop the
    #     leftover load before it measures, and the runs after it must measure cleanly
    leftover = d.wait_for("m1's measured phase to send", lambda: next(
        (p for p in d.processes() if _is_worker_of(p, SMOKE, _safe(m1))
         and "measure" in " ".join(p.cmdline())), None), 900, poll_s=0.5)
    time.sleep(5)
    task_process = leftover.parent()
    assert task_process is not None and task_process.pid != os.getpid()
    task_process.kill()
    killed_at = dt.datetime.now(dt.timezone.utc)
    print(f"killed the process of {m1}'s measure task (pid {task_process.pid}); its worker {leftover.pid} sends on")
    leftover_gone = d.wait_for("the killed try's worker to be gone", lambda: (
        None if leftover.is_running() and leftover.status() != psutil.STATUS_ZOMBIE
        else dt.datetime.now(dt.timezone.utc)), 300, poll_s=0.5)

    # 2. a bad conf is refused before any run exists, naming the param
    bad = d.api("POST", f"/dags/{SMOKE}/dagRuns", json={"logical_date": None, "conf": {"brokers": ["activemq"]}})
    assert bad.status_code == 400, bad.text
    assert "param brokers" in bad.json()["detail"]

    # 3. unpausing the nightly DAG starts its due scheduled run (all brokers, the suite's 2-minute phases);
    #    then the README's backfill command, at a rate no client reaches here (its rows must come out
    #    invalid); both queue for the lease the smoke run holds
    d.ok("PATCH", f"/dags/{NIGHTLY}", json={"is_paused": False})
    scheduled = d.wait_for("the nightly DAG's due run", lambda: next(
        (r["dag_run_id"] for r in d.runs(NIGHTLY) if r["run_type"] == "scheduled"), None), 120)
    backfill_conf = {**RABBIT, "test_duration_minutes": 0.1, "rate_override_msg_s": 2_000_000}
    d.airflow("backfill", "create", "--dag-id", NIGHTLY, "--from-date", "2026-11-01", "--to-date", "2026-11-01",
              "--max-active-runs", "1", "--dag-run-conf", json.dumps(backfill_conf))
    backfills = d.wait_for("the backfill's run", lambda: [r["dag_run_id"] for r in d.runs(NIGHTLY)
                                                          if r["run_type"] == "backfill"] or None, 120)
    assert len(backfills) == 1, backfills

    # 4. stop the scheduled run while it loads the broker; its workers must be gone within 10 s
    loading = d.wait_for(
        "the scheduled run's first phase to start",
        lambda: next((ti for ti in d.task_instances(NIGHTLY, scheduled)
                      if ti["task_id"].endswith((".warmup", ".measure")) and ti["state"] == "running"), None),
        1500, poll_s=2)
    d.wait_for("the stopped run's workers to send", lambda: [
        p for p in d.processes() if _is_worker_of(p, NIGHTLY, "scheduled__")], 60, poll_s=0.5)
    d.ok("PATCH", f"/dags/{NIGHTLY}/dagRuns/{_q(scheduled)}", json={"state": "failed"})
    stopped_at = time.monotonic()
    leftovers = None
    while time.monotonic() - stopped_at < 10:
        leftovers = [p for p in d.processes() if _is_worker_of(p, NIGHTLY, "scheduled__")]
        if not leftovers:
            break
        time.sleep(0.5)
    assert not leftovers, f"workers of the stopped run still running 10 s after the stop: {leftovers}"
    print(f"stopped {scheduled} during {loading['task_id']}; its workers were gone after "
          f"{time.monotonic() - stopped_at:.1f} s")

    # 5. every run ends
    runs = {SMOKE: [m1], NIGHTLY: [scheduled, *backfills]}
    final = d.wait_for("every run to finish", lambda: _final_states(d, runs), 1800, poll_s=5)
    timeline = _timeline(d, runs)
    _print_timeline(timeline, final)

    # -- measured phases never overlapped (nor did any run's hold on the hosts) -----------------------
    spans = sorted((s, e, run, task) for run, tasks in timeline.items() for task, (s, e, _) in tasks.items()
                   if task.endswith((".warmup", ".measure", ".deploy", ".undeploy", ".prepare_topics")) and s)
    for (s1, e1, r1, t1), (s2, e2, r2, t2) in zip(spans, spans[1:]):
        if r1 != r2:
            assert e1 is not None and e1 <= s2, f"{r1} {t1} ({s1}..{e1}) overlaps {r2} {t2} (from {s2})"

    # -- the killed try: failed by Airflow, retried, and the retry measured without the leftover load -----------
    measure_task = "benchmark.rabbitmq__fsync_off.measure"
    tries = d.ok("GET", f"/dags/{SMOKE}/dagRuns/{_q(m1)}/taskInstances/{measure_task}/tries")["task_instances"]
    states = {t["try_number"]: t["state"] for t in tries}
    print(f"{m1} {measure_task} tries: {states}; killed at {killed_at:%H:%M:%S}, its worker gone at "
          f"{leftover_gone:%H:%M:%S}")
    assert states.get(1) == "failed" and states.get(2) == "success", states
    retry_start = _t(next(t["start_date"] for t in tries if t["try_number"] == 2))
    # the retry stopped the leftover before it measured: gone before the retry's measured phase started (the first
    # interval's start_ns in its result files in S3; the task's own start is earlier by the task process's
    # start-up, which a loaded machine stretches past 10 s)
    raw = [k for k in d.s3.keys(f"results/runs/{SMOKE}/{_safe(m1)}/raw/")
           if "/rabbitmq" in k and "/fsync-off/measure/" in k and k.endswith(".jsonl")]
    starts = [next(r["start_ns"] for r in map(json.loads, d.s3.text(k).splitlines()) if r["record"] == "interval")
              for k in raw]
    assert starts, raw
    measured_from = dt.datetime.fromtimestamp(max(starts) / 1e9, dt.timezone.utc)
    assert retry_start is not None and leftover_gone <= measured_from, (leftover_gone, retry_start, measured_from)

    # -- final states ------------------------------------------------------------------------------------
    assert final[(SMOKE, m1)] == "success"
    assert final[(NIGHTLY, scheduled)] == "failed"
    for b in backfills:
        assert final[(NIGHTLY, b)] == "success"
    s_tis = {ti["task_id"]: ti["state"] for ti in d.task_instances(NIGHTLY, scheduled)}
    assert s_tis[loading["task_id"]] == "failed", s_tis
    assert s_tis["teardown"] == "success" and s_tis["release_environment"] == "success", s_tis
    assert s_tis["run_outcome"] == "failed", s_tis

    # -- the tasks of one run ran on both workers, which share no disk ------------------------------------
    ran_on = {}
    for ti in d.task_instances(SMOKE, m1):
        if ti["state"] == "success" and ti.get("hostname"):
            ran_on.setdefault(ti["hostname"], []).append(ti["task_id"])
    print("tasks of", m1, "by worker:", json.dumps({w: sorted(t) for w, t in ran_on.items()}, indent=1))
    assert set(ran_on) == set(Deployment.WORKERS), ran_on
    for w in Deployment.WORKERS:  # each worker's staging copy holds only what its own tasks pulled or wrote
        assert (d.worker_dir(w) / "home").exists()

    # -- everything of the run is in S3 -------------------------------------------------------------------
    run_prefix = f"results/runs/{SMOKE}/{_safe(m1)}/"
    keys = set(d.s3.keys(run_prefix))
    for rel in ("plan.json", "summary/summary.csv", "summary/timeseries.csv", "summary/run_meta.json",
                "summary/regression.json", "report.html"):
        assert run_prefix + rel in keys, (rel, sorted(keys))
    for folder, suffix in (("summary/summary.parquet/", ".parquet"), ("summary/omb/", ".json")):
        assert any(k.startswith(run_prefix + folder) and k.endswith(suffix) for k in keys), (folder, sorted(keys))
    assert any(k.startswith(run_prefix + "raw/") for k in keys)
    history = d.s3.keys("results/history/")
    from brokerbench.history import history_run_key

    m1_key = history_run_key(SMOKE, m1)
    assert any(f"/run_key={m1_key}/" in k for k in history), history[:20]
    print(f"S3 keys of {m1}: {len(keys)} under s3://{BUCKET}/{run_prefix}; history files: "
          f"{[k for k in history if m1_key in k]}")

    # -- invalid rows are marked, kept, and stay out of the baseline ----------------------------------
    for b in backfills:
        prefix = f"results/runs/{NIGHTLY}/{_safe(b)}/summary/"
        rows = list(csv.DictReader(io.StringIO(d.s3.text(prefix + "summary.csv"))))
        assert rows and all(str(r["status"]).startswith("invalid") for r in rows), rows
        verdicts = json.loads(d.s3.text(prefix + "regression.json"))["verdicts"]
        assert verdicts and all(v["verdict"] != "regressed" and "invalid" in json.dumps(v) for v in verdicts)

    # -- the Spark applications ran on the standalone cluster ---------------------------------------------
    apps = d.spark.applications()
    names = sorted(a["name"] for a in apps.get("completedapps", []) + apps.get("activeapps", []))
    print("Spark applications on the cluster:", names)
    assert names.count("brokerbench-aggregate") >= 2 and names.count("brokerbench-history") >= 2, names

    # -- the comparison DAG ran from the history asset events and read the S3 history ----------------------
    # the history appends that emitted an asset event (a failed run's history task ends upstream_failed, with
    # an end date but no event)
    appended = [_t(ti["end_date"]) for dag, ids in runs.items() for r in ids for ti in d.task_instances(dag, r)
                if ti["task_id"] == "analysis.history" and ti["state"] == "success"]
    assert appended
    compares = d.wait_for("a comparison run after the last history append", lambda: [
        r for r in d.runs(COMPARE) if r["state"] == "success" and _t(r["end_date"]) > max(appended)] or None,
        300, poll_s=5)
    assert compares
    latest = d.s3.text("results/comparisons/latest.html")
    # every row of the two measured runs was read from S3: compared (status ok) or left out as invalid (runs
    # measured beside other load are invalid by design)
    compared = int(re.search(r"(\d+) history rows", latest).group(1))
    left_out = sum(int(n) for n in re.findall(r"(\d+) [a-z ]+ row\(s\)", latest))
    print(f"comparison: {compared} history row(s) compared, {left_out} left out")
    assert compared + left_out >= 2, latest[-3000:]
    link = d.ok("GET", f"/dags/{COMPARE}/dagRuns/{_q(compares[-1]['dag_run_id'])}/taskInstances/compare/links")
    assert "s3" in (link["extra_links"].get("Comparison") or ""), link

    # -- nothing left running; the lease in S3 is free -------------------------------------------------
    left = [p for p in d.processes() if "BROKERBENCH_STATE_DIR" in _env(p)]
    assert not left, f"processes of the runs still alive: {[(p.pid, p.name()) for p in left]}"
    for k in d.s3.keys("results/locks/"):
        assert not json.loads(d.s3.text(k))["holders"], k

    # -- the Report link: computed by Airflow, served by the plugin from S3, drawn in the UI ------------------
    links = d.ok("GET", f"/dags/{SMOKE}/dagRuns/{_q(m1)}/taskInstances/analysis.report/links")
    report_url = links["extra_links"].get("Report")
    assert report_url and report_url.startswith(("http://", "https://", "/")), links
    absolute = report_url if report_url.startswith("http") else d.url + report_url
    page = d.http.get(absolute, timeout=30)
    assert page.status_code == 200 and "rabbitmq" in page.text.lower()
    # the task's Details tab draws the extra links ("Extra Links": Report) as a user sees them
    shots = Path(os.environ.get("BROKERBENCH_SCREENSHOT_DIR") or d.root)
    shots.mkdir(parents=True, exist_ok=True)
    task_page = f"{d.url}/dags/{SMOKE}/runs/{_q(m1)}/tasks/analysis.report/details"
    dom = chromium(task_page, shots / "task-details-report-link.png")
    anchors = re.findall(r'<a[^>]*href="([^"]*)"[^>]*>Report</a>', dom)
    assert anchors and html.unescape(anchors[0]) == absolute, (anchors, dom[-2000:])
    report_dom = chromium(absolute, shots / "served-report.png")
    assert "brokerbench report" in report_dom and "rabbitmq" in report_dom.lower()
    print(f"screenshots: {shots / 'task-details-report-link.png'}, {shots / 'served-report.png'}")


def _q(run_id: str) -> str:
    import urllib.parse

    return urllib.parse.quote(run_id, safe="")


def _safe(run_id: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._=-]", "_", run_id)


def _env(p: psutil.Process) -> dict[str, str]:
    try:
        return p.environ()
    except (psutil.Error, OSError):
        return {}


def _is_worker_of(p: psutil.Process, dag_id: str, run_part: str) -> bool:
    env = _env(p)
    state = env.get("BROKERBENCH_STATE_DIR", "")
    return env.get("BROKERBENCH_BROKER") == "worker" and dag_id in state and run_part in state


def _final_states(d: Deployment, runs: dict[str, list[str]]) -> dict | None:
    states = {(dag, r): d.run(dag, r)["state"] for dag, ids in runs.items() for r in ids}
    return states if all(s in TERMINAL for s in states.values()) else None


def _timeline(d: Deployment, runs: dict[str, list[str]]) -> dict[str, dict[str, tuple]]:
    out = {}
    for dag, ids in runs.items():
        for r in ids:
            out[f"{dag}/{r}"] = {ti["task_id"]: (_t(ti["start_date"]), _t(ti["end_date"]), ti.get("hostname"))
                                 for ti in d.task_instances(dag, r)}
    return out


def _print_timeline(timeline: dict, final: dict) -> None:
    """Per run: when it asked for the lease, held it, loaded the hosts (warm-up start to measure end)."""
    def hms(t):
        return t.strftime("%H:%M:%S") if t else "-"

    print("\nrun timeline (UTC): asked for the lease | held the lease | warm-up + measured phase | final state")
    rows = []
    for run, tasks in timeline.items():
        ask, got, _ = tasks.get("setup.acquire_environment", (None, None, None))
        rel = tasks.get("release_environment", (None, None, None))[1]
        phases = [v for k, v in tasks.items() if k.endswith((".warmup", ".measure")) and v[0]]
        load = ((min(s for s, _, _ in phases), max((e for _, e, _ in phases if e), default=None)) if phases
                else (None, None))
        rows.append((got or ask, run, ask, got, rel, load))
    for _, run, ask, got, rel, load in sorted(rows, key=lambda r: r[0] or dt.datetime.max.replace(
            tzinfo=dt.timezone.utc)):
        dag, rid = run.split("/", 1)
        print(f"  {run}: asked {hms(ask)} | held {hms(got)}..{hms(rel)} | load {hms(load[0])}..{hms(load[1])} | "
              f"{final[(dag, rid)]}")
