"""brokerbench.web: the app that serves reports (FastAPI TestClient), its URLs and the task links.

Local results roots are built on disk; the S3 root is served by moto's server
on 127.0.0.1 (tests/aws_fixtures.py), read through the ``brokerbench_aws``
connection as brokerbench.storage does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import moto_server, s3_client  # noqa: F401,E402

RUN = ("brokerbench_smoke", "manual__2026-01-02T03_04_05_00_00")
REPORT = "<!doctype html><html><body><h1>brokerbench report</h1></body></html>"


def make_root(root: Path, marker: str = "") -> Path:
    run = root / "runs" / RUN[0] / RUN[1]
    (run / "summary" / "omb").mkdir(parents=True)
    (run / "report.html").write_text(REPORT.replace("report", f"report{marker}"))
    (run / "summary" / "summary.csv").write_text("workload,broker\nw,kafka\n")
    (run / "summary" / "summary.json").write_text('{"rows": 1}')
    (run / "summary" / "omb" / "w__kafka-latency__fsync-on.json").write_text('{"workload": "w"}')
    (run / "summary" / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    cmp_dir = root / "comparisons" / "manual__cmp"
    cmp_dir.mkdir(parents=True)
    (cmp_dir / "comparison.html").write_text("<html><body>comparison</body></html>")
    (root / "comparisons" / "latest.html").write_text("<html><body>latest comparison</body></html>")
    (root / "secret.txt").write_text("not served")
    (root / "history").mkdir()
    (root / "history" / "h.parquet").write_bytes(b"PAR1")
    return root


@pytest.fixture
def roots(tmp_path, monkeypatch):
    default = make_root(tmp_path / "results")
    other = make_root(tmp_path / "other", marker=" (other)")
    refused = make_root(tmp_path / "refused")
    monkeypatch.setenv("BROKERBENCH_RESULTS_ROOT", str(default))
    monkeypatch.setenv("BROKERBENCH_SERVED_ROOTS", f" {other} ,s3://some-bucket/x")
    return {"default": default, "other": other, "refused": refused}


@pytest.fixture
def client():
    from fastapi.testclient import TestClient

    from brokerbench.web import create_app

    return TestClient(create_app())


def run_path(*rest: str) -> str:
    return "/".join(["/runs", *RUN, *rest])


def test_report_and_files_are_served_with_their_content_type(roots, client):
    r = client.get(run_path("report.html"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert "brokerbench report" in r.text
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = r.headers["content-security-policy"]
    # the report's inline scripts draw its charts in an opaque origin with no network access
    assert "sandbox allow-scripts" in csp and "allow-same-origin" not in csp
    assert "default-src 'none'" in csp and "connect-src" not in csp
    expected = {
        "summary/summary.csv": "text/csv; charset=utf-8",
        "summary/summary.json": "application/json",
        "summary/omb/w__kafka-latency__fsync-on.json": "application/json",
        "summary/chart.png": "image/png",
    }
    for rel, ctype in expected.items():
        r = client.get(run_path(rel))
        assert r.status_code == 200, (rel, r.text)
        assert r.headers["content-type"] == ctype
        assert r.content == (roots["default"] / "runs" / RUN[0] / RUN[1] / rel).read_bytes()


def test_index_of_a_run(roots, client):
    r = client.get(run_path(""))
    assert r.status_code == 200
    assert 'href="report.html"' in r.text and "summary/summary.csv" in r.text
    r = client.get(run_path("") + "?format=json")
    files = {f["path"]: f for f in r.json()["files"]}
    assert set(files) == {"report.html", "summary/summary.csv", "summary/summary.json",
                          "summary/omb/w__kafka-latency__fsync-on.json", "summary/chart.png"}
    assert files["summary/chart.png"]["content_type"] == "image/png"
    # without the trailing slash: redirected to the index
    r = client.get("/".join(["/runs", *RUN]), follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"].endswith(f"/runs/{RUN[0]}/{RUN[1]}/")
    # a sub-directory has its index too
    r = client.get(run_path("summary/") + "?format=json")
    assert "omb/w__kafka-latency__fsync-on.json" in {f["path"] for f in r.json()["files"]}


def test_comparisons_are_served(roots, client):
    r = client.get("/comparisons/manual__cmp/comparison.html")
    assert r.status_code == 200 and "comparison" in r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    r = client.get("/comparisons/latest.html")
    assert r.status_code == 200 and "latest comparison" in r.text
    r = client.get("/comparisons/?format=json")
    assert {f["path"] for f in r.json()["files"]} == {"latest.html", "manual__cmp/comparison.html"}


@pytest.mark.parametrize("path", [
    "/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/../../../secret.txt",
    "/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/%2e%2e/%2e%2e/%2e%2e/secret.txt",
    "/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/..%2F..%2F..%2Fsecret.txt",
    "/runs/brokerbench_smoke/..%2F..%2Fhistory/h.parquet",
    "/runs/..%2F..%2F/history/h.parquet",
    "/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/summary//summary.csv",
    "/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/summary%5C..%5C..%5Creport.html",
    "/comparisons/..%2Fsecret.txt",
    "/comparisons/%2e%2e/history/h.parquet",
    "/comparisons/%2e/latest.html",
])
def test_path_traversal_is_refused(roots, client, path):
    r = client.get(path)
    assert r.status_code in (400, 403, 404), (path, r.status_code, r.text)
    assert "not served" not in r.text and "PAR1" not in r.text


def test_symlink_out_of_the_served_dirs_is_refused(roots, client):
    run = roots["default"] / "runs" / RUN[0] / RUN[1]
    (run / "leak.txt").symlink_to(roots["default"] / "secret.txt")
    r = client.get(run_path("leak.txt"))
    assert r.status_code == 403 and "outside" in r.json()["detail"]
    assert "leak.txt" not in {f["path"] for f in client.get(run_path("") + "?format=json").json()["files"]}


def test_unknown_run_or_file_is_404_with_a_clear_message(roots, client):
    r = client.get("/runs/brokerbench_smoke/manual__nope/report.html")
    assert r.status_code == 404
    detail = r.json()["detail"]
    assert "runs/brokerbench_smoke/manual__nope/report.html not found" in detail
    assert str(roots["default"]) in detail
    assert client.get(run_path("nope.csv")).status_code == 404
    assert client.get("/runs/brokerbench_smoke/manual__nope/").status_code == 404
    assert client.get("/comparisons/nope/comparison.html").status_code == 404


def test_other_root_only_when_allowed(roots, client):
    r = client.get(run_path("report.html"), params={"root": str(roots["other"])})
    assert r.status_code == 200 and "report (other)" in r.text
    r = client.get(run_path("report.html"), params={"root": str(roots["other"]) + "/"})  # same root, spelt otherwise
    assert r.status_code == 200
    r = client.get(run_path("report.html"), params={"root": str(roots["refused"])})
    assert r.status_code == 403
    assert "not served" in r.json()["detail"] and "BROKERBENCH_SERVED_ROOTS" in r.json()["detail"]
    r = client.get("/comparisons/latest.html", params={"root": "/etc"})
    assert r.status_code == 403
    # the index keeps the root in its links
    r = client.get(run_path(""), params={"root": str(roots["other"])})
    assert "report.html?root=" in r.text


def test_urls():
    from brokerbench import web

    assert web.report_url(None, "d/r", base_url="") == "/brokerbench/runs/d/r/report.html"
    assert (web.report_url("/data/results", "/x/results/runs/d/r/report.html", base_url="")
            == "/brokerbench/runs/d/r/report.html?root=%2Fdata%2Fresults")
    assert (web.report_url("s3://b/p", "d/r", base_url="https://airflow.example.com/")
            == "https://airflow.example.com/brokerbench/runs/d/r/report.html?root=s3%3A%2F%2Fb%2Fp")
    assert web.report_url(None, "/x/runs/d/r/summary/summary.csv", base_url="") == \
        "/brokerbench/runs/d/r/summary/summary.csv"
    assert web.comparison_url(None, "/x/comparisons/c1/comparison.html", base_url="") == \
        "/brokerbench/comparisons/c1/comparison.html"
    assert web.comparison_url(None, "c1", base_url="") == "/brokerbench/comparisons/c1/comparison.html"
    assert web.comparison_url(None, "latest", base_url="") == "/brokerbench/comparisons/latest.html"
    with pytest.raises(ValueError):
        web.report_url(None, "just-one-part")


def test_url_from_the_link_resolves_in_the_app(roots, client):
    from brokerbench import web

    url = web.report_url(str(roots["other"]), "/".join(RUN), base_url="")
    r = client.get(url.removeprefix(web.URL_PREFIX))
    assert r.status_code == 200 and "report (other)" in r.text


class _RuntimeTI:
    """What Airflow hands a link's get_link on the worker when the task ends."""

    def __init__(self, dag_id, run_id, params):
        self.dag_id, self.run_id, self.task_id, self.map_index = dag_id, run_id, "analysis.report", -1
        self._params = params

    def get_template_context(self):
        return {"params": self._params}


