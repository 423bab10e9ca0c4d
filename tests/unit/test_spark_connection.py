"""The Spark connection must exist: never a silent fallback to Spark's default master (yarn)."""

import pytest
from airflow.sdk.exceptions import AirflowFailException

from brokerbench.operators.spark import SPARK_CONN_ID, AggregateResultsOperator, HistoryAppendOperator


def test_the_spark_steps_are_step_operators_and_import_the_jobs_package():
    from brokerbench.operators import spark
    from brokerbench.operators.base import BrokerbenchStepOperator
    from brokerbench_spark import pyfiles

    assert issubclass(AggregateResultsOperator, BrokerbenchStepOperator)
    assert issubclass(HistoryAppendOperator, BrokerbenchStepOperator)
    assert spark.pyfiles is pyfiles and pyfiles.PACKAGE.parent.name == "spark_jobs"


def test_missing_spark_connection_is_an_error_naming_it():
    op = AggregateResultsOperator(task_id="aggregate", suite="smoke", conn_id="brokerbench_spark_absent")
    with pytest.raises(AirflowFailException, match="brokerbench_spark_absent.*not defined.*yarn"):
        op.check_connection()


def test_project_spark_connection_is_found_and_runs_the_project_jobs(monkeypatch):
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", '{"conn_type": "spark", "host": "local[*]"}')
    agg = AggregateResultsOperator(task_id="aggregate", suite="smoke")
    agg.check_connection()  # does not raise
    assert agg.application.endswith("spark_jobs/aggregate.py")
    assert HistoryAppendOperator(task_id="history", suite="smoke").application.endswith("spark_jobs/history.py")


def _submitted(monkeypatch, conn: str, results_root: str | None) -> AggregateResultsOperator:
    """What the operator hands to SparkSubmitOperator.execute for ``conn`` (spark-submit itself not run)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", conn)
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: "submitted")
    monkeypatch.setattr("brokerbench.operators.spark.pyfiles.build_zip", lambda: "/tmp/brokerbench_spark.zip")
    op = AggregateResultsOperator(task_id="aggregate", suite="smoke")
    assert op.submit(["--run-dir", "x"], results_root) == "submitted"
    assert op.py_files == "/tmp/brokerbench_spark.zip"
    return op


def test_a_cluster_master_gets_no_local_python_and_the_connections_spark_conf(monkeypatch):
    import json
    import sys

    conn = json.dumps({"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077,
                       "extra": {"conf": {"spark.driver.host": "10.0.0.9", "spark.pyspark.python": "/usr/bin/python3"}}})
    op = _submitted(monkeypatch, conn, None)
    assert "PYSPARK_PYTHON" not in op.env_vars  # the executors use the cluster's Python
    assert "SPARK_LOCAL_IP" not in op.env_vars  # nothing forces loopback
    assert op.env_vars["PYSPARK_DRIVER_PYTHON"] == sys.executable  # the driver runs here
    # a one-run job: the driver on C1; the connection's own conf kept
    assert op.conf == {"spark.driver.host": "10.0.0.9", "spark.pyspark.python": "/usr/bin/python3",
                       "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    # the connection overrides a default
    conn = json.dumps({"conn_type": "spark", "host": "local[2]",
                       "extra": {"conf": {"spark.driver.extraJavaOptions": "-Xss4m"}}})
    assert _submitted(monkeypatch, conn, None).conf["spark.driver.extraJavaOptions"] == "-Xss4m"
    assert not any(k.startswith("AWS_") for k in op.env_vars)  # a local results root needs no credentials


def test_local_master_uses_this_python_and_an_s3_root_passes_the_store_credentials(monkeypatch):
    import json
    import sys

    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "secret",
        "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}}))
    op = _submitted(monkeypatch, '{"conn_type": "spark", "host": "local[2]"}', "s3://bucket/results")
    assert op.env_vars["PYSPARK_PYTHON"] == sys.executable
    assert {k: op.env_vars[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                        "AWS_ENDPOINT_URL")} == {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


def test_the_connection_may_set_the_drivers_jvm_options(monkeypatch):
    import json

    conn = json.dumps({"conn_type": "spark", "host": "local[*]",
                       "extra": {"conf": {"spark.driver.extraJavaOptions": "-Xmx2g"}}})
    op = _submitted(monkeypatch, conn, None)
    assert op.conf["spark.driver.extraJavaOptions"] == "-Xmx2g"


def test_a_run_of_sweeps_only_skips_the_history_append_and_a_run_without_results_fails_it(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowSkipException

    from brokerbench.pipeline.context import RunContext

    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", '{"conn_type": "spark", "host": "local[*]"}')
    context = {"dag": SimpleNamespace(dag_id="brokerbench_smoke"), "run_id": "manual__1",
               "params": {"results_root": str(tmp_path)}, "ti": SimpleNamespace(try_number=1)}
    summary = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)}).run_dir / "summary"
    summary.mkdir(parents=True)
    op = HistoryAppendOperator(task_id="history", suite="smoke")
    with pytest.raises(AirflowFailException, match="no summary under .*nothing to append"):
        op.execute(context)
    (summary / "sweep.csv").write_text("step,target_rate_msg_s\n0,5000\n")
    with pytest.raises(AirflowSkipException, match="throughput sweep only.*summary/sweep.csv"):
        op.execute(context)
