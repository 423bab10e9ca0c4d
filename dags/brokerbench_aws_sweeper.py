"""Airflow DAG brokerbench_aws_sweeper: terminates expired brokerbench EC2 instances of any run.

Thin on purpose (see brokerbench.dag_factory.build_sweeper_dag); the words
"airflow" and "dag" let Airflow's discovery safe mode find this file.
"""

from brokerbench.dag_factory import build_sweeper_dag

brokerbench_aws_sweeper = build_sweeper_dag()
