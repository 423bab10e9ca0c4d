"""Operators of the analysis task group (report, verdicts, the regression gate) and the comparison and outcome
tasks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from brokerbench import notify, web
from brokerbench.operators import links
from brokerbench.operators.base import (
    BrokerbenchStepOperator,
    failed_tasks,
    log,
    run_context,
    run_type_and_ts,
    task_states,
)
from brokerbench.outcome import Outcome
from brokerbench.pipeline.analysis import RegressionFound, compare, regression_gate, report, run_outcome, verdicts
from brokerbench.spec.roots import default_results_root


class VerdictOperator(BrokerbenchStepOperator):
    """Regression verdicts of the run against its tracks' history (summary/regression.json)."""

    ui_color = "#fcf3cf"
    reads_history = True

    def step(self, ctx):
        return verdicts(ctx)


class RegressionGateOperator(BrokerbenchStepOperator):
    """Fails when a metric regressed, so Airflow's failure alerting fires (scheduled runs by default)."""

    ui_color = "#f5b7b1"

    def execute(self, context: Any) -> Any:
        ctx = run_context(self.suite, context)
        run_type, _ = run_type_and_ts(context)
        try:
            with ctx.synced():
                return regression_gate(ctx, run_type)
        except RegressionFound as e:
            raise AirflowFailException(str(e)) from e


class CompareOperator(BaseOperator):
    """Comparison report (versions of a broker, brokers side by side) from the history store.

    The results root comes from the triggering history Asset event (extra
    ``results_root``: the store's URI, ``s3://...`` or a path), else from the
    ``results_root`` param.
    """

    ui_color = "#d6eaf8"
    operator_extra_links = (links.ComparisonLink(),)

    def execute(self, context: Any) -> Any:
        params = dict(context["params"] or {})
        results_root = params.get("results_root") or default_results_root()
        for events in (context.get("triggering_asset_events") or {}).values():
            for event in events:
                extra = getattr(event, "extra", None) or {}
                if extra.get("results_root"):  # the results store's URI (s3://... or a path), never a staging copy
                    results_root = extra["results_root"]
        log.info("comparison of the history in %s", results_root)
        path = compare(results_root, context["run_id"], params.get("environment") or None,
                                params.get("brokers") or None)
        context["ti"].xcom_push(key=links.COMPARISON_URL_XCOM_KEY, value=web.comparison_url(results_root, path))
        return path


class ReportOperator(BrokerbenchStepOperator):
    """Writes report.html (table, charts, provenance) and logs a text summary."""

    ui_color = "#d6eaf8"
    operator_extra_links = (links.ReportLink(),)
    reads_history = True
    _failed: list[str] = []

    def execute(self, context: Any) -> Any:
        self._failed = failed_tasks(context)  # for the headline: a failed step makes the run "failed"
        return super().execute(context)

    def step(self, ctx):
        return report(ctx, self._failed)


class RunOutcomeOperator(BaseOperator):
    """The run's last word: its outcome (no regression, regression, not judged, failed) in
    summary/outcome.json and the log's last line; fails the DAG run unless every step succeeded (or was not
    selected). A scheduled run in which nothing could be judged sends a ``not-judged`` notification.

    Airflow decides a run's state from its leaf tasks, and undeploy, aggregation,
    report and teardown run after failures on purpose. This task is a teardown
    (so it runs even when the run was stopped from the UI or the API) with
    ``on_failure_fail_dagrun``; it reads the states of the run's other tasks and
    the run's own state, and fails when a task failed or could not run
    (``upstream_failed``), or when the run was marked failed while it ran.
    """

    ui_color = "#f5b7b1"

    def __init__(self, *, suite: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        ctx = run_context(self.suite, context)
        states = {t: st for t, st in task_states(context).items() if t != self.task_id}
        bad = {t: st for t, st in states.items() if st in ("failed", "upstream_failed")}
        run_state = ti.get_dagrun_state(dag_id=ctx.dag_id, run_id=ctx.run_id)
        stopped = str(getattr(run_state, "value", run_state)).lower() == "failed"
        tally = Counter(states.values())
        log.info("tasks: %s%s", ", ".join(f"{n} {st}" for st, n in sorted(tally.items())),
                 f" ({', '.join(f'{t} {st}' for t, st in bad.items())})" if bad else "")
        with ctx.synced():
            result = run_outcome(ctx, [t for t, st in bad.items() if st == "failed"] or list(bad), stopped)
        run_type, _ = run_type_and_ts(context)
        if result.outcome == Outcome.NOT_JUDGED and run_type == "scheduled":
            notify.send(notify.not_judged_message(context, result))
        if bad or stopped:
            reasons = [f"{t}: {st}" for t, st in bad.items()]
            if stopped:
                reasons.append("the run was marked failed (stopped) while it ran")
            raise AirflowFailException(
                "this run did not complete: " + "; ".join(reasons) +
                f". Every result measured is kept in {ctx.run_dir}")
        return result.to_dict()
