"""Every suite becomes a DAG that imports fast and is wired as documented."""

import subprocess
import sys

import pytest
from airflow.sdk import TriggerRule

from brokerbench.dag_factory import build_all_dags
from brokerbench.spec import list_suites

DAGS = build_all_dags()


def test_one_dag_per_suite():
    assert sorted(DAGS) == sorted(f"brokerbench_{s}".replace("-", "_") for s in list_suites())


def test_dag_file_imports_in_a_fresh_interpreter_with_every_suite_dag(tmp_path):
    """How long that takes is bench/dag_parse.py's business (a figure beside Airflow's own import, measured in one
    run); here: it imports alone and defines every DAG."""
    code = ("import runpy; g = runpy.run_path('dags/brokerbench_suites.py'); "
            "print(sum(k.startswith('brokerbench_') for k in g))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert int(out.stdout.split()[-1]) == len(DAGS)


def test_parse_does_not_import_brokers_or_spark():
    code = ("import runpy, sys; runpy.run_path('dags/brokerbench_suites.py'); "
            "print(sorted(m for m in ('pyspark', 'kafka', 'pulsar', 'pika', 'matplotlib', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("dag_id", sorted(DAGS))
def test_tags_retries_and_teardown(dag_id):
    dag = DAGS[dag_id]
    assert "brokerbench" in dag.tags and len(dag.tags) >= 2
    for task in dag.tasks:
        if task.task_id not in ("setup.validate", "setup.acquire_environment", "run_outcome"):
            assert task.retries >= 1, task.task_id
    teardown = dag.get_task("teardown")
    provision = dag.get_task("setup.provision")
    assert teardown.is_teardown and provision.is_setup
    assert provision in teardown.upstream_list
    assert dag.catchup is False and dag.max_active_runs == 1


def test_stage_chain_and_trigger_rules():
    dag = DAGS["brokerbench_smoke"]
    ids = {t.task_id for t in dag.tasks}
    for broker in ("kafka", "pulsar", "rabbitmq"):
        for variant in ("fsync_off", "fsync_on"):
            g = f"benchmark.{broker}__{variant}"
            for step in ("deploy", "prepare_topics", "warmup", "measure", "undeploy"):
                assert f"{g}.{step}" in ids
            assert dag.get_task(f"{g}.undeploy").trigger_rule == TriggerRule.ALL_DONE
            assert dag.get_task(f"{g}.warmup").downstream_task_ids == {f"{g}.measure", "run_outcome"}
            # a failed host setup stops every group's deploy, not only the first group's
            assert "setup.host_setup" in dag.get_task(f"{g}.deploy").upstream_task_ids
            for step in ("deploy", "prepare_topics", "warmup", "measure", "undeploy"):
                assert dag.get_task(f"{g}.{step}").pool == "brokerbench_local"
    assert dag.get_task("analysis.aggregate").trigger_rule == TriggerRule.ALL_DONE
    # the run's last word: a teardown (runs even when the run is stopped) that fails the run
    outcome = dag.get_task("run_outcome")
    assert outcome.is_teardown and outcome.on_failure_fail_dagrun
    assert outcome.upstream_task_ids == {t.task_id for t in dag.tasks} - {outcome.task_id}
    # the environment's lease: taken before provisioning, given back in a teardown
    acquire, release = dag.get_task("setup.acquire_environment"), dag.get_task("release_environment")
    assert acquire.is_setup and acquire.pool == "brokerbench_local"
    assert release.is_teardown and acquire in release.upstream_list
    assert "setup.provision" in acquire.downstream_task_ids and "setup.acquire_environment" in \
        dag.get_task("setup.validate").downstream_task_ids
    dag.validate()
    chain_ids = ["analysis.aggregate", "analysis.history", "analysis.verdicts", "analysis.report",
                 "analysis.regression_gate"]
    for up, down in zip(chain_ids, chain_ids[1:]):
        assert down in dag.get_task(up).downstream_task_ids, (up, down)
    assert dag.get_task("analysis.report").trigger_rule == TriggerRule.ALL_DONE
    # the history step announces new results to the comparison DAG
    assert [o.uri for o in dag.get_task("analysis.history").outlets] == ["brokerbench://history/"]


@pytest.mark.parametrize("dag_id, pool", [("brokerbench_throughput_sweep", "brokerbench_local"),
                                           ("brokerbench_aws_seed_throughput", "brokerbench_aws")])
def test_the_throughput_suites_parse_into_dags_of_sweeps(dag_id, pool):
    """The 1 KB sweep (seed 004's peak stable throughput) runs by name, locally and on aws: a DAG per suite
    with a group per broker x variant, aggregated and reported."""
    from airflow.sdk.definitions.param import ParamsDict

    dag = DAGS[dag_id]
    dag.validate()
    assert {"throughput", "sweep"} <= set(dag.tags) and dag.schedule is None
    ids = {t.task_id for t in dag.tasks}
    for broker in ("kafka", "pulsar", "rabbitmq"):
        for variant in ("fsync_off", "fsync_on"):
            assert f"benchmark.{broker}__{variant}.measure" in ids
            assert dag.get_task(f"benchmark.{broker}__{variant}.measure").pool == pool
    assert "analysis.history" in dag.get_task("analysis.aggregate").downstream_task_ids and "analysis.report" in ids
    resolved = ParamsDict(dag.params).validate()
    assert resolved["environment"] == pool.removeprefix("brokerbench_")
    assert resolved["workloads"] is None  # the suite's: the sweep workload with its rates


@pytest.mark.parametrize("conf, field", [
    ({"brokers": ["activemq"]}, "brokers"),
    ({"test_duration_minutes": 0}, "test_duration_minutes"),
    ({"rate_override_msg_s": -5}, "rate_override_msg_s"),
    ({"environment": "gcp"}, "environment"),
    ({"variants": []}, "variants"),
])
def test_bad_params_are_refused_naming_the_field(conf, field):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict(DAGS["brokerbench_smoke"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_default_params_are_valid():
    from airflow.sdk.definitions.param import ParamsDict

    resolved = ParamsDict(DAGS["brokerbench_smoke"].params).validate()
    assert resolved["brokers"] == ["kafka", "pulsar", "rabbitmq"]
    assert resolved["variants"] == ["fsync-off", "fsync-on"]


def test_compare_dag_runs_on_the_history_asset():
    import runpy

    from brokerbench.dag_factory import HISTORY_ASSET

    code = ("import runpy, sys; g = runpy.run_path('dags/brokerbench_compare.py'); "
            "print(sorted(m for m in ('pyspark', 'kafka', 'pulsar', 'pika', 'matplotlib', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.stdout.strip().splitlines()[-1] == "[]"
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    dag = runpy.run_path(str(root / "dags" / "brokerbench_compare.py"))["brokerbench_compare"]
    dag.validate()
    assert dag.dag_id == "brokerbench_compare" and dag.catchup is False
    assert list(dag.schedule) == [HISTORY_ASSET]
    text = (root / "dags" / "brokerbench_compare.py").read_text().lower()
    assert "airflow" in text and "dag" in text
    for dag_id, suite_dag in DAGS.items():
        history = suite_dag.get_task("analysis.history")
        assert HISTORY_ASSET in history.outlets, dag_id


def test_aws_sweeper_dag_is_hourly_paused_at_first_and_light_to_parse():
    import runpy

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    code = ("import runpy, sys; g = runpy.run_path('dags/brokerbench_aws_sweeper.py'); "
            "print(sorted(m for m in ('pyspark', 'kafka', 'pulsar', 'pika', 'matplotlib', 'plotly') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(root))
    assert out.stdout.strip().splitlines()[-1] == "[]"
    dag = runpy.run_path(str(root / "dags" / "brokerbench_aws_sweeper.py"))["brokerbench_aws_sweeper"]
    dag.validate()
    assert dag.is_paused_upon_creation is True and dag.catchup is False and dag.max_active_runs == 1
    assert [t.task_id for t in dag.tasks] == ["sweep_expired_instances"]
    from airflow.sdk.definitions.param import ParamsDict

    defaults = ParamsDict(dag.params).validate()
    assert defaults == {"aws_conn_id": "brokerbench_aws", "region_name": "", "grace_minutes": 15, "dry_run": False}
    bad = ParamsDict(dag.params)
    with pytest.raises(Exception, match="grace_minutes"):
        bad.update({"grace_minutes": -1})


def test_a_task_process_builds_only_its_own_dag():
    code = ("import runpy; g = runpy.run_path('dags/brokerbench_suites.py'); "
            "print(sorted(k for k in g if k.startswith('brokerbench_')))")
    env = dict(__import__("os").environ, _AIRFLOW_PARSING_CONTEXT_DAG_ID="brokerbench_smoke",
               _AIRFLOW_PARSING_CONTEXT_TASK_ID="setup.validate")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.stdout.strip().splitlines()[-1] == "['brokerbench_smoke']"


def test_the_bisect_dag_is_manual_and_light_to_parse():
    """Its tasks and params: tests/unit/test_bisect.py; here: the DAG file alone imports no client or Spark."""
    code = ("import runpy, sys; g = runpy.run_path('dags/brokerbench_bisect.py'); "
            "print(g['brokerbench_bisect'].schedule, sorted(m for m in ('pyspark', 'kafka', 'pulsar', 'pika', "
            "'matplotlib', 'plotly', 'brokerbench.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.stdout.strip().splitlines()[-1] == "None []"
