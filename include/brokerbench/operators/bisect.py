"""The manual bisection DAG's tasks (brokerbench_bisect, dag_factory.build_bisect_dag): the releases, one A/B run per
step task, the record. The logic is brokerbench.bisect's (the command line's ``brokerbench bisect`` runs the same);
these classes only read the params and XComs and map the outcome to the task's state."""

from __future__ import annotations

import functools
import logging
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

log = logging.getLogger("brokerbench")

PLAN_TASK_ID = "releases"


def step_task_id(k: int) -> str:
    return f"step_{k}"


def _plan(context: Any):
    from brokerbench import bisect as bs

    plan = context["ti"].xcom_pull(task_ids=PLAN_TASK_ID)
    if not plan:
        raise AirflowFailException(f"task {PLAN_TASK_ID} gave no plan (it failed: its log says why); nothing was run")
    return bs.BisectPlan.from_dict(plan)


def _records(context: Any, upto: int) -> list[Any]:
    ti = context["ti"]
    return [ti.xcom_pull(task_ids=step_task_id(k)) for k in range(1, upto)]


class BisectReleasesOperator(BaseOperator):
    """Checks the params (each refusal names its param) and lists the releases from good to bad on Maven Central
    (the repository of BROKERBENCH_MAVEN_MIRROR when set); returns the plan every step reads."""

    ui_color = "#fdebd0"

    def execute(self, context: Any) -> Any:
        from brokerbench import bisect as bs

        p = dict(context["params"] or {})
        try:
            plan = bs.plan(p["broker"], p["good"], p["bad"], p["metric"], p["suite"], p.get("variant") or None,
                           p.get("workload") or None, {**(p.get("conf") or {}), "trials": int(p["trials"])},
                           label=bs.dag_label)
        except bs.Refused as e:
            raise AirflowFailException(str(e)) from None  # no retry: the params will not change
        log.info("%d %s releases from %s to %s (%s): %s", len(plan.releases), plan.broker, plan.good, plan.bad,
                 plan.maven_metadata, ", ".join(plan.releases))
        for line in bs.planned_steps(plan.releases):
            log.info("%s", line)
        return plan.to_dict()


class BisectStepOperator(BaseOperator):
    """Step ``k`` of the bisection: the next A/B run the search asks for after steps 1 to k-1 (one run of the suite's
    DAG, through ``brokerbench bench``'s machinery, in this task's process), its verdict as XCom; skips itself when the
    search has ended, and so every later step."""

    ui_color = "#fcf3cf"

    def __init__(self, *, step: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.step = step

    def execute(self, context: Any) -> Any:
        from brokerbench import bisect as bs
        from brokerbench.cli import bench_suite

        plan = _plan(context)
        record = bs.dag_step(plan, _records(context, self.step), functools.partial(bench_suite, plan.suite),
                             say=lambda m: log.info("%s", m))
        if record is None:
            raise AirflowSkipException("the bisection ended before this step")
        return record


class BisectRecordOperator(BaseOperator):
    """Writes bisect.json and bisect.html under <results root>/bisect/ from every step's XCom, logs the table, and
    fails (no retry) unless the bisection found the release or found no regression between good and bad."""

    ui_color = "#d5f5e3"

    def execute(self, context: Any) -> Any:
        from brokerbench import bisect as bs
        from brokerbench.spec.roots import default_results_root
        from brokerbench.storage import staging_root

        plan = _plan(context)
        result = bs.dag_result(plan, _records(context, bs.DAG_STEPS + 1))
        out = plan.record_dir(staging_root(str(plan.conf.get("results_root") or default_results_root())))
        path = bs.write_record(out, result, plan.params())
        log.info("\n%s", bs.steps_table(result))
        log.info("%s", result.message)
        log.info("bisect record: %s and %s", path, out / "bisect.html")
        if result.exit_code != bs.EXIT_OK:
            raise AirflowFailException(f"{result.status}: {result.message}")
        return {"record": str(path), "status": result.status, "first_with_change": result.first_bad,
                "last_without_change": result.last_good}
