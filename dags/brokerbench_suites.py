"""Airflow DAGs of brokerbench: one DAG per suite file under include/suites/.

Kept thin on purpose: everything lives in the brokerbench package
(brokerbench.dag_factory). Airflow's DAG discovery looks for the words
"airflow" and "dag" in a file, which this docstring provides.
"""

from brokerbench.dag_factory import build_all_dags

globals().update(build_all_dags())
