"""The aws environment's settings are checked before any machine exists
(aws.check_settings / check_plan, called by the validate task and again by
provision): every refusal names the setting and where it came from. No EC2,
no moto: these run before the fleet."""

from __future__ import annotations

import json

import pytest

from brokerbench.environments.aws import fleet as aws_fleet
from brokerbench.environments.aws.settings_check import AwsSettingsError, check_plan, check_settings
from brokerbench.environments.base import EnvironmentFailure
from brokerbench.spec import SpecError, build_plan, load_suite

BASE = {"ami": "ami-12345678", "controller_cidr": "203.0.113.7/32",
        "instance_types": {"broker": "t3.micro", "metadata": "t3.micro", "client": "t3.micro"},
        "counts": {"broker": 1, "client": 1}, "cost_cap_usd": 5.0}


@pytest.fixture(autouse=True)
def no_site_settings(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)


def refused(settings: dict, brokers=("kafka",), params=None) -> AwsSettingsError:
    with pytest.raises(AwsSettingsError) as err:
        check_settings({**BASE, **settings}, list(brokers), params=params, merged=False)
    return err.value


def test_good_settings_pass_and_return_the_cost():
    cost = check_settings(dict(BASE), ["kafka"], merged=False)
    assert cost["roles"]["broker"]["count"] == 1 and "refused" not in cost


def test_the_error_is_a_spec_error_and_an_environment_error_naming_the_field():
    e = refused({"tuning_profile": "x"})
    assert isinstance(e, SpecError) and isinstance(e, EnvironmentFailure) and e.file is None
    assert e.field == "params.tuning_profile"
    assert str(e) == ("field 'params.tuning_profile': unknown profile 'x'; known: default, seed-000, seed-001, "
                      "seed-004 (include/infra/aws/profiles.yaml)")


def test_unknown_tuning_profile():
    assert "unknown profile 'seed-999'" in str(refused({"tuning_profile": "seed-999"}))


@pytest.mark.parametrize("counts, field, text", [
    ({"broker": 0, "client": 1}, "params.instance_counts.broker", "at least 1 broker instance"),
    ({"broker": 1, "client": 0}, "params.instance_counts.client", "at least 1 client instance"),
    ({"broker": 1000, "client": 1}, "params.instance_counts.broker", "between 0 and 30"),
    ({"broker": -1, "client": 1}, "params.instance_counts.broker", "between 0 and 30"),
    ({"broker": 1.5, "client": 1}, "params.instance_counts.broker", "whole number"),
    ({"broker": True, "client": 1}, "params.instance_counts.broker", "whole number"),
    ({"zookeeper": 3}, "params.instance_counts.zookeeper", "unknown role 'zookeeper'"),
])
def test_instance_counts(counts, field, text):
    e = refused({"instance_counts": counts})
    assert e.field == field and text in str(e)


def test_the_trigger_form_and_the_settings_check_share_one_instance_bound():
    """spec/bounds.py's MAX_INSTANCES_PER_ROLE: the form offers up to it, the check accepts it and refuses one more."""
    from brokerbench.spec import bounds
    from brokerbench.spec.params import PARAMS

    n = int(bounds.MAX_INSTANCES_PER_ROLE.value)
    form = next(p for p in PARAMS if p.name == "instance_counts").schema
    assert isinstance(form, dict) and {form["properties"][r]["maximum"] for r in ("broker", "metadata", "client")} == {n}
    check_settings({**BASE, "cost_cap_usd": 100_000, "instance_counts": {"broker": n, "client": 1}}, ["rabbitmq"],
                   merged=False)
    e = refused({"cost_cap_usd": 100_000, "instance_counts": {"broker": n + 1, "client": 1}}, brokers=["rabbitmq"])
    assert e.field == "params.instance_counts.broker" and f"between 0 and {n}" in str(e)


def test_a_count_from_the_suite_names_the_suites_setting():
    e = refused({"counts": {"broker": 0, "client": 1}}, params={})
    assert e.field == "environmentSettings.counts.broker"


