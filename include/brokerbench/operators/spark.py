"""The Spark steps: the aggregation and the history append, as spark-submit of the jobs in spark_jobs/ on the
connection ``brokerbench_spark``, with the results store's credentials passed to the job."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from brokerbench import storage
from brokerbench.operators.base import log, run_context, run_type_and_ts
from brokerbench.pipeline.analysis import has_measurements, history_uri, is_sweep_only, publish_history, record_run_meta
from brokerbench.pipeline.context import PROJECT_ROOT

#: Spark conf of the operators' jobs, each a default the connection's ``extra.conf`` or the task's ``conf``
#: overrides. Each job aggregates or appends one run: one Spark stage of Python tasks (the aggregation) or none
#: (the history append), seconds of work on a cold JVM that go almost all to starting it. So the driver's JIT is
#: the client compiler alone (C1 compiles sooner than tiered C2). bench/spark_short_jobs.py measures it,
#: alternating with Spark's defaults in one loop (docs/aggregation-and-report.md, "Time to answer"); the outputs
#: are the same byte for byte (tests/integration/test_aggregate_equality.py runs with this conf). Long jobs over
#: many runs (bench/) are submitted without it.
SHORT_JOB_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}

#: The Spark connection brokerbench uses. Defined by the project (Makefile,
#: Dockerfile); its absence is an error, never a silent fallback to yarn.
SPARK_CONN_ID = "brokerbench_spark"


def spark_py_files() -> str:
    """spark_jobs/brokerbench_spark zipped for --py-files, so executors on other hosts import the job's package
    (rebuilt only when a source changes)."""

    path = PROJECT_ROOT / "spark_jobs" / "brokerbench_spark" / "pyfiles.py"
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
        kwargs.setdefault("application", str(PROJECT_ROOT / "spark_jobs" / self.script))
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
        ``spark.driver.host`` where executors must reach this worker, ``spark.pyspark.python``) over SHORT_JOB_CONF. For an
        s3:// results root the driver gets the results store's credentials and endpoint as ``AWS_*``
        environment variables; the job hands them to its executors, which read the run from S3."""
        conn = BaseHook.get_connection(self._conn_id)
        extra = conn.extra_dejson or {}
        env = {"PYSPARK_DRIVER_PYTHON": sys.executable}
        if str(conn.host or "").startswith("local"):
            env["PYSPARK_PYTHON"] = sys.executable
        if results_root and results_root.startswith("s3://"):
            env.update(s3_environment())
        self.conf = {**SHORT_JOB_CONF, **(extra.get("conf") or {}), **(self.conf or {})}
        self.application_args = args
        self.env_vars = {**env, **(self.env_vars or {})}
        self.py_files = self.py_files or spark_py_files()
        log.info("spark-submit to %s%s; conf %s", conn.host, f":{conn.port}" if conn.port else "",
                 ", ".join(f"{k}={v}" for k, v in sorted(self.conf.items())) or "-")
        return super().execute(context)


def s3_environment(conn_id: str | None = None) -> dict[str, str]:
    """AWS_* variables for a process that reads the results store with boto3 (the Spark jobs): credentials,
    region and endpoint of the Airflow connection ``BROKERBENCH_AWS_CONN_ID`` (default ``brokerbench_aws``)."""

    from airflow.providers.amazon.aws.hooks.s3 import S3Hook  # the Amazon provider: only for an s3:// store

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
            if not has_measurements(ctx, sync):
                raise AirflowFailException(f"no measured results under {ctx.results_uri}/raw: nothing to aggregate")
            out = ctx.run_dir / "summary"
            return self.submit(context, ["--run-dir", ctx.results_uri, "--out-dir", str(out)], ctx.results_root)


class HistoryAppendOperator(BrokerbenchSparkOperator):
    """spark_jobs/history.py: appends the run's summary to the history store (replacing its earlier rows).

    Emits the history Asset (outlets), so the comparison DAG runs when new results land.
    """

    script = "history.py"

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        self.check_connection()
        with ctx.synced() as sync:
            if is_sweep_only(ctx):  # skipped, so are the verdicts after it: the run's outcome says "not judged"
                raise AirflowSkipException(
                    f"a throughput sweep only: nothing to append to the history, which holds measured phases "
                    f"(the sweep's steps are in {ctx.results_uri}/summary/sweep.csv)")
            if not (ctx.run_dir / "summary" / "summary.parquet").exists():
                raise AirflowFailException(f"no summary under {ctx.results_uri}/summary: nothing to append")
            run_type, run_ts = run_type_and_ts(context)
            record_run_meta(ctx, run_type, run_ts)
        history_location = history_uri(ctx)
        log.info("== %s: append %s (%s run at %s) to %s", self.task_id, ctx.results_uri, run_type, run_ts,
                 history_location)
        args = ["--history-root", history_location, "--run-dir", ctx.results_uri]
        if sync is None:
            result = self.submit(context, args)
        else:  # the job writes this run's history files here; they are uploaded, its stale keys removed
            out = ctx.local_results_root / "history"
            result = self.submit(context, [*args, "--history-out", str(out)], ctx.results_root)
            publish_history(ctx, sync, out)
        for outlet in self.outlets or []:
            try:
                context["outlet_events"][outlet].extra = {
                    "results_root": ctx.results_root, "history_uri": history_location, "run_uri": ctx.results_uri,
                    "dag_id": ctx.dag_id, "run_id": ctx.run_id}
            except Exception as e:  # the event still fires without its extra
                log.warning("could not attach extra to the history asset event: %s", e)
        return result
