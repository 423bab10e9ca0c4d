"""Turns every suite file (include/suites/*.yaml) into one Airflow DAG.

Shape of a DAG (task groups per stage)::

    setup:     validate -> acquire_environment (setup: waits, deferred, for the
               environment's lease) -> provision (setup) -> host_setup
    benchmark: <broker>__<variant> groups, one after the other:
               deploy -> prepare_topics -> warmup -> measure -> undeploy
    analysis:  aggregate (Spark) -> history (Spark, emits the history Asset)
               -> verdicts -> report -> regression_gate
    teardown   (teardown of provision: runs whatever failed)
    -> release_environment (teardown of acquire_environment)
    -> run_outcome (teardown; fails the run unless every step succeeded)

The groups are built from the suite's brokers x variants; params of a manual
trigger may narrow them, and the groups not chosen skip themselves. Side B of an
A/B run on another variant (``compare_with.variants``) needs no group of its own:
its trials alternate with side A's in side A's group (``PlanItem.group_variant``). A failed
measurement does not stop the next broker (``undeploy`` runs on all_done),
and aggregation runs on whatever was measured; but every deploy also needs
host_setup, so nothing is deployed or measured on hosts whose setup failed.
The tasks that load the hosts run in the pool ``brokerbench_<environment>``
(create it with one slot for ``local``); the lease (brokerbench.lease) keeps a
whole run's measurements apart from any other run's. Parsing imports only the
spec layer and Airflow: no broker client, no Spark.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import DAG, Asset, BaseOperator, Param, TaskGroup, TriggerRule, chain

from brokerbench.notify import failure_notifier, regression_notifier
from brokerbench.operators.analysis import (
    CompareOperator,
    RegressionGateOperator,
    ReportOperator,
    RunOutcomeOperator,
    VerdictOperator,
)
from brokerbench.operators.benchmark import (
    DeployBrokerOperator,
    PrepareTopicsOperator,
    RunPhaseOperator,
    UndeployBrokerOperator,
)
from brokerbench.operators.setup import (
    AcquireEnvironmentOperator,
    HostSetupOperator,
    ProvisionOperator,
    ValidatePlanOperator,
)
from brokerbench.operators.spark import AggregateResultsOperator, HistoryAppendOperator
from brokerbench.operators.teardown import ReleaseEnvironmentOperator, SweepExpiredInstancesOperator, TeardownOperator
from brokerbench.spec import list_suites, load_suite
from brokerbench.spec.params import PARAMS
from brokerbench.spec.roots import default_results_root, spec_root
from brokerbench.util import dag_id_for

log = logging.getLogger("brokerbench")

#: emitted when a run's rows land in the history store; the comparison DAG is scheduled on it
HISTORY_ASSET = Asset(name="brokerbench_history", uri="brokerbench://history")


def pool_for(environment: str) -> str:
    """The Airflow pool of the tasks that load an environment's hosts (``airflow pools set brokerbench_local 1``)."""
    return f"brokerbench_{environment}"


DEFAULT_ARGS = {
    "owner": "brokerbench",
    "retries": 1,
    "retry_delay": dt.timedelta(seconds=15),
}


def params_for(suite) -> dict[str, Param]:
    """Manual-trigger params, validated by JSON schema before a run is created: the table of
    :mod:`brokerbench.spec.params`, the one definition of the run parameters."""
    return {p.name: Param(p.default_for(suite), **p.schema_for(suite), description=p.description) for p in PARAMS}


