"""What each task of a benchmark DAG does, without Airflow.

Every function takes a :class:`RunContext` and works from files in the run's
results directory (``plan.json``, ``provenance/``) and the environment's
state directory, never from memory: tasks of one run may execute in separate
processes, and any task can be retried on its own. The Airflow operators in
:mod:`brokerbench.operators` are thin wrappers around these functions.

One module per task group of the DAG (docs/architecture.md has the table of tasks):

- :mod:`.context`: :class:`~.context.RunContext`, the run a task works on;
- :mod:`.environment_lease`: the run's hold on its environment (acquire, renew, release);
- :mod:`.setup`: validate, provision, host setup;
- :mod:`.benchmark`: per broker x variant - deploy, prepare topics, warm-up and measured phases, undeploy;
- :mod:`.analysis`: the aggregation and the history append (what the Spark jobs of ``spark_jobs/`` are given: the
  operators submit them), report, verdicts, the regression gate, comparisons;
- :mod:`.teardown`: stop everything the run started.
"""