def test_metadata_hosts_are_required_where_the_brokers_need_them():
    e = refused({"instance_counts": {"metadata": 0}}, brokers=["pulsar"])
    assert e.field == "params.instance_counts.metadata" and "pulsar" in str(e)
    e = refused({"kafka_mode": "zookeeper", "instance_counts": {"metadata": 0}}, brokers=["kafka"])
    assert "ZooKeeper mode" in str(e)
    # KRaft Kafka and RabbitMQ need none; nor the local deploy mode
    check_settings({**BASE, "instance_counts": {"metadata": 0}}, ["kafka", "rabbitmq"], merged=False)
    check_settings({**BASE, "instance_counts": {"metadata": 0}, "deploy_mode": "local"}, ["pulsar"],
                   merged=False)


def test_broker_versions_must_be_release_numbers_when_installed():
    e = refused({"broker_versions": {"kafka": "latest; rm -rf /"}})
    assert e.field == "params.broker_versions.kafka"
    assert "kafka version 'latest; rm -rf /' is not a release number" in str(e)
    e = refused({"broker_versions": {"rabbitmq": "newest"}}, brokers=("rabbitmq",))
    assert e.field == "params.broker_versions.rabbitmq" and "'package'" in str(e)
    # any release is deployable (Maven Central is asked at deploy time), RabbitMQ may be the hosts' package
    check_settings({**BASE, "broker_versions": {"kafka": "3.7.2", "rabbitmq": "package"}}, ["kafka", "rabbitmq"],
                   merged=False)
    # the local deploy mode runs the local environment's brokers: any version string
    check_settings({**BASE, "broker_versions": {"kafka": "9.9.9"}, "deploy_mode": "local"}, ["kafka"],
                   merged=False)


def test_kafka_mode_must_exist_for_the_version():
    e = refused({"broker_versions": {"kafka": "4.1.0"}, "kafka_mode": "zookeeper",
                 "instance_counts": {"metadata": 1}})
    assert e.field == "environmentSettings.kafka_mode" and "no ZooKeeper mode" in str(e)
    assert refused({"kafka_mode": "raft"}).field == "environmentSettings.kafka_mode"


def test_instance_types_must_have_a_price():
    e = refused({"instance_types": {"broker": "x9.huge"}})
    assert e.field == "params.instance_types.broker"
    assert "no hourly price known for 'x9.huge'" in str(e) and "prices_usd_per_hour" in str(e)
    check_settings({**BASE, "instance_types": {"broker": "x9.huge"}, "prices_usd_per_hour": {"x9.huge": 2.5}},
                   ["kafka"], merged=False)
    assert refused({"instance_types": {"zookeeper": "t3.micro"}}).field == "params.instance_types.zookeeper"
    assert refused({"prices_usd_per_hour": {"x9.huge": -1}}).field == "environmentSettings.prices_usd_per_hour"


def test_cost_cap_is_compared_exactly_and_printed_with_enough_digits():
    # 2 x $0.00645/h for the 1 h expected without a plan = $0.0129, above a cap of $0.01
    cheap = {"instance_types": {"broker": "bb.tiny", "client": "bb.tiny"},
             "prices_usd_per_hour": {"bb.tiny": 0.00645}}
    e = refused({**cheap, "cost_cap_usd": 0.01})
    assert e.field == "params.cost_cap_usd"
    assert "$0.0129" in str(e) and "cap $0.0100" in str(e)
    check_settings({**BASE, **cheap, "cost_cap_usd": 0.013}, ["kafka"], merged=False)
    assert refused({"cost_cap_usd": 0}).field == "params.cost_cap_usd"
    assert refused({"cost_cap_usd": "lots"}).field == "params.cost_cap_usd"


def test_money_figures_tell_estimate_and_cap_apart():
    assert aws_fleet.money_pair(0.0129, 0.01) == ("$0.0129", "$0.0100")
    assert aws_fleet.money_pair(25.004, 25.0) == ("$25.004", "$25.000")
    assert aws_fleet.money_pair(12.58, 25.0) == ("$12.58", "$25.00")
    est = aws_fleet.estimate_cost({"broker": "bb"}, {"broker": 1}, 60.0, 0.01, 2.0, {"bb": 0.0100001})
    # a thousandth of a cent over is over, and the message shows it
    assert "expected cost $0.0100001" in est["refused"] and "cost cap $0.0100000" in est["refused"]


def test_lifetime_shorter_than_the_run_is_refused():
    e = refused({"max_lifetime_hours": 0.5})
    assert e.field == "environmentSettings.max_lifetime_hours" and "maximum lifetime" in str(e)


