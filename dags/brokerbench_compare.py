"""Airflow DAG brokerbench_compare: the comparison report, scheduled on the history Asset.

Thin on purpose (see brokerbench.dag_factory.build_compare_dag); the words
"airflow" and "dag" let Airflow's discovery safe mode find this file.
"""

from brokerbench.dag_factory import build_compare_dag

brokerbench_compare = build_compare_dag()
