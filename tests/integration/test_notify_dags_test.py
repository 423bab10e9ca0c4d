"""The notifiers under a real `airflow dags test`: Airflow itself calls them.

A probe DAG (own AIRFLOW_HOME and SQLite DB under tmp_path, so the project's
Airflow state is untouched) has the brokerbench callbacks wired as
dag_factory wires them: failure_notifier() on the DAG, regression_notifier() on
an ``analysis.regression_gate`` task that fails with the gate's message after
an ``analysis.report`` task returned a report path. A loopback SMTP sink must
receive the regression message (task process) and the failure message (DAG
callback, run by `airflow dags test` in its own process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest

# the loopback SMTP sink of the unit tests
_spec = spec_from_file_location("_brokerbench_notify_unit", Path(__file__).parents[1] / "unit" / "test_notify.py")
_unit = module_from_spec(_spec)
_spec.loader.exec_module(_unit)
_SmtpSink = _unit._SmtpSink

pytestmark = pytest.mark.integration

PROBE_DAG = '''
import datetime as dt

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, TaskGroup
from airflow.sdk.exceptions import AirflowFailException

from brokerbench.notify import failure_notifier, regression_notifier

RESULTS = {results!r}


def _report():
    return RESULTS + "/runs/notify_probe/x/report.html"


def _gate():
    raise AirflowFailException("1 metric(s) regressed:\\n"
                               "w1 kafka fsync-on publish_latency_p99_ms: 4.1 -> 6.3 ms (+54%)")


with DAG("notify_probe", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         params={{"results_root": RESULTS}}, on_failure_callback=failure_notifier()):
    with TaskGroup("analysis"):
        report = PythonOperator(task_id="report", python_callable=_report)
        gate = PythonOperator(task_id="regression_gate", python_callable=_gate, retries=0,
                              on_failure_callback=regression_notifier())
        report >> gate
'''


@pytest.mark.timeout(420)
def test_airflow_calls_the_notifiers(tmp_path):
    (tmp_path / "dags").mkdir()
    results = str(tmp_path / "results")
    (tmp_path / "dags" / "notify_probe.py").write_text(textwrap.dedent(PROBE_DAG.format(results=results)))
    sink = _SmtpSink()
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'home' / 'airflow.db'}",
        "AIRFLOW__API__BASE_URL": "http://127.0.0.1:8080",
        "AIRFLOW_CONN_BROKERBENCH_NOTIFY": json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": sink.server_address[1],
            "extra": {"from": "brokerbench@example.org", "to": ["perf@example.org"]}}),
    })
    (tmp_path / "home").mkdir()
    airflow = [sys.executable, "-m", "airflow"]
    try:
        subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=240)
        p = subprocess.run([*airflow, "dags", "test", "notify_probe"], env=env, capture_output=True, text=True,
                           timeout=240)
    finally:
        sink.shutdown()
        sink.server_close()
    out = p.stdout + p.stderr
    assert p.returncode != 0, out  # the run failed
    subjects = sorted(m["message"]["Subject"] for m in sink.messages)
    assert len(subjects) == 2, (subjects, out[-4000:])
    failure = next(m["message"] for m in sink.messages if "FAILED" in m["message"]["Subject"])
    regression = next(m["message"] for m in sink.messages if "REGRESSION" in m["message"]["Subject"])
    assert regression["Subject"].startswith("[brokerbench] REGRESSION: 1 metric(s) in notify_probe run manual__")
    body = regression.get_content()
    assert "  w1 kafka fsync-on publish_latency_p99_ms: 4.1 -> 6.3 ms (+54%)" in body
    assert f"report: file://{results}/runs/notify_probe/x/report.html" in body
    assert failure["Subject"].startswith("[brokerbench] FAILED: notify_probe run manual__")
    body = failure.get_content()
    assert "failed tasks: analysis.regression_gate" in body
    assert "run in the UI: http://127.0.0.1:8080/dags/notify_probe/runs/manual__" in body
    assert f"results: {results}/runs/notify_probe/manual__" in body
