"""Links from a task in the Airflow UI to the pages it wrote (served by the brokerbench plugin)."""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom
from typing_extensions import override

from brokerbench import util, web

#: XCom key of the comparison report's served URL (pushed by CompareOperator, read by ComparisonLink)
COMPARISON_URL_XCOM_KEY = "comparison_url"


class ComparisonLink(BaseOperatorLink):
    """The "Comparison" button of the compare task: its comparison.html, served like the reports."""

    name = "Comparison"

    @override
    def get_link(self, operator, *, ti_key):
        return XCom.get_value(ti_key=ti_key, key=COMPARISON_URL_XCOM_KEY) or ""


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
        from airflow.sdk.execution_time.xcom import XCom  # Airflow: loaded where this runs under Airflow, not on import

        path = XCom.get_value(ti_key=ti_key, key="return_value")
        if not path:
            return ""
        root = web.task_results_root(ti_key, str(path))
        return web.report_url(root, f"{util.safe_name(ti_key.dag_id)}/{util.safe_name(ti_key.run_id)}")
