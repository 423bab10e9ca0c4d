"""Reports served by a real Airflow api-server with the brokerbench plugin, seen by a real browser.

Starts ``airflow api-server`` on 127.0.0.1 (its own AIRFLOW_HOME and SQLite
database in a temporary directory, plugins from plugins/, the simple auth
manager with every user an admin), then:

* fetches a run's report, a summary file and a comparison over HTTP and checks
  status, content type, the refusals (traversal, a root not on the allow-list,
  an invalid token) and the 404 of an unknown run;
* opens the report's URL in Debian's Chromium (headless) with ``--dump-dom``
  and ``--screenshot`` and checks the page's DOM and that the screenshot shows
  a drawn page.

Chromium is required (CI installs the Debian package ``chromium``): when it is
missing the test fails and says so.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import free_port  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUN = ("brokerbench_smoke", "manual__2026-01-02T03_04_05_00_00")
AIRFLOW = str(Path(sys.executable).parent / "airflow")
CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Chromium is not installed: this test opens the served report in a real browser. "
                "Install the Debian package: apt-get install -y chromium")


def write_run(results: Path) -> Path:
    """A run directory with summary, time series, provenance and plan; report.html built by brokerbench.report."""
    from brokerbench.report.html import build_report

    run = results / "runs" / RUN[0] / RUN[1]
    (run / "summary").mkdir(parents=True)
    cols = ["workload", "broker", "driver", "variant", "broker_implementation", "broker_version",
            "durability_honoured", "durability_note", "target_rate_msg_s", "publish_rate_msg_s",
            "consume_rate_msg_s", "measured_seconds", "workers", "messages_sent", "publish_latency_p50_ms",
            "publish_latency_p99_ms", "e2e_latency_avg_ms", "e2e_latency_p99_ms", "publish_delay_p99_us",
            "backlog_end_msgs", "status"]
    rows = [dict(zip(cols, ["100b-1k", b, f"{b}-latency", v, impl, "1.0", honoured, note, 1000.0, 999.5, 999.0,
                            60.0, 1, 59970, p50, p99, p50 * 1.4, p99 * 1.5, 150.0, 0, "ok"]))
            for b, v, impl, honoured, note, p50, p99 in (
                ("kafka", "fsync-off", "tansu", True, "default settings", 0.8, 3.2),
                ("kafka", "fsync-on", "tansu", False, "tansu keeps messages in memory", 0.8, 3.3),
                ("rabbitmq", "fsync-on", "rabbitmq-server", True, "quorum queue, fsync", 1.9, 7.5))]
    with (run / "summary" / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    ts_cols = ["workload", "broker", "driver", "variant", "interval_index", "interval_start_s",
               "publish_rate_msg_s", "consume_rate_msg_s", "backlog_msgs", "publish_latency_p50_ms",
               "publish_latency_p99_ms", "publish_latency_avg_ms", "e2e_latency_p50_ms", "e2e_latency_p99_ms",
               "e2e_latency_avg_ms", "e2e_latency_max_ms", "publish_delay_p99_us"]
    with (run / "summary" / "timeseries.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ts_cols)
        w.writeheader()
        for r in rows:
            for i in range(6):
                p99 = r["publish_latency_p99_ms"] * (1 + 0.1 * (i % 3))
                w.writerow({"workload": r["workload"], "broker": r["broker"], "driver": r["driver"],
                            "variant": r["variant"], "interval_index": i, "interval_start_s": 10.0 * i,
                            "publish_rate_msg_s": 1000 - i, "consume_rate_msg_s": 999 - i, "backlog_msgs": i,
                            "publish_latency_p50_ms": r["publish_latency_p50_ms"], "publish_latency_p99_ms": p99,
                            "publish_latency_avg_ms": 1.0, "e2e_latency_p50_ms": 1.1, "e2e_latency_p99_ms": p99 * 1.5,
                            "e2e_latency_avg_ms": 1.3, "e2e_latency_max_ms": 9.0, "publish_delay_p99_us": 150})
    (run / "summary" / "summary.json").write_text(json.dumps(rows))
    (run / "plan.json").write_text(json.dumps({
        "format_version": 1, "suite": "smoke", "description": "served-report check", "environment": "local",
        "interval_seconds": 10, "items": []}))
    build_report(run)
    cmp = results / "comparisons" / "manual__cmp"
    cmp.mkdir(parents=True)
    (cmp / "comparison.html").write_text("<!doctype html><html><body><h1>brokerbench comparison</h1></body></html>")
    shutil.copyfile(cmp / "comparison.html", results / "comparisons" / "latest.html")
    (results / "outside.txt").write_text("must not be served")
    return run


PROBE_DAG = """
import datetime as dt
import shutil
from pathlib import Path

