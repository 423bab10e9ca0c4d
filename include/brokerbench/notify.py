"""Notifications of failed runs and regressions, through Airflow's notifier mechanism.

Two notifiers (:class:`airflow.sdk.BaseNotifier`), for the callbacks of a benchmark DAG:

* :func:`failure_notifier` -- ``on_failure_callback`` of the DAG: "run failed",
  with the dag id, run id, failed task ids, a link to the run in the UI
  (``[api] base_url``) and where the results are;
* :func:`regression_notifier` -- ``on_failure_callback`` of the
  ``analysis.regression_gate`` task: which metrics regressed (the gate's
  exception message) and the report's URL (XCom of ``analysis.report``).

Both send through the Airflow connection ``brokerbench_notify`` (see
docs/notifications.md): conn_type ``smtp`` (host, port, login/password,
extra ``{"from": ..., "to": [...] or "a,b", "starttls": false, "ssl": false}``)
or ``http``/``https``/``webhook`` (host = URL; the message is POSTed as JSON,
with a ``text`` field that Slack/Mattermost/Teams-style incoming webhooks show).
No connection: notifications are off (one log line says how to turn them on).
A failure to build or send a message is logged and never fails the run.

Where the callbacks run, and what context they get (Airflow 3.3):

* a DAG's ``on_failure_callback`` runs in the dag-processor (under
  ``airflow dags test``: in the test process). Its context is the template
  context of the run's last failed task instance (``dag``, ``dag_run``,
  ``ti``, ``params``, ``run_id``, ``reason``), or only ``dag``, ``run_id``,
  ``reason`` when there is none;
* a task's ``on_failure_callback`` runs in the task's process after the task
  failed for good (not on a retry); the context is the task's own, with
  ``exception``. When the task process died, the dag-processor runs it with
  the same keys but no ``exception``.

The notifiers read only what all of these have and ask Airflow (task
states, XCom) through the Task SDK, which works in both processes.
"""

from __future__ import annotations

import base64
import json
import logging
import smtplib
import socket
import urllib.request
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseHook, BaseNotifier
from airflow.sdk.exceptions import AirflowNotFoundException

from brokerbench.metrics import Judgement
from brokerbench.outcome import RunOutcome
from brokerbench.spec.roots import default_results_root
from brokerbench.storage import is_s3, staging_root
from brokerbench.util import safe_name

log = logging.getLogger("brokerbench")

#: the Airflow connection notifications go through
DEFAULT_CONN_ID = "brokerbench_notify"
#: the task whose return value is the report's path
REPORT_TASK_ID = "analysis.report"
#: tasks whose failure only says that another task failed
WATCHER_TASKS = ("run_outcome",)
#: connection types that mean "POST JSON to host"
WEBHOOK_TYPES = ("http", "https", "webhook")
TIMEOUT_S = 30.0


@dataclass
class Message:
    kind: str  # "failure" | "regression" | "not-judged"
    subject: str
    lines: list[str]
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "text": f"{self.subject}\n\n{self.text}",
                **self.fields}


# -- what the context says ------------------------------------------------------

def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _dag_id(context: dict) -> str:
    for src in (context.get("dag"), context.get("dag_run"), context.get("ti") or context.get("task_instance")):
        value = _get(src, "dag_id")
        if value:
            return str(value)
    return "?"


def _run_id(context: dict) -> str:
    value = context.get("run_id") or _get(context.get("dag_run"), "run_id") or \
        _get(context.get("ti") or context.get("task_instance"), "run_id")
    return str(value) if value else "?"


def _params(context: dict) -> dict[str, Any]:
    """The run's params: the context's (defaults + conf), else the DAG's defaults with the run's conf."""
    params = context.get("params")
    if params:
        try:
            return dict(params)
        except Exception:  # noqa: BLE001 - a ParamsDict that will not resolve
            pass
    out: dict[str, Any] = {}
    dag_params = _get(context.get("dag"), "params")
    if dag_params:
        for key in list(dag_params.keys()):
            try:
                out[key] = dag_params[key]
            except Exception:  # noqa: BLE001 - a required param without default
                pass
    out.update(_get(context.get("dag_run"), "conf") or {})
    return out


def results_location(context: dict) -> str:
    """Where the run's files are: ``<results_root>/runs/<dag>/<run>`` (an s3:// URI for S3 roots)."""
    root = str(_params(context).get("results_root") or default_results_root())
    return f"{root.rstrip('/')}/runs/{safe_name(_dag_id(context))}/{safe_name(_run_id(context))}"


