"""brokerbench.environments.registry: an environment is one class, chosen once by name; RunContext parses the
plan once and asks that class; nothing else compares an environment's name."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from brokerbench.environments.local import LocalEnvironment
from brokerbench.environments.registry import ENVIRONMENTS, Aws, External, Local, UnknownEnvironment, environment_kind
from brokerbench.environments.settings import AwsSettings, ExternalSettings, LocalSettings
from brokerbench.pipeline import environment_lease, setup
from brokerbench.pipeline.context import RunContext
from brokerbench.spec import Plan, SpecError, Suite, build_plan, load_suite

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "include" / "brokerbench"


@pytest.fixture(autouse=True)
def no_site_settings(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)


def test_each_name_maps_to_its_class_and_settings_model():
    assert ENVIRONMENTS == {"local": Local, "aws": Aws, "external": External}
    assert {n: environment_kind(n).settings_model for n in ENVIRONMENTS} == \
        {"local": LocalSettings, "aws": AwsSettings, "external": ExternalSettings}
    assert all(kind.name == name for name, kind in ENVIRONMENTS.items())


def test_the_specs_environment_field_lists_the_registrys_names():
    """The spec layer cannot import the environments: its Literal is a second list, held equal to the registry."""
    for model in (Suite, Plan):
        assert set(typing.get_args(model.model_fields["environment"].annotation)) == set(ENVIRONMENTS), model


def test_an_unknown_name_is_refused_naming_the_field_and_the_known_names():
    with pytest.raises(UnknownEnvironment) as err:
        environment_kind("gcp")
    e = err.value
    assert isinstance(e, SpecError) and e.field == "environment"
    assert "'gcp'" in str(e) and "local, aws, external" in str(e) and "field 'environment'" in str(e)


def test_a_run_context_with_an_unknown_environment_is_refused_by_the_registry(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"results_root": str(tmp_path), "environment": "gcp"})
    with pytest.raises(UnknownEnvironment, match="known: local, aws, external"):
        ctx.environment()


def test_default_versions_are_the_settings_models_and_external_chooses_none():
    assert Local.default_broker_versions() == LocalSettings().broker_versions
    assert Aws.default_broker_versions() == AwsSettings().broker_versions
    assert External.default_broker_versions() is None
    assert [k.name for k in ENVIRONMENTS.values() if k.brokers_on_this_machine] == ["local"]


def test_each_environment_says_its_lease_scope():
    assert Local.lease_scope({}, None) == (f"local@{socket.gethostname()}", 1)
    assert Aws.lease_scope({}, None) == ("aws", 1)
    assert Aws.lease_scope({"max_concurrent_runs": 3}, None) == ("aws", 3)
    assert Aws.lease_scope({"max_concurrent_runs": 0}, None) == ("aws", 1)
    with pytest.raises(FileNotFoundError, match="validate task has not run"):
        External.lease_scope({}, None)  # its scope names the plan's clusters


def test_the_command_lines_early_refusal_is_externals_only():
    """A variant that needs the broker restarted: the external environment refuses it before Airflow starts
    (without looking up a connection); local and aws leave their checks to the validate task."""
    plan = build_plan(load_suite("smoke"), {"brokers": ["rabbitmq"], "variants": ["fsync-on"]})
    plan.items[0].broker_settings = {"queue_type": "quorum"}
    Local.refuse_early(plan, {})
    Aws.refuse_early(plan, {})
    ext = plan.model_copy(update={"environment": "external"})
    with pytest.raises(SpecError, match="cannot apply") as err:
        External.refuse_early(ext, {})
    assert err.value.field == "variants.fsync-on.rabbitmq.broker.queue_type"


def _validated(tmp_path, monkeypatch) -> RunContext:
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path / "r")})
    setup.validate(ctx)
    return ctx


def test_validate_writes_the_local_checks_provenance_and_keeps_the_plan(tmp_path, monkeypatch):
    ctx = _validated(tmp_path, monkeypatch)
    assert set(ctx.read_json("provenance/brokers.json")) == {"rabbitmq"}
    assert ctx.plan().environment == "local"
    assert json.loads(ctx.plan_path.read_text())["environment"] == "local"


def test_run_context_parses_plan_json_once(tmp_path, monkeypatch):
    _validated(tmp_path, monkeypatch)
    parsed = []
    real = Plan.from_json

    def counting(text):
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(Plan, "from_json", counting)
    # a task's fresh context (as each Airflow task makes one) on the plan the validate task wrote
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path / "r")})
    assert ctx.environment_name() == "local"
    assert ctx.environment_kind() is Local
    assert ctx.plan().items and ctx.plan() is ctx.plan()
    assert ctx.environment_settings() == ctx.plan().environment_settings
    assert ctx.history_prefixes() == ["history/broker=rabbitmq/"]
    env = ctx.environment()
    assert environment_lease.lease_scope(ctx) == (f"local@{socket.gethostname()}", 1)
    assert isinstance(env, LocalEnvironment) and env.run_key == ctx.run_key
    assert len(parsed) == 1
    ctx.plan(reread=True)  # read the file again on request
    assert len(parsed) == 2


def test_a_context_made_before_validate_reads_the_plan_once_it_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    params = {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path / "r")}
    early = RunContext("brokerbench_smoke", "manual__1", "smoke", params)
    with pytest.raises(FileNotFoundError):
        early.plan()
    assert early.environment_settings() == {} and early.environment_kind() is Local  # from the suite
    setup.validate(RunContext("brokerbench_smoke", "manual__1", "smoke", params))
    assert [i.broker for i in early.plan().items][:1] == ["rabbitmq"]


def test_importing_the_registry_loads_no_environments_machinery():
    code = ("import sys, brokerbench.environments.registry\n"
            "print([m for m in ('boto3', 'botocore', 'paramiko', 'airflow', 'brokerbench.environments.aws.fleet',"
            " 'brokerbench.environments.local', 'brokerbench.environments.external') if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]", p.stdout + p.stderr


#: comparisons against an environment's name that are not a choice of environment, each with its reason
NOT_A_CHOICE = {
    # the endpoint's implementation: "external" is a cluster brokerbench did not deploy (the worker gets only
    # the endpoint, never the environment)
    ("brokerbench.worker.drivers.pulsar_client", "self.endpoint.implementation == 'external'"),
}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _name_comparisons(text: str) -> list[str]:
    """Every comparison of the source with an environment's name (``x == 'aws'``, ``x in ('local', ...)``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Compare):
            continue
        constants = []
        for side in (node.left, *node.comparators):
            constants += side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        if any(isinstance(c, ast.Constant) and c.value in ENVIRONMENTS for c in constants):
            found.append(ast.unparse(node))
    return found


def test_no_module_outside_the_environments_compares_an_environments_name():
    """The registry and the environment packages (whose settings have values such as deploy_mode 'local' and
    clients 'aws') are the only places a name is compared; everything else asks the registry."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if "_data" not in p.parts
             and not _module(p).startswith("brokerbench.environments")]
    files += sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "dags").rglob("*.py"))
    found = {(_module(p) if p.is_relative_to(PACKAGE) else str(p.relative_to(ROOT)), c)
             for p in files for c in _name_comparisons(p.read_text())}
    assert found - NOT_A_CHOICE == set(), "ask brokerbench.environments.registry.environment_kind instead"


def test_the_comparison_check_sees_a_comparison():
    text = ("def f(plan, name):\n    if plan.environment == 'aws' or name in ('local', 'x'):\n        return 1\n"
            "    return name != 'kafka'\n")
    assert _name_comparisons(text) == ["plan.environment == 'aws'", "name in ('local', 'x')"]
