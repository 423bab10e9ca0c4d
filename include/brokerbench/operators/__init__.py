"""Airflow operators of a benchmark DAG: thin wrappers around :mod:`brokerbench.pipeline`, one module per task
group as there (docs/architecture.md has the table of tasks).

Each operator builds a :class:`~brokerbench.pipeline.context.RunContext` from the task context (dag id, run id,
params) and calls one pipeline function. Modules: ``base`` (the step operator), ``setup``, ``benchmark``,
``spark`` (aggregation and history append), ``analysis``, ``links``, ``teardown``.
"""