@pytest.mark.parametrize("settings, field, text", [
    ({"ami": None}, "environmentSettings.ami", "required"),
    ({"controller_cidr": ""}, "environmentSettings.controller_cidr", "required"),
    ({"controller_cidr": "my laptop"}, "environmentSettings.controller_cidr", "not an address"),
    ({"controller_cidr": "0.0.0.0/0"}, "environmentSettings.controller_cidr", "whole internet"),
    ({"deploy_mode": "docker"}, "environmentSettings.deploy_mode", "'install' or 'local' (got 'docker')"),
    ({"address": "elastic"}, "environmentSettings.address", "'private' or 'public'"),
    ({"worker_pip_args": "--pre"}, "environmentSettings.worker_pip_args", "valid list"),
    ({"worker_pip_args": ["--pre", 3]}, "environmentSettings.worker_pip_args.1", "valid string"),
    ({"broker_versions": "3.9.1"}, "params.broker_versions", "valid dictionary"),
])
def test_other_settings(settings, field, text):
    e = refused(settings)
    assert e.field == field and text in str(e)


def test_site_settings_are_named_as_such(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_AWS_SETTINGS", json.dumps({"tuning_profile": "site-tuning"}))
    e = refused({"tuning_profile": "seed-000"})
    assert e.field == "BROKERBENCH_AWS_SETTINGS.tuning_profile"


def aws_plan(**env_params):
    """A plan of the shipped aws suite with params merged in as the validate task does."""
    plan = build_plan(load_suite("aws-seed-latency"), {})
    for key, value in env_params.items():
        old = plan.environment_settings.get(key)
        plan.environment_settings[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) \
            else value
    return plan


def test_the_shipped_aws_suite_passes_once_the_account_settings_are_given():
    plan = aws_plan(ami="ami-12345678", controller_cidr="203.0.113.7/32")
    cost = check_plan(plan, {})
    assert 10 < cost["expected_usd"] < 25 and cost["roles"]["metadata"]["count"] == 3
    # without them: refused at validation, naming the setting
    with pytest.raises(AwsSettingsError, match="field 'environmentSettings.ami'"):
        check_plan(aws_plan(), {})


def test_check_plan_names_the_param_that_gave_the_value():
    params = {"tuning_profile": "x", "instance_counts": {"broker": 0}}
    plan = aws_plan(ami="ami-1", controller_cidr="10.0.0.1/32", **params)
    with pytest.raises(AwsSettingsError) as err:
        check_plan(plan, params)
    assert err.value.field == "params.tuning_profile"
    plan = aws_plan(ami="ami-1", controller_cidr="10.0.0.1/32", instance_counts={"broker": 0})
    with pytest.raises(AwsSettingsError) as err:
        check_plan(plan, {"instance_counts": {"broker": 0}})
    assert str(err.value) == "field 'params.instance_counts.broker': at least 1 broker instance is needed (got 0)"
    # the suite's own value, no param: the suite's setting is named
    plan = aws_plan(ami="ami-1", controller_cidr="10.0.0.1/32", tuning_profile="nope")
    with pytest.raises(AwsSettingsError) as err:
        check_plan(plan, {})
    assert err.value.field == "environmentSettings.tuning_profile"
    # a cap too low for the suite
    plan = aws_plan(ami="ami-1", controller_cidr="10.0.0.1/32", cost_cap_usd=1)
    with pytest.raises(AwsSettingsError, match=r"above the cost cap \$1\.00"):
        check_plan(plan, {"cost_cap_usd": 1})


def test_an_ab_run_whose_side_b_needs_zookeeper_gets_metadata_hosts_for_it():
    """Side A on Kafka 4.1.1 (KRaft), side B on 3.2.3 (ZooKeeper mode, by version): the fleet has ZooKeeper hosts
    for side B, in the cost and in the environment's counts; none is refused before any instance, naming side
    B's release. Without side B, KRaft Kafka needs none."""
    from brokerbench.environments.aws.environment import AwsEnvironment

    def plan_with(side_b: dict, **env_params):
        plan = build_plan(load_suite("aws-seed-latency"), {"brokers": ["kafka"], "variants": ["fsync-off"], **side_b})
        plan.environment_settings.update(ami="ami-1", controller_cidr="10.0.0.1/32", kafka_mode=None, cost_cap_usd=100,
                                         broker_versions={"kafka": "4.1.1"}, **env_params)
        return plan

    plain = plan_with({})
    assert check_plan(plain, {})["roles"].get("metadata", {}).get("count", 0) == 0
    assert AwsEnvironment("r", plain.environment_settings, plain).counts()["metadata"] == 0
    ab = plan_with({"compare_with": {"broker_versions": {"kafka": "3.2.3"}}})
    assert check_plan(ab, {})["roles"]["metadata"]["count"] == 3
    assert AwsEnvironment("r", ab.environment_settings, ab).counts()["metadata"] == 3
    none = plan_with({"compare_with": {"broker_versions": {"kafka": "3.2.3"}}}, instance_counts={"metadata": 0})
    with pytest.raises(AwsSettingsError) as err:
        check_plan(none, {"instance_counts": {"metadata": 0}})
    assert str(err.value) == ("field 'params.instance_counts.metadata': at least 1 metadata (ZooKeeper) instance "
                              "is needed for kafka 3.2.3 (side B) in ZooKeeper mode (got 0)")


def test_provision_refuses_before_any_ec2_call(tmp_path, monkeypatch):
    from brokerbench.environments.aws.environment import AwsEnvironment

    def no_ec2(*a, **kw):
        raise AssertionError("EC2 was called")

    monkeypatch.setattr(aws_fleet.Fleet, "__init__", no_ec2)
    env = AwsEnvironment("t/unit-refused", {**BASE, "state_dir": str(tmp_path), "instance_counts": {"broker": 0}})
    with pytest.raises(AwsSettingsError, match="at least 1 broker instance"):
        env.provision()


@pytest.mark.parametrize("params, field", [
    ({"tuning_profile": "no-such-profile"}, "params.tuning_profile"),
    ({"instance_counts": {"broker": 0}}, "params.instance_counts.broker"),
    ({"cpu_pinning": {"broker": "0"}}, "params.cpu_pinning"),
])
def test_the_validate_task_refuses_bad_aws_params_before_any_machine(tmp_path, monkeypatch, params, field):
    """setup.validate (the DAG's first task) applies the checks: no plan.json, nothing provisioned."""
    from brokerbench.pipeline import setup
    from brokerbench.pipeline.context import RunContext

    monkeypatch.setenv("BROKERBENCH_AWS_SETTINGS", json.dumps({"ami": BASE["ami"],
                                                               "controller_cidr": BASE["controller_cidr"]}))
    ctx = RunContext(dag_id="brokerbench_aws_seed_latency", run_id="manual__1", suite="aws-seed-latency",
                              params={"results_root": str(tmp_path), **params})
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        setup.validate(ctx)
    assert not ctx.plan_path.exists()


@pytest.mark.parametrize("setting, value", [("ssh_timeout_s", "soon"), ("ssh_port", "twenty-two"),
                                            ("host_changes", "perhaps"), ("state_dir", 7)])
def test_every_setting_has_its_type_checked_before_any_machine_and_the_environment_holds_the_model(
        tmp_path, setting, value):
    """The validate task checks every setting's type as AwsSettings declares it, the model the environment
    object validates when it is made (and reads as attributes): what passes the one, the other takes."""
    from brokerbench.environments.aws.environment import AwsEnvironment
    from brokerbench.environments.settings import AwsSettings

    e = refused({setting: value})
    assert e.field == f"environmentSettings.{setting}"
    with pytest.raises(AwsSettingsError) as made:
        AwsEnvironment("t/typed", {**BASE, setting: value})
    assert made.value.field == f"environmentSettings.{setting}"
    env = AwsEnvironment("t/typed", {**BASE, "state_dir": str(tmp_path), "ssh_port": "2222",
                                     "instance_counts": {"broker": "2"}})
    assert isinstance(env.settings, AwsSettings)
    assert env.settings.ssh_port == 2222 and env.settings.instance_counts == {"broker": 2}
    assert env.settings.region_name is None and env.settings.cost_cap_usd == 5.0  # defaults < given
    # no plan: every broker, Pulsar among them, so the metadata hosts by default
    assert env.state_dir == tmp_path.resolve() and env.counts() == {"broker": 2, "metadata": 3, "client": 1}
