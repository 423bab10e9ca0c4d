"""brokerbench.notify: failure and regression messages reach an SMTP server and a webhook.

The callback context is built the way Airflow builds it (a RuntimeTaskInstance's
template context, as the dag-processor and the task runner do; the DAG-level
minimal context otherwise), the connection comes from
AIRFLOW_CONN_BROKERBENCH_NOTIFY, and the servers are loopback ones in this
test: a tiny SMTP sink and an http.server.
"""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import json
import logging
import socketserver
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brokerbench import notify

RUN_ID = "scheduled__2026-11-22T00:00:00+00:00"
SAFE_RUN = "scheduled__2026-11-22T00_00_00_00_00"
GATE_MESSAGE = ("2 metric(s) regressed:\n"
                "smoke-1-topic-1-partition-100b kafka fsync-on publish_latency_p99_ms: 4.1 -> 6.3 ms (+54%)\n"
                "smoke-1-topic-1-partition-100b rabbitmq fsync-off e2e_latency_p50_ms: 1.0 -> 1.3 ms (+30%)")


# -- loopback servers -------------------------------------------------------------

class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP for smtplib: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    def _reply(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode())

    def handle(self):
        self._reply("220 sink ESMTP")
        envelope = {"from": None, "to": []}
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            cmd = raw.decode("utf-8", "replace").strip()
            verb = cmd.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._reply("250 sink")
            elif verb == "MAIL":
                envelope = {"from": cmd.split(":", 1)[1].strip(" <>"), "to": []}
                self._reply("250 ok")
            elif verb == "RCPT":
                envelope["to"].append(cmd.split(":", 1)[1].strip(" <>"))
                self._reply("250 ok")
            elif verb == "DATA":
                self._reply("354 end with <CRLF>.<CRLF>")
                data = []
                while True:
                    line = self.rfile.readline()
                    if line in (b".\r\n", b".\n", b""):
                        break
                    data.append(line[1:] if line.startswith(b"..") else line)
                self.server.messages.append({**envelope, "message": email.message_from_bytes(
                    b"".join(data), policy=email.policy.default)})
                self._reply("250 queued")
            elif verb in ("RSET", "NOOP"):
                self._reply("250 ok")
            elif verb == "QUIT":
                self._reply("221 bye")
                return
            else:
                self._reply("502 not implemented")


class _SmtpSink(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _SmtpHandler)
        self.messages: list[dict] = []


@pytest.fixture
def smtp_sink(monkeypatch):
    server = _SmtpSink()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_NOTIFY", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": server.server_address[1],
        "extra": {"from": "brokerbench@example.org", "to": "oncall@example.org, perf@example.org",
                  "starttls": False}}))
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook(monkeypatch):
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "headers": dict(self.headers), "json": json.loads(body)})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_NOTIFY", json.dumps({
        "conn_type": "http", "host": f"http://127.0.0.1:{server.server_address[1]}/hooks/brokerbench"}))
    yield received
    server.shutdown()
    server.server_close()


# -- Airflow's context ------------------------------------------------------------

@pytest.fixture(scope="module")
def dag():
    from brokerbench.dag_factory import build_dag

    return build_dag("smoke")


class _Supervisor:
    """Stands in for the channel to the supervisor (task process or dag-processor): answers
    task-state and XCom requests as the API server would."""

    def __init__(self, states: dict[str, str], report: str | None):
        self.states, self.report, self.requests = states, report, []

    def send(self, msg):
        from airflow.sdk.execution_time.comms import (
            GetTaskStates,
            GetXCom,
            GetXComSequenceSlice,
            TaskStatesResult,
            XComResult,
            XComSequenceSliceResult,
        )

        self.requests.append(msg)
        if isinstance(msg, GetTaskStates):
            return TaskStatesResult(task_states={RUN_ID: dict(self.states)})
        if isinstance(msg, GetXComSequenceSlice):
            ok = msg.task_id == "analysis.report" and self.report
            return XComSequenceSliceResult(root=[self.report] if ok else [])
        if isinstance(msg, GetXCom):
            ok = msg.task_id == "analysis.report" and self.report
            return XComResult(key=msg.key, value=self.report if ok else None)
        raise AssertionError(f"unexpected request {msg!r}")


@pytest.fixture
def supervisor(monkeypatch, tmp_path):
    from airflow.sdk.execution_time import task_runner

    sup = _Supervisor({"setup.validate": "success", "benchmark.kafka__fsync_on.measure": "failed",
                       "analysis.regression_gate": "failed", "run_outcome": "failed",
                       "analysis.report": "success"},
                      str(tmp_path / "runs" / "brokerbench_smoke" / SAFE_RUN / "report.html"))
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", sup, raising=False)
    return sup