def _base_url() -> str | None:
    try:  # the module moved between Airflow releases: whichever this one has
        from airflow.sdk.configuration import conf  # Airflow: loaded where this runs under Airflow, not on import
    except ImportError:  # pragma: no cover - older layouts
        from airflow.configuration import conf  # Airflow: loaded where this runs under Airflow, not on import
    try:
        value = conf.get("api", "base_url", fallback=None)
    except Exception:  # noqa: BLE001
        value = None
    return value.rstrip("/") if value else None


def run_url(dag_id: str, run_id: str) -> str | None:
    """The run in the Airflow UI, when ``[api] base_url`` is set (else None: a guess would mislead)."""
    base = _base_url()
    return f"{base}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}" if base else None


def failed_task_ids(context: dict) -> list[str]:
    """Failed tasks of the run: from Airflow's task states (Task SDK; the metadata DB when this runs
    where there is no supervisor, e.g. `airflow dags test`), else the context's task instance."""
    dag_id, run_id = _dag_id(context), _run_id(context)
    states: dict[str, Any] | None = None
    try:  # only inside a task supervisor; `airflow dags test` has none
        # Airflow: loaded where this runs under Airflow, not on import
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        result = RuntimeTaskInstance.get_task_states(dag_id=dag_id, run_ids=[run_id])
        states = dict(result.get(run_id) or {})
    except Exception:  # noqa: BLE001 - no supervisor here
        try:
            states = _task_states_from_db(dag_id, run_id)
        except Exception:  # noqa: BLE001 - no DB access either
            states = None
    failed = sorted(t for t, s in (states or {}).items() if str(getattr(s, "value", s)) == "failed")
    if not failed:  # at least the task instance the callback is about
        task_id = _get(context.get("ti") or context.get("task_instance"), "task_id")
        failed = [str(task_id)] if task_id else []
    own = [t for t in failed if t.split(".")[-1] not in WATCHER_TASKS]
    return own or failed


def _task_states_from_db(dag_id: str, run_id: str) -> dict[str, str]:
    # the metadata database, only where this process has one (airflow dags test)
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session  # Airflow: loaded where this runs under Airflow, not on import
    from sqlalchemy import select  # the metadata database: only where this process has one

    with create_session() as session:
        rows = session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)).all()
    return {task_id: str(getattr(state, "value", state)) for task_id, state in rows}


def report_url(context: dict) -> str | None:
    """The report: XCom of analysis.report (a local path -> file://; s3 results root -> its s3:// URI)."""
    path = None
    ti = context.get("ti") or context.get("task_instance")
    if ti is not None and hasattr(ti, "xcom_pull"):
        try:
            path = ti.xcom_pull(task_ids=REPORT_TASK_ID)
        except Exception as e:  # noqa: BLE001 - no XCom reachable from here
            log.debug("notify: no report XCom: %s", e)
    if not path:
        return None
    path = str(path)
    location = results_location(context)
    if location.startswith("s3://") and "://" not in path:  # the task returned its staging copy's path
        return f"{location}/report.html"
    return path if "://" in path else f"file://{path}"


# -- the messages ---------------------------------------------------------------

def failure_message(context: dict) -> Message:
    dag_id, run_id = _dag_id(context), _run_id(context)
    failed = failed_task_ids(context)
    url = run_url(dag_id, run_id)
    location = results_location(context)
    reason = context.get("reason")
    lines = [f"DAG run failed: {dag_id}", f"run id: {run_id}"]
    if reason:
        lines.append(f"reason: {reason}")
    lines.append("failed tasks: " + (", ".join(failed) if failed else "(unknown: see the run in the UI)"))
    lines.append(f"run in the UI: {url}" if url else "run in the UI: (set [api] base_url to get a link)")
    lines.append(f"results: {location}")
    if any(t.endswith("regression_gate") for t in failed):
        lines.append("the regression gate failed: a separate message lists the metrics")
    return Message("failure", f"[brokerbench] FAILED: {dag_id} run {run_id}", lines,
                   {"dag_id": dag_id, "run_id": run_id, "failed_tasks": failed, "run_url": url,
                    "results": location, "reason": reason})