from airflow.sdk import DAG, BaseOperator, Param

from brokerbench.operators.links import ReportLink
from brokerbench.util import safe_name


class ProbeReportOperator(BaseOperator):
    \"\"\"Stands for the report task: puts a report in the run's directory, returns its path, has the Report link.\"\"\"

    operator_extra_links = (ReportLink(),)

    def execute(self, context):
        root = Path(context["params"]["results_root"])
        run = root / "runs" / safe_name(context["dag"].dag_id) / safe_name(context["run_id"])
        run.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE_REPORT, run / "report.html")
        return str(run / "report.html")


with DAG("bb_link_probe", start_date=dt.datetime(2026, 1, 1), schedule=None,
         params={"results_root": Param(RESULTS_ROOT, type="string")}):
    ProbeReportOperator(task_id="report")
"""


def run_probe_dag(env: dict, results: Path, base: Path) -> None:
    """``airflow dags test`` of a one-task DAG with the real ReportLink, in the api-server's database:
    Airflow computes the link on the worker side when the task ends, as in any deployment."""
    dags = base / "probe-dags"
    dags.mkdir()
    source = results / "runs" / RUN[0] / RUN[1] / "report.html"
    (dags / "bb_link_probe.py").write_text(
        f"SOURCE_REPORT = {str(source)!r}\nRESULTS_ROOT = {str(results)!r}\n" + PROBE_DAG)
    out = subprocess.run([AIRFLOW, "dags", "test", "bb_link_probe"], env={**env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]


@pytest.fixture(scope="module")
def api_server():
    """A real ``airflow api-server`` on 127.0.0.1 with the brokerbench plugin; stopped at the end."""
    base = Path(tempfile.mkdtemp(prefix="bb-api-server-"))
    results, other = base / "results", base / "other-results"
    write_run(results)
    other.mkdir()
    home = base / "airflow"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API_AUTH__JWT_SECRET": "brokerbench-test-secret",
        "BROKERBENCH_RESULTS_ROOT": str(results),
        "BROKERBENCH_SERVED_ROOTS": str(other),
        "BROKERBENCH_HOME": str(base / "brokerbench-home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, timeout=480,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run_probe_dag(env, results, base)
    log = open(base / "api-server.log", "w")
    proc = subprocess.Popen([AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"api-server exited ({proc.returncode}):\n{(base / 'api-server.log').read_text()}")
            try:
                if httpx.get(f"{url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"api-server not up after 180 s:\n{(base / 'api-server.log').read_text()}")
            time.sleep(1)
        yield {"url": url, "results": results, "other": other, "base": base, "env": env}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the group this fixture started (api-server and its worker)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def report_path() -> str:
    return f"/brokerbench/runs/{RUN[0]}/{RUN[1]}/report.html"


def test_api_server_serves_reports_and_refuses_the_rest(api_server):
    import httpx

    from brokerbench import web

    url, results = api_server["url"], api_server["results"]
    # the link the Report button gets (same-origin, relative) resolves on the api-server
    link = web.report_url(str(results), "/".join(RUN), base_url="")
    assert link.startswith(report_path() + "?root=")
    with httpx.Client(base_url=url, timeout=30) as c:
        for path in (report_path(), link):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text)
            assert r.headers["content-type"] == "text/html; charset=utf-8"
            assert r.text == (results / "runs" / RUN[0] / RUN[1] / "report.html").read_text()
        r = c.get(f"/brokerbench/runs/{RUN[0]}/{RUN[1]}/summary/summary.csv")
        assert r.status_code == 200 and r.headers["content-type"] == "text/csv; charset=utf-8"
        assert r.text.startswith("workload,broker")
        r = c.get(f"/brokerbench/runs/{RUN[0]}/{RUN[1]}/", params={"format": "json"})
        assert {"report.html", "summary/summary.csv", "plan.json"} <= {f["path"] for f in r.json()["files"]}
        for path in ("/brokerbench/comparisons/manual__cmp/comparison.html", "/brokerbench/comparisons/latest.html"):
            r = c.get(path)
            assert r.status_code == 200 and "brokerbench comparison" in r.text

        r = c.get(f"/brokerbench/runs/{RUN[0]}/{RUN[1]}/..%2F..%2F..%2Foutside.txt")
        assert r.status_code == 400 and "must not be served" not in r.text
        r = c.get("/brokerbench/comparisons/%2e%2e/outside.txt")
        assert r.status_code == 400
        r = c.get(report_path(), params={"root": "/etc"})
        assert r.status_code == 403 and "BROKERBENCH_SERVED_ROOTS" in r.json()["detail"]
        r = c.get(report_path(), params={"root": str(api_server["other"])})  # allowed, but the run is not there
        assert r.status_code == 404 and "not found under results root" in r.json()["detail"]
        r = c.get(f"/brokerbench/runs/{RUN[0]}/manual__unknown/report.html")
        assert r.status_code == 404
        assert f"runs/{RUN[0]}/manual__unknown/report.html not found" in r.json()["detail"]
        # Airflow's authentication guards the app: an explicit invalid token is refused
        r = c.get(report_path(), headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code in (401, 403), r.text
        # the plugin is known to the api-server
        plugins = c.get("/api/v2/plugins").json()["plugins"]
        mine = [p for p in plugins if p["name"] == "brokerbench"]
        assert mine and mine[0]["fastapi_apps"][0]["url_prefix"] == "/brokerbench"


def test_api_server_answers_over_long_names_without_a_500(api_server):
    """Over-long path segments, DAG ids and URLs reach the real api-server (uvicorn) and get 404 or 414."""
    import httpx

    run = f"/brokerbench/runs/{RUN[0]}/{RUN[1]}"
    cases = [
        (f"{run}/{'a' * 300}", 404),
        (f"/brokerbench/runs/{'d' * 300}/{RUN[1]}/report.html", 404),
        (f"/brokerbench/comparisons/{'c' * 300}/comparison.html", 404),
        (f"{run}/" + "/".join(["b" * 250] * 20), 404),  # each segment fits, the path is past PATH_MAX
        (f"{run}/" + "/".join(["a"] * 2000), 404),
        (f"{run}/" + "/".join(["a"] * 5000), 414),
    ]
    with httpx.Client(base_url=api_server["url"], timeout=30) as c:
        for path, status in cases:
            r = c.get(path)
            assert r.status_code == status, (path[:80], r.status_code, r.text[:300])
            assert "detail" in r.json()


def run_chromium(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="bb-chromium-")
    try:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_chromium_shows_the_served_report(api_server):
    exe = chromium()  # fails with the package name when Chromium is missing
    assert exe
    url = api_server["url"] + report_path()

    dom = run_chromium(["--dump-dom", url])
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert "<h1" in dom.stdout and RUN[1] in dom.stdout, dom.stdout[:2000]
    assert "rabbitmq" in dom.stdout and "not honoured" in dom.stdout
    assert dom.stdout.count('class="main-svg"') >= 1  # the charts are drawn (plotly.js inline in the page)

    out_dir = Path(os.environ.get("BROKERBENCH_SCREENSHOT_DIR") or api_server["base"])
    out_dir.mkdir(parents=True, exist_ok=True)
    shot = out_dir / "served-report.png"
    res = run_chromium([f"--screenshot={shot}", "--window-size=1280,900", url])
    assert res.returncode == 0 and shot.exists(), res.stderr[-3000:]
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1280, 900)
        colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
    # a drawn page (text, tables, charts), not a blank or an error page of one colour
    assert colours is None or len(colours) > 50, f"screenshot has only {len(colours)} colours"

    # the whole page, charts included (data: PNG images are allowed by the page's Content-Security-Policy)
    full = out_dir / "served-report-full.png"
    res = run_chromium([f"--screenshot={full}", "--window-size=1280,5000", url])
    assert res.returncode == 0 and full.exists(), res.stderr[-3000:]
    with Image.open(full) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 200, f"full-page screenshot has only {len(colours)} colours"

    missing = run_chromium(["--dump-dom", api_server["url"] + f"/brokerbench/runs/{RUN[0]}/manual__unknown/report.html"])
    assert "not found under results root" in missing.stdout


def test_report_button_of_the_ui_leads_to_the_served_report(api_server):
    """The extra links the UI asks the api-server for: the Report link is same-origin and serves the report."""
    import httpx

    with httpx.Client(base_url=api_server["url"], timeout=30) as c:
        runs = c.get("/api/v2/dags/bb_link_probe/dagRuns").json()["dag_runs"]
        assert len(runs) == 1
        run_id = runs[0]["dag_run_id"]
        links = c.get(f"/api/v2/dags/bb_link_probe/dagRuns/{run_id}/taskInstances/report/links").json()
        link = links["extra_links"]["Report"]
        from brokerbench.util import safe_name

        assert link.startswith(f"/brokerbench/runs/bb_link_probe/{safe_name(run_id)}/report.html?root="), link
        r = c.get(link)
        assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
        assert "brokerbench report" in r.text
    dom = run_chromium(["--dump-dom", api_server["url"] + link])
    assert dom.returncode == 0 and "brokerbench report" in dom.stdout, dom.stderr[-3000:]
