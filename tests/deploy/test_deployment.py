"""brokerbench deployed as users run it: a real Airflow with a scheduler, driven through its REST API.

PostgreSQL metadata database, api-server, scheduler, dag-processor and
triggerer with LocalExecutor (tests/deploy/harness.py), the project's DAGs and
plugin, three runs of real measurements on loopback RabbitMQ:

- a manual run of the smoke DAG with params (succeeds, its Report link opens);
- a bad conf (refused by the API, naming the param);
- the nightly DAG unpaused, which starts its due scheduled run; a manual run of
  the same DAG queued behind it; the README's backfill command over 2 dates, at
  a rate no client here reaches (its rows must come out invalid and stay out of
  the baseline);
- the scheduled run stopped from the API while it loads the broker (must end
  failed, with its workers gone within 10 s).

Then: no two runs measured at the same time (task start/end times), each run's
final state, no process left, and the Report link drawn in Airflow's own UI in
headless Chromium.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from harness import Deployment

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(2400)]

RABBIT = {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "warmup_duration_minutes": 0.05}
SMOKE = "brokerbench_smoke"
NIGHTLY = "brokerbench_nightly_latency"
GROUP = "benchmark.rabbitmq__fsync_off"
TERMINAL = {"success", "failed"}


def _t(ts: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")) if ts else None


def _chromium_exe() -> str:
    exe = shutil.which("chromium")
    if not exe:
        raise RuntimeError("Debian's chromium is not installed; include/infra/local/bootstrap.sh installs it as root")
    return exe


def _chromium(url: str, output: list[str], budget_ms: int) -> str:
    """Debian's Chromium, headless, with a fresh profile and no background traffic (this machine has no network)."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [_chromium_exe(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--window-size=1400,1000",
             *output, url], capture_output=True, text=True, timeout=120)
    return out.stdout


def chromium_dom(url: str, budget_ms: int = 20000) -> str:
    return _chromium(url, ["--dump-dom"], budget_ms)


def chromium_screenshot(url: str, path: Path, budget_ms: int = 20000) -> None:
    _chromium(url, [f"--screenshot={path}"], budget_ms)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployment")
    d = Deployment(root)
    try:
        d.start()
        yield d
    finally:
        d.stop()


