"""The Spark connection must exist: never a silent fallback to Spark's default master (yarn)."""

import pytest
from airflow.sdk.exceptions import AirflowFailException

from brokerbench.operators import SPARK_CONN_ID, AggregateResultsOperator, HistoryAppendOperator


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
