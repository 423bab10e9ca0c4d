"""A dead run's DAG run in Airflow's metadata database: marked failed, with its unfinished task instances.

Two callers: the guard of a command-line run, once the command line is gone (:mod:`brokerbench.run_guard`),
and a run that recovers what a dead run left (:func:`.environment_lease.recover_dead_runs`), for runs whose
command line, ``airflow dags test`` and guard were all killed: nothing else would ever end them (no scheduler
watches a ``dags test`` run), so they stayed ``running``.

Airflow's own models and ORM session (``airflow.models.DagRun`` / ``TaskInstance``, ``create_session``),
imported only in the functions here. They reach the database where the process has it: ``airflow dags test``
(every task in its own process, as ``brokerbench bench`` runs them), the guard, a test. A task on a worker under
Airflow 3's supervisor has no database access (its Execution API lets a task change its own state only), so
there the record says the run was not marked, and why; a scheduler ends its own runs whose tasks died.
"""

from __future__ import annotations

from typing import Any

#: the task instance states of a task that has not finished (Airflow's TaskInstanceState values)
UNFINISHED = ("running", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "deferred", "restarting")


def mark_failed(dag_id: str, run_id: str, session: Any = None) -> str:
    """The DAG run and its unfinished task instances: failed, in Airflow's database (``session``: an ORM session
    of the caller's, committed by the caller; default: Airflow's own, committed here). Says what it changed."""
    from airflow.utils.session import create_session

    if session is None:
        with create_session() as own:
            return _mark_failed(own, dag_id, run_id)
    return _mark_failed(session, dag_id, run_id)


def _mark_failed(session: Any, dag_id: str, run_id: str) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        return f"no DAG run {run_id} in the database"
    tis = session.scalars(select(TaskInstance).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
        TaskInstance.state.in_([TaskInstanceState(s) for s in UNFINISHED]))).all()
    for ti in tis:
        ti.state = TaskInstanceState.FAILED
    previous = run.state
    if previous not in (DagRunState.SUCCESS, DagRunState.FAILED):
        run.state = DagRunState.FAILED
    session.flush()
    return f"DAG run {run_id}: {previous} -> {run.state}, {len(tis)} unfinished task(s) marked failed"


def fail_dead_run(run_key: str, session: Any = None) -> dict[str, Any]:
    """Mark failed the unfinished DAG run whose run key (:func:`brokerbench.util.run_key`: dag id and run id
    made path-safe) is ``run_key``. Returns ``{"marked": bool, "dag_id", "run_id", "said"}``; never raises: a
    process without Airflow's database says so in ``said``."""
    try:
        from airflow.utils.session import create_session

        if session is None:
            with create_session() as own:
                return _fail_dead_run(own, run_key)
        return _fail_dead_run(session, run_key)
    except Exception as e:  # noqa: BLE001 - the recovery goes on; the record says why the run was not marked
        return {"marked": False, "said": f"not marked in Airflow's database ({type(e).__name__}: {e}); mark it "
                                         "failed in the UI or with the REST API (PATCH .../dagRuns/<run id>)"}


def _fail_dead_run(session: Any, run_key: str) -> dict[str, Any]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    from brokerbench.util import run_key as key_of

    unfinished = session.execute(select(DagRun.dag_id, DagRun.run_id).where(
        DagRun.state.not_in([DagRunState.SUCCESS, DagRunState.FAILED]))).all()
    match = next(((d, r) for d, r in unfinished if key_of(d, r) == run_key), None)
    if match is None:
        return {"marked": False, "said": "no unfinished DAG run of this run key in Airflow's database"}
    dag_id, run_id = match
    return {"marked": True, "dag_id": dag_id, "run_id": run_id, "said": _mark_failed(session, dag_id, run_id)}