def test_report_link_uses_the_runs_results_root(roots, monkeypatch):
    from airflow.sdk.execution_time import xcom

    from brokerbench import web
    from brokerbench.operators.links import ReportLink

    staged = "/somewhere/s3-staging/b/p/runs/brokerbench_smoke/manual__2026-01-02T03:04:05+00:00/report.html"
    values = {"return_value": staged}
    monkeypatch.setattr(xcom.XCom, "get_value", classmethod(lambda cls, *, ti_key, key: values.get(key)))
    monkeypatch.setattr(web, "_base_url", lambda base_url: "")
    ti = _RuntimeTI("brokerbench_smoke", "manual__2026-01-02T03:04:05+00:00", {"results_root": "s3://b/p"})
    assert ReportLink().get_link(None, ti_key=ti) == \
        "/brokerbench/runs/brokerbench_smoke/manual__2026-01-02T03_04_05_00_00/report.html?root=s3%3A%2F%2Fb%2Fp"
    # default root param
    ti = _RuntimeTI(*RUN, {"results_root": None})
    assert ReportLink().get_link(None, ti_key=ti).endswith(f"?root={web.quote(web.default_results_root(), safe='')}")
    # no report written: no link
    values.clear()
    assert ReportLink().get_link(None, ti_key=ti) == ""