def regression_message(context: dict) -> Message:
    dag_id, run_id = _dag_id(context), _run_id(context)
    exc = context.get("exception")
    text = str(exc).strip() if exc is not None else ""
    metrics = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()] if text else []
    regressed = "regressed" in text.splitlines()[0] if text else False
    location = results_location(context)
    verdicts = _verdicts_at(location)
    if exc is None:  # run by the dag-processor (task process died): the verdicts file has them
        metrics = [f"{v['workload']} {v['broker']} {v['variant']} {v['metric']}: {v['evidence']}"
                   for v in verdicts if v.get("verdict") == Judgement.REGRESSED]
        regressed = bool(metrics)
    from brokerbench.report.verdict_table import suspect_sentences

    sentences = suspect_sentences(v for v in verdicts if v.get("verdict") == Judgement.REGRESSED)
    report = report_url(context)
    url = run_url(dag_id, run_id)
    ti = context.get("ti") or context.get("task_instance")
    log_url = _get(ti, "log_url") if _base_url() else None
    if regressed:
        subject = f"[brokerbench] REGRESSION: {len(metrics)} metric(s) in {dag_id} run {run_id}"
        lines = [f"Regression in {dag_id}", f"run id: {run_id}",
                 text.splitlines()[0] if text else f"{len(metrics)} metric(s) regressed:"]
        lines += [f"  {m}" for m in metrics]
        if sentences:
            lines.append("what moved with it (suspects: the brokers' own metrics and the hosts' figures):")
            lines += [f"  {line}" for line in sentences]
    else:
        subject = f"[brokerbench] REGRESSION GATE FAILED (no verdict): {dag_id} run {run_id}"
        lines = [f"The regression gate of {dag_id} failed without a regression verdict", f"run id: {run_id}",
                 f"error: {text or '(unknown: see the task log)'}"]
    lines.append(f"report: {report}" if report else "report: (not known)")
    lines.append(f"verdicts: {location}/summary/regression.csv")
    if url:
        lines.append(f"run in the UI: {url}")
    if log_url:
        lines.append(f"gate log: {log_url}")
    return Message("regression", subject, lines,
                   {"dag_id": dag_id, "run_id": run_id, "regressed": regressed, "metrics": metrics,
                    "suspects": sentences, "report_url": report, "run_url": url, "results": location})


def not_judged_message(context: dict, outcome: RunOutcome) -> Message:
    """A scheduled run that ended without judging anything: not a failure, not "no regression" either; the
    series has a hole a person should look at (e.g. every row invalid on a busy host, or no baseline yet)."""
    dag_id, run_id = _dag_id(context), _run_id(context)
    url = run_url(dag_id, run_id)
    location = results_location(context)
    lines = [f"Nothing judged in {dag_id}", f"run id: {run_id}", f"why: {outcome.reason}",
             "this run says nothing about regressions: no figure of it was compared with a baseline",
             f"report: {f'{location}/report.html'}", f"verdicts: {location}/summary/regression.csv"]
    if url:
        lines.append(f"run in the UI: {url}")
    return Message("not-judged", f"[brokerbench] NOT JUDGED: {dag_id} run {run_id}: {outcome.reason}", lines,
                   {"dag_id": dag_id, "run_id": run_id, "outcome": outcome.to_dict(), "run_url": url,
                    "results": location})


def _verdicts_at(location: str) -> list[dict[str, Any]]:
    """The run's verdicts (summary/regression.json at the results location); [] when not readable."""
    # the report package loads matplotlib: not while DAG files are parsed (notifiers are built then)
    from brokerbench.report.verdict_table import read_verdicts

    try:
        if is_s3(location):
            root, _, rel = location.partition("/runs/")
            run_dir = staging_root(root) / "runs" / rel
        else:
            run_dir = Path(location)
        return list((read_verdicts(run_dir) or {}).get("verdicts", []))
    except Exception as e:  # noqa: BLE001
        log.debug("notify: verdicts not readable at %s: %s", location, e)
        return []


# -- sending --------------------------------------------------------------------

_told_off: set[str] = set()


