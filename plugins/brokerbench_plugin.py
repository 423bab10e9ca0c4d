"""Airflow plugin: registers brokerbench's operator links (the run's report).

Only Airflow plugin objects live here; the logic is in the brokerbench package.
"""

from airflow.plugins_manager import AirflowPlugin

from brokerbench.operators import ReportLink


class BrokerbenchPlugin(AirflowPlugin):
    name = "brokerbench"
    operator_extra_links = [ReportLink()]
