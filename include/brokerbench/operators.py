"""Airflow operators of a benchmark DAG: thin wrappers around brokerbench.pipeline.

Each operator builds a :class:`~brokerbench.pipeline.RunContext` from the task
context (dag id, run id, params) and calls one pipeline function. Heavy
imports happen inside ``execute`` so that parsing DAG files stays fast.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from typing_extensions import override

from brokerbench import storage, util
from brokerbench.pipeline import analysis, benchmark, context, environment_lease, setup, teardown
from brokerbench.spec.roots import default_results_root

#: The Spark connection brokerbench uses. Defined by the project (Makefile,
#: Dockerfile); its absence is an error, never a silent fallback to yarn.
SPARK_CONN_ID = "brokerbench_spark"

log = logging.getLogger("brokerbench")


def run_context(suite: str, context: Any) -> context.RunContext:
    return context.RunContext(
        dag_id=context["dag"].dag_id, run_id=context["run_id"], suite=suite,
        params=dict(context["params"] or {}))


class BrokerbenchStepOperator(BaseOperator):
    """Base: runs one pipeline step for the run; subclasses implement ``step``."""

    ui_color = "#e8f1fb"
    template_fields = ()

    def __init__(self, *, suite: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite

    #: the step compares with history: an s3:// store's history partitions of the run's brokers are pulled
    reads_history = False

    def step(self, ctx: context.RunContext) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def raw_needed(self, ctx: context.RunContext) -> list[str]:  # noqa: ARG002 - the default ignores them
        """Result directories (relative to the run dir) the step reads, pulled from an s3:// store."""
        return []

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        log.info("== %s (try %s)", self.task_id, context["ti"].try_number)
        try:
            # s3:// results: what the step reads is pulled into the staging copy before, what it wrote pushed after
            with ctx.synced(history=self.reads_history, raw=self.raw_needed):
                return self.step(ctx)
        except context.NotSelected as e:
            raise AirflowSkipException(str(e)) from e


class ValidatePlanOperator(BrokerbenchStepOperator):
    """Validates suite, workloads, drivers, variants and params; writes plan.json.

    Fails without retry on bad input: retrying cannot fix a wrong file.
    """

    def step(self, ctx):
        from brokerbench.spec import SpecError

        try:
            return setup.validate(ctx)
        except SpecError as e:
            raise AirflowFailException(str(e)) from e