def _connection(conn_id: str):
    """The connection, or None (notifications off) when it is not defined."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id not in _told_off:
            _told_off.add(conn_id)
            log.info("notifications are off: no Airflow connection %r. To turn them on, define it, e.g. "
                     "AIRFLOW_CONN_%s='{\"conn_type\": \"smtp\", \"host\": \"mail.example.org\", \"port\": 25, "
                     "\"extra\": {\"from\": \"brokerbench@example.org\", \"to\": [\"team@example.org\"]}}' "
                     "(or conn_type http with host = a webhook URL); see docs/notifications.md",
                     conn_id, conn_id.upper())
        return None


def _extra(conn) -> dict[str, Any]:
    try:
        return dict(conn.extra_dejson or {})
    except Exception:  # noqa: BLE001
        return {}


def _recipients(value: Any) -> list[str]:
    if isinstance(value, str):
        return [a.strip() for a in value.replace(";", ",").split(",") if a.strip()]
    return [str(a).strip() for a in (value or []) if str(a).strip()]


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on") if value is not None else False


def send_smtp(conn, message: Message) -> None:
    extra = _extra(conn)
    to = _recipients(extra.get("to"))
    if not to:
        raise ValueError(f"connection {conn.conn_id!r}: extra 'to' names no recipient")
    sender = extra.get("from") or conn.login or f"brokerbench@{socket.getfqdn()}"
    msg = EmailMessage()
    msg["Subject"] = message.subject
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["X-Brokerbench-Kind"] = message.kind
    msg.set_content(message.text)
    use_ssl = _truthy(extra.get("ssl"))
    port = int(conn.port or (465 if use_ssl else 25))
    timeout = float(extra.get("timeout") or TIMEOUT_S)
    smtp_cls = smtplib.SMTP_SSL if use_ssl else smtplib.SMTP
    with smtp_cls(conn.host or "localhost", port, timeout=timeout) as smtp:
        if _truthy(extra.get("starttls")) and not use_ssl:
            smtp.starttls()
        if conn.login:
            smtp.login(conn.login, conn.password or "")
        smtp.send_message(msg, from_addr=sender, to_addrs=to)


def webhook_url(conn) -> str:
    host = (conn.host or "").strip()
    if "://" in host:
        return host
    scheme = "https" if conn.conn_type == "https" else (_extra(conn).get("scheme") or "http")
    port = f":{conn.port}" if conn.port else ""
    path = (conn.schema or "").strip("/")
    return f"{scheme}://{host}{port}/{path}"


def send_webhook(conn, message: Message) -> None:
    extra = _extra(conn)
    headers = {"Content-Type": "application/json", **(extra.get("headers") or {})}
    body = json.dumps(message.payload(), default=str).encode()
    req = urllib.request.Request(webhook_url(conn), data=body, headers=headers, method="POST")
    if conn.login:
        token = base64.b64encode(f"{conn.login}:{conn.password or ''}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(req, timeout=float(extra.get("timeout") or TIMEOUT_S)) as resp:  # noqa: S310
        resp.read()


def send(message: Message, conn_id: str = DEFAULT_CONN_ID) -> bool:
    """Send ``message`` through ``conn_id``; True when sent. Never raises."""
    try:
        conn = _connection(conn_id)
        if conn is None:
            return False
        kind = (conn.conn_type or "").lower()
        if kind == "smtp" or kind == "email":
            send_smtp(conn, message)
        elif kind in WEBHOOK_TYPES:
            send_webhook(conn, message)
        else:
            log.error("notify: connection %r has conn_type %r; use smtp or http (webhook)", conn_id, conn.conn_type)
            return False
        log.info("notify: sent %r through %r (%s)", message.subject, conn_id, kind)
        return True
    except Exception as e:  # noqa: BLE001 - a notification must never fail the run
        log.error("notify: could not send %r through %r: %s: %s", message.subject, conn_id,
                  type(e).__name__, e)
        return False


# -- the notifiers ----------------------------------------------------------------

class BrokerbenchNotifier(BaseNotifier):
    """Builds a failure or regression message from the callback's context and sends it."""

    template_fields = ()

    def __init__(self, kind: str, conn_id: str = DEFAULT_CONN_ID):
        if kind not in ("failure", "regression"):
            raise ValueError(f"kind must be 'failure' or 'regression', not {kind!r}")
        super().__init__()
        self.kind = kind
        self.conn_id = conn_id
        self.last_message: Message | None = None

    def render_template_fields(self, context, jinja_env=None) -> None:
        # Nothing to render. BaseNotifier.__call__ would build a Jinja environment from
        # context["dag"], which under `airflow dags test` is the scheduler's SerializedDAG
        # (no get_template_env): the DAG callback would fail before notify() runs.
        if self.template_fields:
            super().render_template_fields(context, jinja_env)

    def notify(self, context) -> None:
        try:
            context = context if isinstance(context, dict) else dict(context)
            message = failure_message(context) if self.kind == "failure" else regression_message(context)
        except Exception as e:  # noqa: BLE001
            log.error("notify: could not build the %s message: %s: %s", self.kind, type(e).__name__, e)
            return
        self.last_message = message
        send(message, self.conn_id)


def failure_notifier(conn_id: str = DEFAULT_CONN_ID) -> BrokerbenchNotifier:
    """For the DAG's ``on_failure_callback``: a message when a run failed."""
    return BrokerbenchNotifier("failure", conn_id)


def regression_notifier(conn_id: str = DEFAULT_CONN_ID) -> BrokerbenchNotifier:
    """For the ``regression_gate`` task's ``on_failure_callback``: a message listing the regressed metrics."""
    return BrokerbenchNotifier("regression", conn_id)