def test_report_link_without_context_maps_the_path_to_a_served_root(roots, monkeypatch):
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk.execution_time import xcom

    from brokerbench import web
    from brokerbench.operators.links import ReportLink

    path = roots["other"] / "runs" / RUN[0] / RUN[1] / "report.html"
    monkeypatch.setattr(xcom.XCom, "get_value", classmethod(lambda cls, *, ti_key, key: str(path)))
    monkeypatch.setattr(web, "_base_url", lambda base_url: "")
    key = TaskInstanceKey(dag_id=RUN[0], task_id="analysis.report", run_id=RUN[1])
    assert ReportLink().get_link(None, ti_key=key) == web.report_url(str(roots["other"]), "/".join(RUN), base_url="")


def test_plugin_registers_links_and_app_and_stays_cheap():
    import subprocess

    code = ("import sys; sys.path.insert(0, 'plugins'); import brokerbench_plugin as p; "
            "P = p.BrokerbenchPlugin; "
            "print([l.name for l in P.operator_extra_links], [a['url_prefix'] for a in P.fastapi_apps], "
            "[m for m in ('fastapi', 'pyspark', 'pika', 'kafka', 'pulsar', 'boto3') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['Report', 'Comparison'] ['/brokerbench'] []"


# -- S3 root (moto on loopback) -------------------------------------------------------

def test_s3_root_is_served_through_the_aws_connection(moto_server, roots, monkeypatch):  # noqa: F811
    from fastapi.testclient import TestClient

    from brokerbench import web

    s3 = s3_client(moto_server)
    s3.create_bucket(Bucket="bb-web")
    base = roots["default"]
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        s3.put_object(Bucket="bb-web", Key=f"bench/{path.relative_to(base).as_posix()}", Body=path.read_bytes())
    root = "s3://bb-web/bench"
    monkeypatch.setenv("BROKERBENCH_SERVED_ROOTS", f"{root},s3://bb-missing/x")
    web._S3_CACHE.clear()
    client = TestClient(web.create_app())

    r = client.get(run_path("report.html"), params={"root": root})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8" and "brokerbench report" in r.text
    r = client.get(run_path("summary/chart.png"), params={"root": root + "/"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content == (base / "runs" / RUN[0] / RUN[1] / "summary" / "chart.png").read_bytes()
    r = client.get(run_path(""), params={"root": root, "format": "json"})
    assert r.status_code == 200
    assert "summary/omb/w__kafka-latency__fsync-on.json" in {f["path"] for f in r.json()["files"]}
    r = client.get("/comparisons/latest.html", params={"root": root})
    assert r.status_code == 200 and "latest comparison" in r.text

    r = client.get("/runs/brokerbench_smoke/manual__nope/report.html", params={"root": root})
    assert r.status_code == 404 and "not found under results root s3://bb-web/bench" in r.json()["detail"]
    r = client.get(run_path("..%2F..%2F..%2Fsecret.txt"), params={"root": root})
    assert r.status_code == 400
    r = client.get(run_path("report.html"), params={"root": "s3://bb-web/other"})
    assert r.status_code == 403
    r = client.get(run_path("report.html"), params={"root": "s3://bb-missing/x"})
    assert r.status_code == 404 and "does not exist" in r.json()["detail"]
    assert json.loads(client.get("/comparisons/", params={"root": root, "format": "json"}).text)["root"] == root


# -- client input the app must never answer 500 ------------------------------------------

LONG = "a" * 256


@pytest.mark.parametrize("path, status, text", [
    (run_path(LONG), 404, "a path segment of 256 characters"),
    (run_path("summary", LONG + ".csv"), 404, "a path segment of 260 characters"),
    (f"/runs/{'d' * 256}/{RUN[1]}/report.html", 404, "a run path segment of 256 characters"),
    (f"/runs/{RUN[0]}/{'r' * 300}/", 404, "a run path segment of 300 characters"),
    (f"/runs/{'d' * 300}/{RUN[1]}", 404, "a run path segment of 300 characters"),
    ("/comparisons/" + LONG + "/comparison.html", 404, "a path segment of 256 characters"),
    (run_path(*["a"] * 2000), 404, "a path of 2,002 segments"),
    (run_path(*["a"] * 5000), 414, "URL of 10,"),
    ("/comparisons/" + "/".join(["a"] * 5000), 414, "URL of 10,"),
    (run_path("a" * 9000), 414, "longer than the 8,192 this server reads"),
    (run_path("report.html") + "?root=" + "x" * 9000, 414, "longer than the 8,192"),
], ids=["segment", "file name", "dag_id", "run_id", "dag_id without file", "comparison", "2000 segments",
        "5000 segments", "5000 comparison segments", "9000-character segment", "9000-character root"])
def test_over_long_names_and_urls_are_answered_404_or_414(roots, path, status, text):
    from fastapi.testclient import TestClient

    from brokerbench.web import create_app

    client = TestClient(create_app(), raise_server_exceptions=False)
    r = client.get(path)
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert text in r.json()["detail"]


def test_a_path_too_long_for_the_file_system_is_404_not_500(roots):
    """Each segment is short enough, together they exceed PATH_MAX: the file system's ENAMETOOLONG is caught."""
    from fastapi.testclient import TestClient

    from brokerbench.web import create_app

    client = TestClient(create_app(), raise_server_exceptions=False)
    r = client.get(run_path(*["b" * 250] * 20))
    assert r.status_code == 404, r.text[:300]
    assert "File name too long" in r.json()["detail"]


@pytest.mark.parametrize("error, status", [
    (OSError(36, "File name too long"), 404), (OSError(13, "Permission denied"), 403),
    (OSError(5, "Input/output error"), 503), (RuntimeError("Symlink loop from '/x'"), 404),
])
def test_file_system_errors_are_answered_without_a_500(roots, monkeypatch, error, status):
    from fastapi.testclient import TestClient

    from brokerbench import web

    def fail(self, rel):
        raise error

    monkeypatch.setattr(web._LocalRoot, "open", fail)
    client = TestClient(web.create_app(), raise_server_exceptions=False)
    r = client.get(run_path("report.html"))
    assert r.status_code == status and "\n" not in r.json()["detail"]


def _get_from_s3_endpoint(monkeypatch, endpoint: str, paths: list[str], limit_s: float) -> list[float]:
    """GET each path from an allowed s3:// root served through ``endpoint``; each must be a 503 with a one-line
    reason within ``limit_s``. Returns the times taken."""
    import time

    from fastapi.testclient import TestClient

    from brokerbench import web

    conn = {"conn_type": "aws", "login": "testing", "password": "testing",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_AWS", json.dumps(conn))
    monkeypatch.setenv("BROKERBENCH_SERVED_ROOTS", "s3://bb-down/results")
    web._S3_CACHE.clear()
    client = TestClient(web.create_app(), raise_server_exceptions=False)
    times = []
    try:
        for path in paths:
            started = time.monotonic()
            r = client.get(path, params={"root": "s3://bb-down/results"})
            elapsed = time.monotonic() - started
            print(f"s3 endpoint {endpoint}: GET {path[:45]} answered {r.status_code} in {elapsed:.2f} s")
            assert r.status_code == 503, r.text[:300]
            detail = r.json()["detail"]
            assert "results root s3://bb-down/results cannot be reached" in detail and "\n" not in detail, detail
            assert elapsed < limit_s, f"answered after {elapsed:.1f} s"
            times.append(elapsed)
    finally:
        web._S3_CACHE.clear()
    return times


def test_an_unreachable_s3_root_is_answered_503_within_seconds(roots, monkeypatch):
    """An allowed s3:// root whose endpoint is a closed loopback port: 503 with a one-line reason, fast."""
    _get_from_s3_endpoint(monkeypatch, "http://127.0.0.1:1",
                          [run_path("report.html"), run_path(""), "/comparisons/latest.html"], limit_s=5)


def test_an_s3_endpoint_that_never_answers_is_answered_503_within_seconds(roots, monkeypatch):
    """An endpoint that accepts connections and never answers (a hung proxy): the serving client's read timeout
    and single retry answer 503 within seconds (botocore's defaults would hold the page for minutes)."""
    import socket
    import threading

    from aws_fixtures import free_port

    port = free_port()
    server = socket.create_server(("127.0.0.1", port))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # read nothing, answer nothing
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        times = _get_from_s3_endpoint(monkeypatch, f"http://127.0.0.1:{port}", [run_path("report.html")],
                                      limit_s=10)
        from brokerbench.storage import SERVING_CLIENT_CONFIG as cfg

        waited = cfg["read_timeout"] * cfg["retries"]["total_max_attempts"]
        assert times[0] >= waited - 0.5, "the read timeout was not waited for: not the case this test means"
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        server.close()
