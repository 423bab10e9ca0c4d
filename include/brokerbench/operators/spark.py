"""The Spark steps: the aggregation and the history append, step operators like every other (operators.base: the
run's context, its s3:// store synced around the step) that submit a job of spark_jobs/ on the connection
``brokerbench_spark``. What runs, and whether anything does, is the pipeline's (pipeline.analysis.aggregate_results
and .append_history); the operator is spark-submit, with the results store's credentials passed to the job."""

from __future__ import annotations

import os
import sys
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from brokerbench import storage
from brokerbench.operators.base import BrokerbenchStepOperator, log, run_type_and_ts
from brokerbench.pipeline.analysis import NothingToDo, SweepOnly, aggregate_results, append_history, history_uri
from brokerbench.pipeline.context import PROJECT_ROOT, RunContext

# spark_jobs/brokerbench_spark, the jobs' package, is importable beside brokerbench: include/brokerbench_spark is a
# link to it (as include/brokerbench/_data links the specs), so the editable install that puts include/ on the path
# finds it and a wheel holds it as files. The operator needs its zip for --py-files; the jobs themselves
# run under spark-submit from spark_jobs/ and import nothing of brokerbench.
from brokerbench_spark import pyfiles

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


class BrokerbenchSparkOperator(BrokerbenchStepOperator, SparkSubmitOperator):
    """A brokerbench Spark job (spark_jobs/<script>) as a step: ``step`` calls the pipeline function with
    :meth:`submit`, which runs the job through the project's Spark connection (SparkSubmitOperator's execute).

    The connection must exist: a missing one is an error naming it, never
    Spark's silent fallback to yarn.
    """

    ui_color = "#ebdef0"
    template_fields = SparkSubmitOperator.template_fields
    script = ""
    #: the task's context, for the submission (set by execute)
    _context: Any = None

    def __init__(self, *, suite: str, **kwargs: Any):
        kwargs.setdefault("application", str(PROJECT_ROOT / "spark_jobs" / self.script))
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("name", f"brokerbench-{self.script.removesuffix('.py')}")
        super().__init__(suite=suite, **kwargs)

    def execute(self, context: Any) -> Any:
        self.check_connection()
        self._context = context
        try:
            return super().execute(context)
        except SweepOnly as e:
            raise AirflowSkipException(str(e)) from e
        except NothingToDo as e:
            raise AirflowFailException(str(e)) from e

    def check_connection(self) -> None:
        try:
            BaseHook.get_connection(self._conn_id)
        except Exception as e:
            raise AirflowFailException(
                f"Spark connection {self._conn_id!r} is not defined; brokerbench does not fall back to "
                f"Spark's default (yarn). Define it, e.g. "
                f"AIRFLOW_CONN_{self._conn_id.upper()}='{{\"conn_type\":\"spark\",\"host\":\"local[*]\"}}'") from e

    def submit(self, args: list[str], results_root: str | None = None) -> Any:
        """spark-submit with the connection's master, nothing forced: the driver runs here (client mode) with
        this Python; executors use the cluster's Python (``PYSPARK_PYTHON`` is set to this one only for
        ``local[...]`` masters). Extra Spark conf comes from the connection's ``extra.conf`` (e.g.
        ``spark.driver.host`` where executors must reach this worker, ``spark.pyspark.python``) over SHORT_JOB_CONF. For an
        s3:// results root the driver gets the results store's credentials and endpoint as ``AWS_*``
        environment variables; the job hands them to its executors, which read the run from S3. The package
        spark_jobs/brokerbench_spark goes with the job as a --py-files zip (rebuilt only when a source changes),
        so executors on other hosts import it."""
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
        self.py_files = self.py_files or pyfiles.build_zip()
        log.info("spark-submit %s to %s%s; conf %s", self.application, conn.host, f":{conn.port}" if conn.port else "",
                 ", ".join(f"{k}={v}" for k, v in sorted(self.conf.items())) or "-")
        return SparkSubmitOperator.execute(self, self._context)


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
    """spark_jobs/aggregate.py on the run's results (pipeline.analysis.aggregate_results)."""

    script = "aggregate.py"

    def step(self, ctx: RunContext) -> Any:
        run_type, run_ts = run_type_and_ts(self._context)
        return aggregate_results(ctx, self.submit, run_type, run_ts)


class HistoryAppendOperator(BrokerbenchSparkOperator):
    """spark_jobs/history.py: appends the run's summary to the history store, replacing its earlier rows
    (pipeline.analysis.append_history).

    Emits the history Asset (outlets), so the comparison DAG runs when new results land.
    """

    script = "history.py"

    def step(self, ctx: RunContext) -> Any:
        run_type, run_ts = run_type_and_ts(self._context)
        result = append_history(ctx, run_type, run_ts, self.submit)
        for outlet in self.outlets or []:
            try:
                self._context["outlet_events"][outlet].extra = {
                    "results_root": ctx.results_root, "history_uri": history_uri(ctx), "run_uri": ctx.results_uri,
                    "dag_id": ctx.dag_id, "run_id": ctx.run_id}
            except Exception as e:  # the event still fires without its extra
                log.warning("could not attach extra to the history asset event: %s", e)
        return result