def build_dag(suite_name: str) -> DAG:
    suite = load_suite(suite_name)
    dag_id = dag_id_for(suite.name)
    with DAG(
        dag_id=dag_id,
        description=suite.description or f"brokerbench suite {suite.name}",
        schedule=suite.schedule,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,  # runs share machines: never two at once
        default_args=DEFAULT_ARGS,
        params=params_for(suite),
        tags=["brokerbench", *suite.tags],
        doc_md=__doc__,
        on_failure_callback=failure_notifier(),  # connection brokerbench_notify (docs/notifications.md)
    ) as dag:
        kw: dict[str, Any] = {"suite": suite.name}
        pool: dict[str, Any] = {"pool": pool_for(suite.environment)}
        with TaskGroup("setup"):
            validate = ValidatePlanOperator(task_id="validate", retries=0, **kw)
            acquire = AcquireEnvironmentOperator(task_id="acquire_environment", retries=0, **pool, **kw)
            provision = ProvisionOperator(task_id="provision", **pool, **kw)
            host_setup = HostSetupOperator(task_id="host_setup", **pool, **kw)
            validate >> acquire >> provision >> host_setup

        previous: BaseOperator = host_setup
        with TaskGroup("benchmark"):
            for broker in sorted(suite.brokers):
                for variant in suite.variants:
                    with TaskGroup(f"{broker}__{variant}".replace("-", "_")):
                        bv = {"broker": broker, "variant": variant, **kw}
                        deploy = DeployBrokerOperator(task_id="deploy", **pool, **bv)
                        prepare = PrepareTopicsOperator(task_id="prepare_topics", **pool, **bv)
                        warmup = RunPhaseOperator(task_id="warmup", phase="warmup", **pool, **bv)
                        measure = RunPhaseOperator(task_id="measure", phase="measure", **pool, **bv)
                        undeploy = UndeployBrokerOperator(task_id="undeploy", broker=broker,
                                                          trigger_rule=TriggerRule.ALL_DONE, **pool, **kw)
                        chain(previous, deploy, prepare, warmup, measure, undeploy)
                        # a failed host setup stops every group, not only the first
                        host_setup >> deploy
                        previous = undeploy

        with TaskGroup("analysis"):
            aggregate = AggregateResultsOperator(task_id="aggregate", trigger_rule=TriggerRule.ALL_DONE, **kw)
            history = HistoryAppendOperator(task_id="history", outlets=[HISTORY_ASSET], **kw)
            verdicts = VerdictOperator(task_id="verdicts", **kw)
            # the report is written whatever happened to history and verdicts
            report = ReportOperator(task_id="report", trigger_rule=TriggerRule.ALL_DONE, **kw)
            # a regression fails without retry, and is notified
            gate = RegressionGateOperator(task_id="regression_gate", on_failure_callback=regression_notifier(), **kw)
            previous >> aggregate >> history >> verdicts >> report >> gate

        teardown = TeardownOperator(task_id="teardown", retries=2, **kw)
        report >> teardown.as_teardown(setups=provision)
        release = ReleaseEnvironmentOperator(task_id="release_environment", retries=2, **kw)
        teardown >> release.as_teardown(setups=acquire)

        # The run's last word. A teardown, so it runs even when the run was stopped from the UI or the
        # API; it fails the run (on_failure_fail_dagrun) when any step failed or the run was stopped.
        outcome = RunOutcomeOperator(task_id="run_outcome", retries=0, **kw)
        for task in dag.tasks:
            if task is not outcome:
                task >> outcome
        outcome.as_teardown(setups=acquire, on_failure_fail_dagrun=True)
    return dag


def build_compare_dag() -> DAG:
    """brokerbench_compare: the comparison report, run whenever a run lands in the history store."""
    with DAG(
        dag_id="brokerbench_compare",
        description="Versions of one broker and brokers side by side, from the history store",
        schedule=[HISTORY_ASSET],
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        params={
            "results_root": Param(default_results_root(), type="string", minLength=1,
                                  description="Results directory holding history/ (an asset event's own wins)"),
            "environment": Param("", type="string", description="Only this environment (empty = all)"),
            "brokers": Param([], type="array", items={"type": "string", "enum": ["kafka", "pulsar", "rabbitmq"]},
                             description="Only these brokers (empty = all)"),
        },
        tags=["brokerbench", "comparison"],
    ) as dag:
        CompareOperator(task_id="compare")
    return dag


def build_sweeper_dag() -> DAG:
    """brokerbench_aws_sweeper: hourly, terminates instances of any run past their lifetime (paused at first)."""
    with DAG(
        dag_id="brokerbench_aws_sweeper",
        description="Terminate brokerbench EC2 instances that outlived their run's maximum lifetime",
        schedule="@hourly",
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,  # unpause where the aws environment is used
        default_args={**DEFAULT_ARGS, "retries": 0},
        params={
            "aws_conn_id": Param("brokerbench_aws", type="string", minLength=1,
                                 description="Airflow connection (type aws) of the account to sweep"),
            "region_name": Param("", type="string", description="Region (empty = the connection's)"),
            "grace_minutes": Param(15, type="number", minimum=0,
                                   description="Minutes past an instance's brokerbench:expires-at tag before it "
                                               "is terminated"),
            "dry_run": Param(False, type="boolean", description="Only list what would be terminated"),
        },
        tags=["brokerbench", "aws"],
    ) as dag:
        SweepExpiredInstancesOperator(task_id="sweep_expired_instances")
    return dag