def test_runs_measure_one_at_a_time_and_end_in_the_right_state(deployment):
    d = deployment
    dags = d.wait_for("the suite DAGs to be parsed",
                      lambda: {x["dag_id"] for x in d.ok("GET", "/dags", params={"limit": 100})["dags"]}
                      >= {SMOKE, NIGHTLY} or None, 240)
    assert dags
    # the README's deployment steps: the pool, unpause the DAG to trigger
    d.ok("POST", "/pools", json={"name": "brokerbench_local", "slots": 1,
                                 "description": "brokerbench: tasks that load the local environment's hosts"})
    d.ok("PATCH", f"/dags/{SMOKE}", json={"is_paused": False})

    # 1. a manual run with params
    m1 = d.ok("POST", f"/dags/{SMOKE}/dagRuns",
              json={"logical_date": None, "conf": {**RABBIT, "test_duration_minutes": 0.25}})["dag_run_id"]

    # 2. a bad conf is refused before any run exists, naming the param
    bad = d.api("POST", f"/dags/{SMOKE}/dagRuns", json={"logical_date": None, "conf": {"brokers": ["activemq"]}})
    assert bad.status_code == 400, bad.text
    assert "param brokers" in bad.json()["detail"]

    # 3. unpausing the nightly DAG starts its due scheduled run (all brokers, the suite's 2-minute phases);
    #    a manual run of the same DAG queues behind it; then the README's backfill command, at a rate no
    #    client reaches here (its rows must come out invalid)
    d.ok("PATCH", f"/dags/{NIGHTLY}", json={"is_paused": False})
    scheduled = d.wait_for("the nightly DAG's due run", lambda: next(
        (r["dag_run_id"] for r in d.runs(NIGHTLY) if r["run_type"] == "scheduled"), None), 120)
    c = d.ok("POST", f"/dags/{NIGHTLY}/dagRuns",
             json={"logical_date": None, "conf": {**RABBIT, "test_duration_minutes": 0.25}})["dag_run_id"]
    assert d.run(NIGHTLY, c)["state"] == "queued"
    backfill_conf = {**RABBIT, "test_duration_minutes": 0.25, "rate_override_msg_s": 2_000_000}
    d.airflow("backfill", "create", "--dag-id", NIGHTLY, "--from-date", "2026-11-01", "--to-date", "2026-11-02",
              "--max-active-runs", "1", "--dag-run-conf", json.dumps(backfill_conf))
    backfills = d.wait_for("the backfill's runs", lambda: [r["dag_run_id"] for r in d.runs(NIGHTLY)
                                                           if r["run_type"] == "backfill"] or None, 120)
    assert len(backfills) == 2, backfills

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
    runs = {SMOKE: [m1], NIGHTLY: [scheduled, c, *backfills]}
    final = d.wait_for("every run to finish", lambda: _final_states(d, runs), 1800, poll_s=5)
    timeline = _timeline(d, runs)
    _print_timeline(timeline, final)

    # -- measured phases never overlapped (nor did any run's hold on the hosts) -----------------------
    spans = sorted((s, e, run, task) for run, tasks in timeline.items() for task, (s, e) in tasks.items()
                   if task.endswith((".warmup", ".measure", ".deploy", ".undeploy", ".prepare_topics")) and s)
    for (s1, e1, r1, t1), (s2, e2, r2, t2) in zip(spans, spans[1:]):
        if r1 != r2:
            assert e1 is not None and e1 <= s2, f"{r1} {t1} ({s1}..{e1}) overlaps {r2} {t2} (from {s2})"

    # -- final states ------------------------------------------------------------------------------------
    assert final[(SMOKE, m1)] == "success"
    assert final[(NIGHTLY, c)] == "success"
    assert final[(NIGHTLY, scheduled)] == "failed"
    for b in backfills:
        assert final[(NIGHTLY, b)] == "success"
    s_tis = {ti["task_id"]: ti["state"] for ti in d.task_instances(NIGHTLY, scheduled)}
    assert s_tis[loading["task_id"]] == "failed", s_tis
    assert s_tis["teardown"] == "success" and s_tis["release_environment"] == "success", s_tis
    assert s_tis["run_outcome"] == "failed", s_tis

    # -- invalid rows are marked, kept, and stay out of the baseline ----------------------------------
    results = d.root / "results"
    for b in backfills:
        run_dir = next((results / "runs" / NIGHTLY).glob(_safe(b)))
        with open(run_dir / "summary" / "summary.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and all(str(r["status"]).startswith("invalid") for r in rows), rows
        verdicts = json.loads((run_dir / "summary" / "regression.json").read_text())["verdicts"]
        assert verdicts and all(v["verdict"] != "regressed" and "invalid" in json.dumps(v) for v in verdicts)

    # -- nothing left running ------------------------------------------------------------------------------
    left = [p for p in d.processes() if "BROKERBENCH_STATE_DIR" in _env(p)]
    assert not left, f"processes of the runs still alive: {[(p.pid, p.name()) for p in left]}"
    assert not list((d.root / "brokerbench-home" / "locks").glob("*.json")) or \
        all(not json.loads(f.read_text())["holders"] for f in (d.root / "brokerbench-home" / "locks").glob("*.json"))

    # -- the Report link: computed by Airflow, served by the plugin, drawn in the UI --------------------------
    links = d.ok("GET", f"/dags/{SMOKE}/dagRuns/{_q(m1)}/taskInstances/analysis.report/links")
    report_url = links["extra_links"].get("Report")
    assert report_url and report_url.startswith(("http://", "https://", "/")), links
    absolute = report_url if report_url.startswith("http") else d.url + report_url
    page = d.http.get(absolute, timeout=30)
    assert page.status_code == 200 and "rabbitmq" in page.text.lower()
    # the task's Details tab draws the extra links ("Extra Links": Report) as a user sees them
    task_page = f"{d.url}/dags/{SMOKE}/runs/{_q(m1)}/tasks/analysis.report/details"
    dom = chromium_dom(task_page)
    anchors = re.findall(r'<a[^>]*href="([^"]*)"[^>]*>Report</a>', dom)
    assert anchors and html.unescape(anchors[0]) == absolute, (anchors, dom[-2000:])
    shots = Path(os.environ.get("BROKERBENCH_SCREENSHOT_DIR") or d.root)
    shots.mkdir(parents=True, exist_ok=True)
    chromium_screenshot(task_page, shots / "task-details-report-link.png")
    chromium_screenshot(absolute, shots / "served-report.png")
    report_dom = chromium_dom(absolute)
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
            out[f"{dag}/{r}"] = {ti["task_id"]: (_t(ti["start_date"]), _t(ti["end_date"]))
                                 for ti in d.task_instances(dag, r)}
    return out


def _print_timeline(timeline: dict, final: dict) -> None:
    """Per run: when it asked for the lease, held it, loaded the hosts (warm-up start to measure end)."""
    def hms(t):
        return t.strftime("%H:%M:%S") if t else "-"

    print("\nrun timeline (UTC): asked for the lease | held the lease | warm-up + measured phase | final state")
    rows = []
    for run, tasks in timeline.items():
        ask, got = tasks.get("setup.acquire_environment", (None, None))
        rel = tasks.get("release_environment", (None, None))[1]
        phases = [v for k, v in tasks.items() if k.endswith((".warmup", ".measure")) and v[0]]
        load = (min(s for s, _ in phases), max((e for _, e in phases if e), default=None)) if phases else (None, None)
        rows.append((got or ask, run, ask, got, rel, load))
    for _, run, ask, got, rel, load in sorted(rows, key=lambda r: r[0] or dt.datetime.max.replace(
            tzinfo=dt.timezone.utc)):
        dag, rid = run.split("/", 1)
        print(f"  {run}: asked {hms(ask)} | held {hms(got)}..{hms(rel)} | load {hms(load[0])}..{hms(load[1])} | "
              f"{final[(dag, rid)]}")
