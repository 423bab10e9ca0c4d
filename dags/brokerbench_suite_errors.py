"""Airflow import errors for broken brokerbench suite files.

dags/brokerbench_suites.py builds one DAG per suite and leaves out a suite file
that does not load, so one bad YAML hides only its own DAG. This file raises
the errors of those suite files (each named), so Airflow lists them as this
file's import error. With every suite loading, it defines no DAG.
"""

from brokerbench.dag_factory import raise_for_broken_suites

raise_for_broken_suites()
