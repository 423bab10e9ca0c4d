"""The base of brokerbench's step operators: build the run's context from the task's, sync an s3:// store around
the step, skip a broker x variant the run did not select."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from brokerbench.pipeline.context import NotSelected, RunContext

log = logging.getLogger("brokerbench")


def run_context(suite: str, context: Any) -> RunContext:
    return RunContext(
        dag_id=context["dag"].dag_id, run_id=context["run_id"], suite=suite,
        params=dict(context["params"] or {}))


class BrokerbenchStepOperator(BaseOperator):
    """Base: runs one pipeline step for the run; subclasses implement ``step``."""

    ui_color = "#e8f1fb"
    template_fields: Sequence[str] = ()

    def __init__(self, *, suite: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite

    #: the step compares with history: an s3:// store's history partitions of the run's brokers are pulled
    reads_history = False

    def step(self, ctx: RunContext) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def raw_needed(self, ctx: RunContext) -> list[str]:  # noqa: ARG002 - the default ignores them
        """Result directories (relative to the run dir) the step reads, pulled from an s3:// store."""
        return []

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        log.info("== %s (try %s)", self.task_id, context["ti"].try_number)
        try:
            # s3:// results: what the step reads is pulled into the staging copy before, what it wrote pushed after
            with ctx.synced(history=self.reads_history, raw=self.raw_needed):
                return self.step(ctx)
        except NotSelected as e:
            raise AirflowSkipException(str(e)) from e


def run_type_and_ts(context: Any) -> tuple[str | None, str]:
    """The DAG run's type (scheduled, manual, backfill, asset_triggered) and time (logical date, else run_after)."""

    dag_run = context.get("dag_run")
    run_type = getattr(dag_run, "run_type", None)
    run_type = getattr(run_type, "value", run_type)
    when = context.get("logical_date") or getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
    when = when or dt.datetime.now(dt.timezone.utc)
    return (str(run_type) if run_type else None), when.astimezone(dt.timezone.utc).isoformat()


def task_states(context: Any) -> dict[str, str]:
    """The states of this run's tasks (task id -> state), as the task SDK reports them."""
    ti = context["ti"]
    dag_id, run_id = context["dag"].dag_id, context["run_id"]
    states = ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id, {})
    return {t: str(getattr(st, "value", st)) for t, st in sorted(states.items())}


def failed_tasks(context: Any) -> list[str]:
    """This run's tasks that failed (not those that could not run because of them)."""
    return [t for t, st in task_states(context).items() if st == "failed"]
