"""Airflow DAG brokerbench_bisect: manual only; the first release of a broker that changed a metric.

Thin on purpose (see brokerbench.dag_factory.build_bisect_dag); the words
"airflow" and "dag" let Airflow's discovery safe mode find this file.
"""

from brokerbench.dag_factory import build_bisect_dag

brokerbench_bisect = build_bisect_dag()