class AcquireEnvironmentOperator(BaseOperator):
    """Takes this run's environment lease (brokerbench.lease) before the run provisions anything.

    When another run holds it, the task logs which run and defers to
    :class:`brokerbench.triggers.LeaseFreeTrigger`: the waiting run shows as
    ``deferred``, holds no worker slot and starts no process until the lease is
    free (so waiting runs add no load to the hosts being measured). Gives up
    after ``timeout`` (24 h by default).
    """

    ui_color = "#fef9e7"

    def __init__(self, *, suite: str, timeout: dt.timedelta = dt.timedelta(hours=24), poll_s: float = 5.0,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite
        self.timeout = timeout
        self.poll_s = poll_s

    @override
    def execute(self, context: Any, event: Any = None) -> Any:
        from brokerbench.triggers import LeaseFreeTrigger

        ctx = run_context(self.suite, context)
        with ctx.synced():
            busy = environment_lease.acquire_environment(ctx)
            scope, slots = environment_lease.lease_scope(ctx)
        if busy is None:
            log.info("this run holds the lease of the %s environment", scope)
            return {"scope": scope, "run_key": ctx.run_key}
        log.info("waiting, not failing: %s. This run provisions when the lease is free.", busy)
        self.defer(trigger=LeaseFreeTrigger(scope, slots, str(environment_lease.lease_store(ctx)), self.poll_s),
                   method_name="execute", timeout=self.timeout)


class ReleaseEnvironmentOperator(BrokerbenchStepOperator):
    """Gives the environment's lease back (a teardown: runs whatever happened to the run)."""

    ui_color = "#f2f3f4"

    def step(self, ctx):
        return {"released": environment_lease.release_environment(ctx)}


def _cleanup_failed_provision(context: Any) -> None:
    """on_failure_callback of provision: Airflow skips a setup's teardown when the setup failed, so whatever
    the failed tries created (found again by the run's tag) is removed here."""
    task = context["task"]
    ctx = run_context(task.suite, context)
    try:
        with ctx.synced():
            env = ctx.environment()
            record = env.cleanup_failed_provision(reason=str(context.get("exception")))
            log.warning("provision failed; cleaned up: %s", record)
    except Exception as e:  # noqa: BLE001 - a callback never raises; the hourly sweeper is the last resort
        log.error("cleanup after the failed provision did not complete: %s: %s", type(e).__name__, e)


class ProvisionOperator(BrokerbenchStepOperator):
    """Creates (or finds again) the hosts. A failed provision removes what it created: in the environment's own
    code (aws) and, when the last try fails, in ``on_failure_callback``."""

    ui_color = "#d5f5e3"

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("on_failure_callback", _cleanup_failed_provision)
        super().__init__(**kwargs)

    def step(self, ctx):
        return setup.provision(ctx)


class HostSetupOperator(BrokerbenchStepOperator):
    """tuned-adm profile, time sync and clock offset, disk baseline: recorded per host."""

    def step(self, ctx):
        return setup.setup_hosts(ctx)


class _BrokerVariantOperator(BrokerbenchStepOperator):
    def __init__(self, *, broker: str, variant: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.broker = broker
        self.variant = variant


class DeployBrokerOperator(_BrokerVariantOperator):
    """Starts the broker configured for the durability variant (restarting it if needed)."""

    ui_color = "#fdebd0"

    def step(self, ctx):
        self._ctx = ctx
        return benchmark.deploy(ctx, self.broker, self.variant)

    def on_kill(self) -> None:
        """A deploy stopped half-way leaves no broker process behind."""
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            log.warning("deploy killed: stopping %s", self.broker)
            benchmark.undeploy(ctx, self.broker)


class PrepareTopicsOperator(_BrokerVariantOperator):
    def step(self, ctx):
        return benchmark.prepare_topics(ctx, self.broker, self.variant)


class RunPhaseOperator(_BrokerVariantOperator):
    """Runs the workers for one phase (``warmup`` or ``measure``) of every workload."""

    ui_color = "#fadbd8"

    def __init__(self, *, phase: str, **kwargs: Any):
        super().__init__(**kwargs)
        if phase not in ("warmup", "measure"):
            raise ValueError(f"phase must be warmup or measure, not {phase!r}")
        self.phase = phase

    def pre_execute(self, context: Any) -> None:
        """execution_timeout from the plan: every workload's phase, plus the workers' own bound, plus 5 minutes."""
        ctx = run_context(self.suite, context)
        try:
            with ctx.synced():
                seconds = benchmark.phase_timeout_s(ctx, self.broker, self.variant, self.phase)
        except (context.NotSelected, FileNotFoundError):
            return
        if self.execution_timeout is None or self.execution_timeout.total_seconds() > seconds:
            self.execution_timeout = dt.timedelta(seconds=seconds)
            log.info("execution_timeout %.0f s (from the plan's %s durations)", seconds, self.phase)

    def raw_needed(self, ctx):
        return benchmark.raw_prefixes(ctx, self.broker, self.variant) if self.phase == "measure" else []

    def step(self, ctx):
        self._ctx = ctx
        return benchmark.run_phase(ctx, self.broker, self.variant, self.phase)

    def on_kill(self) -> None:
        """Killed from the UI, the API or by execution_timeout: stop this run's workers, so no load is left."""
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            return
        stopped = ctx.environment().stop_workers()
        log.warning("%s killed: stopped %d worker process(es)%s", self.task_id, len(stopped),
                    "".join(f"\n  {w}" for w in stopped))


class UndeployBrokerOperator(BrokerbenchStepOperator):
    def __init__(self, *, broker: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.broker = broker

    def step(self, ctx):
        benchmark.undeploy(ctx, self.broker)


def spark_py_files() -> str:
    """spark_jobs/brokerbench_spark zipped for --py-files, so executors on other hosts import the job's package
    (rebuilt only when a source changes)."""
    import importlib.util

    path = context.PROJECT_ROOT / "spark_jobs" / "brokerbench_spark" / "pyfiles.py"
    spec = importlib.util.spec_from_file_location("brokerbench_spark_pyfiles", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_zip()


class BrokerbenchSparkOperator(SparkSubmitOperator):
    """A brokerbench Spark job (spark_jobs/<script>) through the project's Spark connection.

    The connection must exist: a missing one is an error naming it, never
    Spark's silent fallback to yarn.
    """

    ui_color = "#ebdef0"
    script = ""

    def __init__(self, *, suite: str, **kwargs: Any):
        kwargs.setdefault("application", str(context.PROJECT_ROOT / "spark_jobs" / self.script))
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("name", f"brokerbench-{self.script.removesuffix('.py')}")
        super().__init__(**kwargs)
        self.suite = suite

    def check_connection(self) -> None:
        try:
            BaseHook.get_connection(self._conn_id)
        except Exception as e:
            raise AirflowFailException(
                f"Spark connection {self._conn_id!r} is not defined; brokerbench does not fall back to "
                f"Spark's default (yarn). Define it, e.g. "
                f"AIRFLOW_CONN_{self._conn_id.upper()}='{{\"conn_type\":\"spark\",\"host\":\"local[*]\"}}'") from e

    def submit(self, context: Any, args: list[str], results_root: str | None = None) -> Any:
        """spark-submit with the connection's master, nothing forced: the driver runs here (client mode) with
        this Python; executors use the cluster's Python (``PYSPARK_PYTHON`` is set to this one only for
        ``local[...]`` masters). Extra Spark conf comes from the connection's ``extra.conf`` (e.g.
        ``spark.driver.host`` where executors must reach this worker, ``spark.pyspark.python``). For an
        s3:// results root the driver gets the results store's credentials and endpoint as ``AWS_*``
        environment variables; the job hands them to its executors, which read the run from S3."""
        conn = BaseHook.get_connection(self._conn_id)
        extra = conn.extra_dejson or {}
        env = {"PYSPARK_DRIVER_PYTHON": sys.executable}
        if str(conn.host or "").startswith("local"):
            env["PYSPARK_PYTHON"] = sys.executable
        if results_root and results_root.startswith("s3://"):
            env.update(s3_environment())
        self.conf = {**(extra.get("conf") or {}), **(self.conf or {})}
        self.application_args = args
        self.env_vars = {**env, **(self.env_vars or {})}
        self.py_files = self.py_files or spark_py_files()
        log.info("spark-submit to %s%s; conf %s", conn.host, f":{conn.port}" if conn.port else "",
                 ", ".join(f"{k}={v}" for k, v in sorted(self.conf.items())) or "-")
        return super().execute(context)


def s3_environment(conn_id: str | None = None) -> dict[str, str]:
    """AWS_* variables for a process that reads the results store with boto3 (the Spark jobs): credentials,
    region and endpoint of the Airflow connection ``BROKERBENCH_AWS_CONN_ID`` (default ``brokerbench_aws``)."""
    import os

    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=conn_id or storage.aws_conn_id())
    env: dict[str, str] = {}
    creds = hook.get_credentials()
    if creds and creds.access_key:
        env.update(AWS_ACCESS_KEY_ID=creds.access_key, AWS_SECRET_ACCESS_KEY=creds.secret_key)
        if creds.token:
            env["AWS_SESSION_TOKEN"] = creds.token
    region = hook.conn_region_name or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        env["AWS_DEFAULT_REGION"] = region
    endpoint = hook.conn_config.endpoint_url
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    return env


class AggregateResultsOperator(BrokerbenchSparkOperator):
    """spark_jobs/aggregate.py on the run's results."""

    script = "aggregate.py"

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        log.info("== %s (try %s): spark-submit on %s", self.task_id, context["ti"].try_number, ctx.results_uri)
        self.check_connection()
        with ctx.synced() as sync:  # s3:// results: the job reads the run from S3; its tables are pushed after
            if not analysis.has_measurements(ctx, sync):
                raise AirflowFailException(f"no measured results under {ctx.results_uri}/raw: nothing to aggregate")
            out = ctx.run_dir / "summary"
            return self.submit(context, ["--run-dir", ctx.results_uri, "--out-dir", str(out)], ctx.results_root)


def _run_type_and_ts(context: Any) -> tuple[str | None, str]:
    """The DAG run's type (scheduled, manual, backfill, asset_triggered) and time (logical date, else run_after)."""
    import datetime as dt

    dag_run = context.get("dag_run")
    run_type = getattr(dag_run, "run_type", None)
    run_type = getattr(run_type, "value", run_type)
    when = context.get("logical_date") or getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
    when = when or dt.datetime.now(dt.timezone.utc)
    return (str(run_type) if run_type else None), when.astimezone(dt.timezone.utc).isoformat()


class HistoryAppendOperator(BrokerbenchSparkOperator):
    """spark_jobs/history.py: appends the run's summary to the history store (replacing its earlier rows).

    Emits the history Asset (outlets), so the comparison DAG runs when new results land.
    """

    script = "history.py"

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        self.check_connection()
        with ctx.synced() as sync:
            if not (ctx.run_dir / "summary" / "summary.parquet").exists():
                raise AirflowFailException(f"no summary under {ctx.results_uri}/summary: nothing to append")
            run_type, run_ts = _run_type_and_ts(context)
            analysis.record_run_meta(ctx, run_type, run_ts)
        history_uri = analysis.history_uri(ctx)
        log.info("== %s: append %s (%s run at %s) to %s", self.task_id, ctx.results_uri, run_type, run_ts,
                 history_uri)
        args = ["--history-root", history_uri, "--run-dir", ctx.results_uri]
        if sync is None:
            result = self.submit(context, args)
        else:  # the job writes this run's history files here; they are uploaded, its stale keys removed
            out = ctx.local_results_root / "history"
            result = self.submit(context, [*args, "--history-out", str(out)], ctx.results_root)
            analysis.publish_history(ctx, sync, out)
        for outlet in self.outlets or []:
            try:
                context["outlet_events"][outlet].extra = {
                    "results_root": ctx.results_root, "history_uri": history_uri, "run_uri": ctx.results_uri,
                    "dag_id": ctx.dag_id, "run_id": ctx.run_id}
            except Exception as e:  # the event still fires without its extra
                log.warning("could not attach extra to the history asset event: %s", e)
        return result


class VerdictOperator(BrokerbenchStepOperator):
    """Regression verdicts of the run against its tracks' history (summary/regression.json)."""

    ui_color = "#fcf3cf"
    reads_history = True

    def step(self, ctx):
        return analysis.verdicts(ctx)


class RegressionGateOperator(BrokerbenchStepOperator):
    """Fails when a metric regressed, so Airflow's failure alerting fires (scheduled runs by default)."""

    ui_color = "#f5b7b1"

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        run_type, _ = _run_type_and_ts(context)
        try:
            with ctx.synced():
                return analysis.regression_gate(ctx, run_type)
        except analysis.RegressionFound as e:
            raise AirflowFailException(str(e)) from e


class ComparisonLink(BaseOperatorLink):
    """The "Comparison" button of the compare task: its comparison.html, served like the reports."""

    name = "Comparison"

    @override
    def get_link(self, operator, *, ti_key):
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=CompareOperator.URL_XCOM_KEY) or ""


class CompareOperator(BaseOperator):
    """Comparison report (versions of a broker, brokers side by side) from the history store.

    The results root comes from the triggering history Asset event (extra
    ``results_root``: the store's URI, ``s3://...`` or a path), else from the
    ``results_root`` param.
    """

    ui_color = "#d6eaf8"
    operator_extra_links = (ComparisonLink(),)
    #: XCom key of the comparison report's served URL (the ComparisonLink)
    URL_XCOM_KEY = "comparison_url"

    def execute(self, context: Any) -> Any:
        params = dict(context["params"] or {})
        results_root = params.get("results_root") or default_results_root()
        for events in (context.get("triggering_asset_events") or {}).values():
            for event in events:
                extra = getattr(event, "extra", None) or {}
                if extra.get("results_root"):  # the results store's URI (s3://... or a path), never a staging copy
                    results_root = extra["results_root"]
        log.info("comparison of the history in %s", results_root)
        path = analysis.compare(results_root, context["run_id"], params.get("environment") or None,
                                params.get("brokers") or None)
        from brokerbench import web

        context["ti"].xcom_push(key=self.URL_XCOM_KEY, value=web.comparison_url(results_root, path))
        return path


class SweepExpiredInstancesOperator(BaseOperator):
    """Terminates brokerbench EC2 instances of any run that outlived their maximum lifetime."""

    ui_color = "#fadbd8"

    def execute(self, context: Any) -> Any:
        from brokerbench.environments.aws.fleet import sweep_expired

        p = dict(context["params"] or {})
        return sweep_expired(p["aws_conn_id"], p.get("region_name") or None, float(p["grace_minutes"]),
                             bool(p["dry_run"]))


class ReportLink(BaseOperatorLink):
    """The "Report" button of the report task: report.html served by the api-server's brokerbench app.

    ``/brokerbench/runs/<dag_id>/<run_id>/report.html?root=<results_root>``
    (absolute when ``[api] base_url`` is set), from the run's dag_id, run_id and
    ``results_root`` param (brokerbench.web). Airflow computes it on the worker
    when the task ends and keeps it in XCom for the UI. Empty when the task wrote
    no report.
    """

    name = "Report"

    @override
    def get_link(self, operator, *, ti_key):
        from airflow.sdk.execution_time.xcom import XCom

        from brokerbench import web

        path = XCom.get_value(ti_key=ti_key, key="return_value")
        if not path:
            return ""
        root = web.task_results_root(ti_key, str(path))
        return web.report_url(root, f"{util.safe_name(ti_key.dag_id)}/{util.safe_name(ti_key.run_id)}")


class ReportOperator(BrokerbenchStepOperator):
    """Writes report.html (table, charts, provenance) and logs a text summary."""

    ui_color = "#d6eaf8"
    operator_extra_links = (ReportLink(),)
    reads_history = True

    def step(self, ctx):
        return analysis.report(ctx)


class RunOutcomeOperator(BaseOperator):
    """The run's last word: fails the DAG run unless every step succeeded (or was not selected).

    Airflow decides a run's state from its leaf tasks, and undeploy, aggregation,
    report and teardown run after failures on purpose. This task is a teardown
    (so it runs even when the run was stopped from the UI or the API) with
    ``on_failure_fail_dagrun``; it reads the states of the run's other tasks and
    the run's own state, and fails when a task failed or could not run
    (``upstream_failed``), or when the run was marked failed while it ran.
    """

    ui_color = "#f5b7b1"

    def __init__(self, *, suite: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        ctx = run_context(self.suite, context)
        states = ti.get_task_states(dag_id=ctx.dag_id, run_ids=[ctx.run_id]).get(ctx.run_id, {})
        bad = {t: str(getattr(st, "value", st)) for t, st in sorted(states.items())
               if t != self.task_id and str(getattr(st, "value", st)) in ("failed", "upstream_failed")}
        run_state = ti.get_dagrun_state(dag_id=ctx.dag_id, run_id=ctx.run_id)
        run_state = str(getattr(run_state, "value", run_state)).lower()
        log.info("run %s: state %s; task states: %s", ctx.run_id, run_state,
                 ", ".join(f"{t}={getattr(st, 'value', st)}" for t, st in sorted(states.items())))
        if bad or run_state == "failed":
            reasons = [f"{t}: {st}" for t, st in bad.items()]
            if run_state == "failed":
                reasons.append("the run was marked failed (stopped) while it ran")
            raise AirflowFailException(
                "this run did not complete: " + "; ".join(reasons) +
                f". Every result measured is kept in {ctx.run_dir}")
        return {"tasks": len(states), "run_state": run_state}


class TeardownOperator(BrokerbenchStepOperator):
    """Stops and releases everything the run started. Runs even when tasks failed."""

    ui_color = "#f2f3f4"

    def step(self, ctx):
        return teardown.teardown(ctx)