def build_bisect_dag() -> DAG:
    """brokerbench_bisect: manual only; which release between a good and a bad one changed a metric (docs/cli.md
    "bisect"). ``releases`` checks the params and lists the releases on Maven Central; ``step_1`` to ``step_N``
    each run the one A/B run the search asks for next (a run of the suite's DAG through ``brokerbench bench``'s
    machinery, in the step's own process, so each run enters the history as any run does) and skip themselves
    once it has ended; ``record`` writes bisect.json and bisect.html and fails unless the search ended."""
    from brokerbench.bisect import DAG_STEPS
    from brokerbench.metrics import METRICS
    from brokerbench.operators.bisect import (
        PLAN_TASK_ID,
        BisectRecordOperator,
        BisectReleasesOperator,
        BisectStepOperator,
        step_task_id,
    )
    from brokerbench.spec.params import AB_DEFAULT_TRIALS, AB_MIN_TRIALS

    with DAG(
        dag_id="brokerbench_bisect",
        description="The first release of a broker between a good and a bad one that changed a metric: A/B runs in "
                    "a binary search",
        schedule=None,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "retries": 0},  # a step is an A/B run with its own teardown: retry by hand
        params={
            "broker": Param("kafka", type="string", enum=["kafka", "pulsar"],
                            description="The broker whose releases are bisected (RabbitMQ's come from Debian)"),
            "good": Param("4.1.0", type="string", minLength=1, description="A release without the change"),
            "bad": Param("4.1.1", type="string", minLength=1, description="A later release with it"),
            "metric": Param("publish_latency_p99_ms", type="string", enum=[m.column for m in METRICS],
                            description="The metric each step judges (side B against side A)"),
            "suite": Param("smoke", type="string", minLength=1, description="The suite each A/B run measures"),
            "variant": Param("", type="string", description="The one variant of each run (empty: the suite's "
                                                             "first)"),
            "workload": Param("", type="string", description="One workload of the suite (empty: all of them)"),
            "trials": Param(AB_DEFAULT_TRIALS, type="integer", minimum=AB_MIN_TRIALS,
                            description="Trials per side of each A/B run"),
            "conf": Param({}, type="object", description="More params of every A/B run (results_root, "
                                                         "test_duration_minutes, ...; not brokers, variants, "
                                                         "workloads, broker_versions or compare_with)"),
        },
        tags=["brokerbench", "bisect"],
        doc_md=build_bisect_dag.__doc__,
    ) as dag:
        previous: BaseOperator = BisectReleasesOperator(task_id=PLAN_TASK_ID)
        steps = []
        for k in range(1, DAG_STEPS + 1):
            step = BisectStepOperator(task_id=step_task_id(k), step=k)
            previous >> step
            steps.append(step)
            previous = step
        record = BisectRecordOperator(task_id="record", trigger_rule=TriggerRule.ALL_DONE)
        steps >> record
    return dag


def build_all_dags(broken: dict[str, str] | None = None) -> dict[str, DAG]:
    """One DAG per suite file; a broken suite file hides only its own DAG.

    A suite that does not load (bad YAML, a refused field, a missing workload)
    is left out and logged; its error goes into ``broken`` (suite file ->
    message) when given. ``dags/brokerbench_suite_errors.py`` raises those
    errors, so Airflow shows them as that file's import error, naming each
    suite file, while every other suite's DAG stays.

    A task process parses the DAG file only to run one task: Airflow's parsing
    context names the DAG, and only that suite's DAG is built (the others'
    files are not even read).
    """
    from airflow.sdk import get_parsing_context  # only where DAG files are parsed by Airflow

    wanted = get_parsing_context().dag_id
    dags = {}
    for name in list_suites():
        if wanted and dag_id_for(name) != wanted:
            continue
        try:
            dag = build_dag(name)
        except Exception as e:  # noqa: BLE001 - one broken suite must not hide the others
            message = suite_error(name, e)
            log.error("suite %s left out: %s", name, message)
            if broken is not None:
                broken[suite_file(name)] = message
            continue
        dags[dag.dag_id] = dag
    return dags


def suite_file(name: str) -> str:
    """The suite's file as users know it (include/suites/<name>.yaml in the tree)."""
    root = spec_root() / "suites"
    found = sorted(root.glob(f"{name}.y*ml"))
    return str(found[0] if found else root / f"{name}.yaml")


def suite_error(name: str, error: BaseException) -> str:
    """The error's message, naming the suite file (spec errors name it already)."""
    text = str(error)
    return text if suite_file(name) in text or f"{name}.y" in text else f"{suite_file(name)}: {text}"


class BrokenSuites(Exception):
    """Suite files that did not become DAGs, each named with its error."""


def raise_for_broken_suites() -> None:
    """Raise :class:`BrokenSuites` naming every suite file that does not load (nothing when all load).

    Only loads the suites: a DAG built here would be registered from this file too (Airflow registers
    every DAG used in a ``with`` block), a duplicate of the suite DAG file's.
    """
    broken: dict[str, str] = {}
    for name in list_suites():
        try:
            load_suite(name)
        except Exception as e:  # noqa: BLE001 - reported below, with the file
            broken[suite_file(name)] = suite_error(name, e)
    if broken:
        raise BrokenSuites(f"{len(broken)} suite file(s) could not be loaded, so their DAGs are missing "
                           "(the other suites' DAGs are not affected):\n"
                           + "\n".join(f"- {message}" for _, message in sorted(broken.items())))
