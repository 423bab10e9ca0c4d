"""Airflow plugin: brokerbench's operator links and the web app that serves reports.

* operator links: "Report" (report task) and "Comparison" (compare task), URLs
  of the pages below;
* ``fastapi_apps``: mounted by the api-server at ``/brokerbench``, serves each
  run's report.html and files and the comparison reports from the results root
  (brokerbench.web; docs/aggregation-and-report.md, "Where reports are served").

Only Airflow plugin objects live here; the logic is in the brokerbench package.
The web app is built on its first request, so importing the plugin stays cheap.
"""

from airflow.plugins_manager import AirflowPlugin

from brokerbench.operators.links import ComparisonLink, ReportLink
from brokerbench.web import URL_PREFIX, LazyApp


class BrokerbenchPlugin(AirflowPlugin):
    name = "brokerbench"
    operator_extra_links = [ReportLink(), ComparisonLink()]
    fastapi_apps = [{"app": LazyApp(auth=True), "url_prefix": URL_PREFIX, "name": "brokerbench reports"}]