def template_context(dag, task_id: str, results_root: str, exception: BaseException | None = None) -> dict:
    """The context Airflow gives a callback: the template context of a RuntimeTaskInstance
    (built the way airflow.dag_processing.processor does), plus ``exception`` in the task process."""
    from airflow.sdk.api.datamodels._generated import DagRun, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    task = dag.get_task(task_id)
    now = dt.datetime(2026, 11, 22, 0, 0, tzinfo=dt.timezone.utc)
    dag_run = DagRun.model_construct(
        dag_id=dag.dag_id, run_id=RUN_ID, logical_date=now, data_interval_start=now, data_interval_end=now,
        run_after=now, start_date=now, end_date=None, run_type="scheduled", state="running",
        conf={"results_root": results_root}, consumed_asset_events=[], partition_key=None)
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=task.task_id, dag_id=dag.dag_id, run_id=RUN_ID, try_number=1, map_index=-1,
        dag_version_id=uuid.uuid4(), task=task, max_tries=0,
        _ti_context_from_server=TIRunContext.model_construct(dag_run=dag_run, max_tries=0))
    context = ti.get_template_context()
    if exception is not None:
        context["exception"] = exception
    context["reason"] = "task_failure"
    return context


# -- SMTP ------------------------------------------------------------------------

def test_failure_message_by_smtp_from_the_dag_callback(smtp_sink, supervisor, dag, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example.org:8080")
    context = template_context(dag, "run_outcome", str(tmp_path))  # the run's last failed task
    notify.failure_notifier()(context)  # how Airflow calls it: callback(context)

    assert len(smtp_sink.messages) == 1
    got = smtp_sink.messages[0]
    assert got["from"] == "brokerbench@example.org"
    assert got["to"] == ["oncall@example.org", "perf@example.org"]
    msg = got["message"]
    assert msg["Subject"] == f"[brokerbench] FAILED: brokerbench_smoke run {RUN_ID}"
    body = msg.get_content()
    assert f"run id: {RUN_ID}" in body
    # the watcher only repeats the others' failure
    assert "failed tasks: analysis.regression_gate, benchmark.kafka__fsync_on.measure" in body
    assert ("run in the UI: http://airflow.example.org:8080/dags/brokerbench_smoke/runs/"
            "scheduled__2026-11-22T00%3A00%3A00%2B00%3A00") in body
    assert f"results: {tmp_path}/runs/brokerbench_smoke/{SAFE_RUN}" in body


def test_failure_message_from_the_minimal_dag_context(smtp_sink, supervisor, dag):
    # no task instance to build a context from: Airflow passes only dag, run_id and reason
    notify.failure_notifier()({"dag": dag, "run_id": RUN_ID, "reason": "task_failure"})
    body = smtp_sink.messages[0]["message"].get_content()
    assert "failed tasks: analysis.regression_gate, benchmark.kafka__fsync_on.measure" in body
    assert "(set [api] base_url to get a link)" in body
    assert f"/runs/brokerbench_smoke/{SAFE_RUN}" in body


def test_regression_message_by_smtp_from_the_gate_task(smtp_sink, supervisor, dag, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    context = template_context(dag, "analysis.regression_gate", str(tmp_path), AirflowFailException(GATE_MESSAGE))
    notify.regression_notifier()(context)

    assert len(smtp_sink.messages) == 1
    msg = smtp_sink.messages[0]["message"]
    assert msg["Subject"] == f"[brokerbench] REGRESSION: 2 metric(s) in brokerbench_smoke run {RUN_ID}"
    body = msg.get_content()
    assert f"run id: {RUN_ID}" in body
    assert "  smoke-1-topic-1-partition-100b kafka fsync-on publish_latency_p99_ms: 4.1 -> 6.3 ms (+54%)" in body
    assert "  smoke-1-topic-1-partition-100b rabbitmq fsync-off e2e_latency_p50_ms: 1.0 -> 1.3 ms (+30%)" in body
    assert f"report: file://{tmp_path}/runs/brokerbench_smoke/{SAFE_RUN}/report.html" in body


def test_regression_report_url_is_the_s3_uri_for_an_s3_root(smtp_sink, supervisor, dag):
    from airflow.sdk.exceptions import AirflowFailException

    context = template_context(dag, "analysis.regression_gate", "s3://bench-results/nightly",
                               AirflowFailException(GATE_MESSAGE))
    notify.regression_notifier()(context)
    body = smtp_sink.messages[0]["message"].get_content()
    assert f"report: s3://bench-results/nightly/runs/brokerbench_smoke/{SAFE_RUN}/report.html" in body


def test_gate_failing_without_a_verdict_says_so(smtp_sink, supervisor, dag, tmp_path):
    context = template_context(dag, "analysis.regression_gate", str(tmp_path),
                               RuntimeError("summary/regression.json is missing: no verdicts to check"))
    notify.regression_notifier()(context)
    msg = smtp_sink.messages[0]["message"]
    assert msg["Subject"].startswith("[brokerbench] REGRESSION GATE FAILED (no verdict)")
    assert "regression.json is missing" in msg.get_content()


# -- webhook ---------------------------------------------------------------------

def test_messages_by_webhook(webhook, supervisor, dag, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    notify.failure_notifier()(template_context(dag, "run_outcome", str(tmp_path)))
    notify.regression_notifier()(template_context(dag, "analysis.regression_gate", str(tmp_path),
                                                  AirflowFailException(GATE_MESSAGE)))
    assert [r["path"] for r in webhook] == ["/hooks/brokerbench", "/hooks/brokerbench"]
    assert webhook[0]["headers"]["Content-Type"] == "application/json"
    failure, regression = webhook[0]["json"], webhook[1]["json"]
    assert failure["kind"] == "failure" and failure["run_id"] == RUN_ID
    assert failure["subject"] == f"[brokerbench] FAILED: brokerbench_smoke run {RUN_ID}"
    assert failure["failed_tasks"] == ["analysis.regression_gate", "benchmark.kafka__fsync_on.measure"]
    assert regression["kind"] == "regression" and regression["regressed"] is True
    assert regression["metrics"] == GATE_MESSAGE.splitlines()[1:]
    assert "kafka fsync-on publish_latency_p99_ms" in regression["text"]  # what chat webhooks show


# -- off and broken ----------------------------------------------------------------

def test_no_connection_turns_notifications_off(monkeypatch, supervisor, dag, tmp_path, caplog):
    monkeypatch.delenv("AIRFLOW_CONN_BROKERBENCH_NOTIFY", raising=False)
    monkeypatch.setattr(notify, "_told_off", set())
    caplog.set_level(logging.INFO, logger="brokerbench")
    notifier = notify.failure_notifier()
    notifier(template_context(dag, "run_outcome", str(tmp_path)))
    notifier(template_context(dag, "run_outcome", str(tmp_path)))
    off = [r for r in caplog.records if "notifications are off" in r.getMessage()]
    assert len(off) == 1 and "AIRFLOW_CONN_BROKERBENCH_NOTIFY" in off[0].getMessage()
    assert notifier.last_message is not None  # built, just not sent


def test_send_failure_is_logged_not_raised(monkeypatch, supervisor, dag, tmp_path, caplog):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_NOTIFY", json.dumps(
        {"conn_type": "smtp", "host": "127.0.0.1", "port": port, "extra": {"to": ["a@example.org"]}}))
    caplog.set_level(logging.INFO, logger="brokerbench")
    notify.failure_notifier()(template_context(dag, "run_outcome", str(tmp_path)))  # does not raise
    assert any("could not send" in r.getMessage() for r in caplog.records)


def test_webhook_url_from_connection_fields():
    from airflow.sdk import Connection

    assert notify.webhook_url(Connection(conn_id="x", conn_type="http", host="hooks.example.org", port=8080,
                                         schema="services/T0/B0")) == "http://hooks.example.org:8080/services/T0/B0"
    assert notify.webhook_url(Connection(conn_id="x", conn_type="https", host="hooks.example.org")) == \
        "https://hooks.example.org/"
    assert notify.webhook_url(Connection(conn_id="x", conn_type="http",
                                         host="https://hooks.example.org/a/b")) == "https://hooks.example.org/a/b"


def test_a_run_that_judged_nothing_sends_a_message_of_its_own_kind(smtp_sink, supervisor, dag, tmp_path):
    from brokerbench.outcome import outcome_of

    invalid = {"workload": "w", "broker": "kafka", "variant": "fsync-on", "metric": "all",
               "verdict": "not judged: invalid (foreign load 40 % of a core)"}
    outcome = outcome_of([invalid])
    context = template_context(dag, "run_outcome", str(tmp_path))
    assert notify.send(notify.not_judged_message(context, outcome))

    msg = smtp_sink.messages[0]["message"]
    assert msg["X-Brokerbench-Kind"] == "not-judged"
    assert msg["Subject"] == (f"[brokerbench] NOT JUDGED: brokerbench_smoke run {RUN_ID}: no valid measurement "
                              f"(1 of 1 track(s) invalid, partial or without data)")
    body = msg.get_content()
    assert "this run says nothing about regressions" in body
    assert f"report: {tmp_path}/runs/brokerbench_smoke/{SAFE_RUN}/report.html" in body
