"""Typed contracts: run params defined once, the worker job's schema, the environments' settings."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from brokerbench.spec.params import ANALYSIS_PARAMS, ENVIRONMENT_PARAMS, PARAMS, PLAN_PARAMS, markdown_table
from brokerbench.spec.plan import RunParams
from brokerbench.worker.job import JOB_FIELDS, Job, JobError, check_job

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_list_the_params_from_their_definition():
    assert markdown_table() in (ROOT / "docs" / "specs.md").read_text()


def test_the_plan_params_are_runparams_fields_and_the_groups_are_disjoint():
    assert set(RunParams.model_fields) == set(PLAN_PARAMS)
    assert ANALYSIS_PARAMS == ("regression_min_runs", "regression_gate")
    assert not set(PLAN_PARAMS) & set(ANALYSIS_PARAMS) and not set(PLAN_PARAMS) & set(ENVIRONMENT_PARAMS)


def test_every_suite_dag_offers_exactly_the_defined_params():
    from airflow.sdk.definitions.param import ParamsDict

    from brokerbench.dag_factory import build_dag

    dag = build_dag("smoke")
    assert list(dag.params) == [p.name for p in PARAMS]
    params = ParamsDict(dag.params)
    params.update({"interval_seconds": 2})
    assert params.validate()["interval_seconds"] == 2
    bad = ParamsDict(dag.params)
    with pytest.raises(Exception, match="interval_seconds"):
        bad.update({"interval_seconds": 0})
        bad.validate()


def job(**changes):
    base = {"worker": "localhost-0", "phase": "measure", "broker": "kafka", "workload": {"messageSize": 100},
            "driver": {}, "endpoint": {"bootstrap_servers": "127.0.0.1:9092"}, "topics": ["t"], "duration_s": 5}
    return {**base, **changes}


def test_the_job_schema_documents_every_field_and_keeps_a_job_as_given():
    assert set(JOB_FIELDS) == set(Job.model_fields) and all(JOB_FIELDS.values())
    j = job(rate_msg_s=float("inf"), clock_offset_ms=None, extra_field=1)
    assert check_job(j) is j
    assert Job(**j).to_dict() == j


def test_a_bad_job_names_every_bad_field():
    with pytest.raises(JobError, match=r"\(2 problem\(s\)\): topics: .*; duration_s: ") as e:
        check_job(job(topics="t", duration_s="long"))
    with pytest.raises(JobError, match="worker: Field required"):
        check_job({k: v for k, v in job().items() if k != "worker"})
    assert "topics" in str(e.value)


def test_the_worker_refuses_a_bad_job_file_before_connecting(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job(topics="t")))
    out = subprocess.run([sys.executable, "-m", "brokerbench.worker", "run", "--job", str(path), "--out",
                          str(tmp_path / "r.jsonl")], capture_output=True, text=True)
    assert out.returncode == 1 and "invalid job" in out.stderr and "topics" in out.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_aws_defaults_are_the_typed_settings_defaults():
    from brokerbench.environments.aws.settings_check import DEFAULTS
    from brokerbench.environments.settings import AwsSettings, LocalSettings, defaults

    assert DEFAULTS == defaults(AwsSettings)
    assert defaults(LocalSettings)["disk_baseline_mb"] == 64


def test_a_run_may_choose_any_shipped_variant_while_the_suite_keeps_its_default():
    """as-configured is not in smoke's list (fsync-off, fsync-on) but is shipped: the params check, Airflow's own
    check of the DAG's params and the external environment's check all take it for Pulsar on external."""
    from airflow.sdk.definitions.param import ParamsDict

    from brokerbench.dag_factory import build_dag
    from brokerbench.environments.external.checks import check_plan
    from brokerbench.spec import load_suite
    from brokerbench.spec.common import list_names
    from brokerbench.spec.errors import SpecError
    from brokerbench.spec.run_conf import check_conf

    suite = load_suite("smoke")
    assert "as-configured" not in suite.variants and "as-configured" in list_names("variants")
    conf, plan = check_conf(suite, {"environment": "external", "brokers": "pulsar", "variants": "as-configured"})
    assert conf["variants"] == ["as-configured"] and {i.variant for i in plan.items} == {"as-configured"}
    check_plan(plan, conf, resolve_connections=False)  # no broker-side setting: Pulsar on external runs it
    schema = next(p for p in PARAMS if p.name == "variants").schema_for(suite)
    assert schema["items"]["enum"] == list_names("variants")
    dag = build_dag("smoke")
    assert dag.params["variants"] == list(suite.variants)  # the default stays the suite's
    params = ParamsDict(dag.params)
    params.update({"variants": ["as-configured", "fsync-on"]})
    assert params.validate()["variants"] == ["as-configured", "fsync-on"]
    with pytest.raises(SpecError, match="'fsync-maybe' is not one of"):
        check_conf(suite, {"variants": ["fsync-maybe"]})
