"""The external environment without a cluster: connections read as Airflow reads them, secrets kept out of
records, validation refusals (variants that need the broker restarted, safety limits), the run's prefix and
which names teardown may delete, the lease per cluster."""

from __future__ import annotations

import json

import pytest

from brokerbench.environments.external import ExternalEnvironment, lease_scope
from brokerbench.environments.external.checks import check_plan
from brokerbench.environments.external.cluster import owned
from brokerbench.environments.external.connections import (
    ExternalConnectionError,
    cluster_for,
    read_connection,
    redact_uri,
    secret_environ,
)
from brokerbench.pipeline.benchmark import object_names
from brokerbench.spec import SpecError, build_plan, load_suite
from brokerbench.util import run_prefix
from brokerbench.worker.drivers.base import expand_secrets
from brokerbench.worker.drivers.kafka_python import security_kwargs
from brokerbench.worker.job import Job

KAFKA_SASL = {"conn_type": "kafka", "extra": {
    "bootstrap.servers": "b-1.example.kafka.eu-west-1.amazonaws.com:9096,b-2.example.kafka.eu-west-1.amazonaws.com:9096",
    "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
    "sasl.password": "s3cret", "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"}}
PULSAR = {"conn_type": "pulsar", "extra": {"service_url": "pulsar+ssl://pc.example.streamnative.cloud:6651",
                                           "admin_url": "https://pc.example.streamnative.cloud", "token": "eyJtok"}}
RABBIT = {"conn_type": "amqp", "host": "b-1234.mq.eu-west-1.amazonaws.com", "port": 5671, "login": "bench",
          "password": "p@ss/word", "schema": "perf"}


def define(monkeypatch, conn_id: str, conn) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", conn if isinstance(conn, str) else json.dumps(conn))


def test_a_kafka_connection_passes_its_security_settings_and_keeps_the_password_out_of_the_endpoint(monkeypatch):
    define(monkeypatch, "brokerbench_kafka", KAFKA_SASL)
    c = cluster_for("kafka")
    assert c.bootstrap_servers.startswith("b-1.example") and c.client_config["sasl.mechanism"] == "SCRAM-SHA-512"
    workers = c.client_config_for_workers()
    assert workers["sasl.password"] == "${env:BROKERBENCH_SECRET_BROKERBENCH_KAFKA_SASL_PASSWORD}"
    assert "s3cret" not in json.dumps(workers)
    env = secret_environ([c])
    assert env == {"BROKERBENCH_SECRET_BROKERBENCH_KAFKA_SASL_PASSWORD": "s3cret"}
    # the worker side: the reference expands from its environment, and kafka-python gets its own keywords
    monkeypatch.setenv("BROKERBENCH_SECRET_BROKERBENCH_KAFKA_SASL_PASSWORD", "s3cret")
    expanded = {k: expand_secrets(v) for k, v in workers.items()}
    assert security_kwargs(expanded) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                         "sasl_plain_username": "bench", "sasl_plain_password": "s3cret",
                                         "ssl_cafile": "/etc/ssl/certs/ca-certificates.crt"}
    # the lease and the records see the address, never the credentials
    assert c.address() == ("b-1.example.kafka.eu-west-1.amazonaws.com:9096,"
                           "b-2.example.kafka.eu-west-1.amazonaws.com:9096")


def test_a_missing_secret_is_named_by_the_worker(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_SECRET_X_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match="BROKERBENCH_SECRET_X_TOKEN"):
        expand_secrets("${env:BROKERBENCH_SECRET_X_TOKEN}")
    assert expand_secrets("${env:HOME}") == "${env:HOME}"  # only brokerbench's secrets are expanded


def test_kafka_host_login_and_password_stand_for_bootstrap_servers_and_sasl(monkeypatch):
    define(monkeypatch, "mine", {"conn_type": "kafka", "host": "k1,k2:9093", "port": 9092, "login": "u",
                                 "password": "p", "extra": {"security.protocol": "SASL_PLAINTEXT"}})
    c = cluster_for("kafka", {"kafka": "mine"})
    assert c.bootstrap_servers == "k1:9092,k2:9093"
    assert c.client_config == {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"}


@pytest.mark.parametrize("extra, words", [
    ({"bootstrap.servers": "k:9092", "acks": "all"}, "extra acks: not passed to the clients"),
    ({"bootstrap.servers": "k:9092", "security.protocol": "SASL_TLS"}, "security.protocol 'SASL_TLS'"),
    ({"bootstrap.servers": "k:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism 'GSSAPI'"),
    ({}, "needs extra.bootstrap.servers"),
])
def test_a_kafka_connection_that_cannot_work_is_refused_naming_the_connection(monkeypatch, extra, words):
    define(monkeypatch, "brokerbench_kafka", {"conn_type": "kafka", "extra": extra})
    with pytest.raises(ExternalConnectionError, match="connection 'brokerbench_kafka'") as e:
        cluster_for("kafka")
    assert words in str(e.value)


def test_an_undefined_connection_says_how_to_define_it(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    monkeypatch.setattr("brokerbench.environments.external.connections._from_airflow",
                        lambda conn_id: (_ for _ in ()).throw(ExternalConnectionError(
                            f"not defined; define it as AIRFLOW_CONN_{conn_id.upper()}", conn_id)))
    with pytest.raises(ExternalConnectionError, match="AIRFLOW_CONN_NOWHERE"):
        cluster_for("kafka", {"kafka": "nowhere"})


def test_pulsar_needs_its_admin_url_and_its_token_is_a_secret(monkeypatch):
    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    c = cluster_for("pulsar")
    assert (c.service_url, c.admin_url) == ("pulsar+ssl://pc.example.streamnative.cloud:6651",
                                            "https://pc.example.streamnative.cloud")
    assert c.client_config_for_workers()["token"] == "${env:BROKERBENCH_SECRET_BROKERBENCH_PULSAR_TOKEN}"
    define(monkeypatch, "brokerbench_pulsar", {"conn_type": "pulsar", "extra": {"service_url": "pulsar://p:6650"}})
    with pytest.raises(ExternalConnectionError, match="needs extra.admin_url"):
        cluster_for("pulsar")


def test_rabbitmq_from_fields_or_a_uri_with_the_password_as_a_reference(monkeypatch):
    define(monkeypatch, "brokerbench_rabbitmq", RABBIT)
    c = cluster_for("rabbitmq")
    assert c.amqp_uri == "amqp://bench:p%40ss%2Fword@b-1234.mq.eu-west-1.amazonaws.com:5671/perf"
    assert c.amqp_uri_for_workers() == ("amqp://bench:${env:BROKERBENCH_SECRET_BROKERBENCH_RABBITMQ_PASSWORD}"
                                        "@b-1234.mq.eu-west-1.amazonaws.com:5671/perf")
    assert secret_environ([c]) == {"BROKERBENCH_SECRET_BROKERBENCH_RABBITMQ_PASSWORD": "p%40ss%2Fword"}
    assert c.address() == "amqp://b-1234.mq.eu-west-1.amazonaws.com:5671/perf"
    assert redact_uri(c.amqp_uri) == "amqp://bench:***@b-1234.mq.eu-west-1.amazonaws.com:5671/perf"
    # Airflow's URI form of a connection is read too
    define(monkeypatch, "brokerbench_rabbitmq", "amqp://guest:guest@127.0.0.1:5672")
    assert read_connection("brokerbench_rabbitmq")["login"] == "guest"
    assert cluster_for("rabbitmq").amqp_uri == "amqp://guest:guest@127.0.0.1:5672"


# -- validation --------------------------------------------------------------------------------------------------
def plan_for(monkeypatch, brokers, variants, **settings):
    define(monkeypatch, "brokerbench_kafka", KAFKA_SASL)
    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    define(monkeypatch, "brokerbench_rabbitmq", RABBIT)
    plan = build_plan(load_suite("smoke"), {"environment": "external", "brokers": brokers, "variants": variants})
    plan.environment_settings.update(settings)
    return plan


def test_a_variant_that_needs_the_broker_restarted_is_refused_naming_variant_setting_and_environment(monkeypatch):
    plan = plan_for(monkeypatch, ["pulsar"], ["fsync-on"])
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    assert e.value.field == "variants.fsync-on.pulsar.broker.journalSyncData"
    assert "variant 'fsync-on' needs the broker-side setting journalSyncData=True on pulsar" in str(e.value)
    assert "external environment cannot apply" in str(e.value)


def test_topic_level_variants_pass(monkeypatch):
    # kafka fsync-on is the topic config flush.messages=1; rabbitmq's is the queue type: both per topic / queue
    plan = plan_for(monkeypatch, ["kafka", "rabbitmq"], ["fsync-on", "fsync-off"])
    assert check_plan(plan) == {"kafka": "b-1.example.kafka.eu-west-1.amazonaws.com:9096,"
                                          "b-2.example.kafka.eu-west-1.amazonaws.com:9096",
                                "rabbitmq": "amqp://b-1234.mq.eu-west-1.amazonaws.com:5671/perf"}


@pytest.mark.parametrize("settings, field, words", [
    ({"max_rate_msg_s": 500}, "producerRate", "1000 msg/s is above the external environment's max_rate_msg_s "
                                              "(500 msg/s)"),
    ({"max_message_size_bytes": 64}, "messageSize", "messageSize 100 B is above the external environment's "
                                                    "max_message_size_bytes (64 B)"),
    ({"max_total_bytes": 1_000_000}, "producerRate", "above the external environment's max_total_bytes "
                                                     "(1,000,000 bytes)"),
    ({"max_duration_minutes": 1}, "testDurationMinutes", "add up to 1.2 min, above the external environment's "
                                                         "max_duration_minutes (1 min)"),
])
def test_a_workload_above_a_safety_limit_is_refused_naming_the_field_and_the_limit(monkeypatch, settings, field,
                                                                                    words):
    # smoke: 1,000 msg/s of 100 B for 0.5 min + 0.1 min warm-up, per variant: 2 variants = 1.2 min, 7.2 MB
    plan = plan_for(monkeypatch, ["kafka"], ["fsync-off", "fsync-on"], **settings)
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    assert e.value.field == field and words in str(e.value), str(e.value)


def test_an_unthrottled_workload_is_refused(monkeypatch):
    plan = plan_for(monkeypatch, ["kafka"], ["fsync-off"])
    for item in plan.items:
        item.workload.producer_rate = 0
    with pytest.raises(SpecError, match="producerRate 0 sends as fast as the clients can"):
        check_plan(plan)


def test_a_setting_brokerbench_does_not_know_is_refused_by_name(monkeypatch):
    plan = plan_for(monkeypatch, ["kafka"], ["fsync-off"], max_rate=10)
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    assert e.value.field == "environmentSettings.max_rate"
    plan = plan_for(monkeypatch, ["kafka"], ["fsync-off"], connections={"kakfa": "x"})
    with pytest.raises(SpecError, match="kakfa: not a broker"):
        check_plan(plan)


# -- the run's prefix and what teardown may delete ---------------------------------------------------------------------
def test_every_name_a_run_creates_carries_its_prefix_and_only_those_are_owned():
    prefix = run_prefix("brokerbench_smoke/manual__1")
    assert prefix.startswith("bb-") and len(prefix) == 11
    job = Job.parse({"worker": "w-0", "phase": "prepare", "broker": "rabbitmq", "topics": [f"{prefix}-w-fsync-off-0"],
                     "subscriptions": [f"{prefix}-sub-0"], "workload": {"partitionsPerTopic": 2}, "driver": {},
                     "endpoint": {}, "duration_s": 0})
    names = object_names(job)
    assert names == [f"{prefix}-w-fsync-off-0", f"{prefix}-w-fsync-off-0.{prefix}-sub-0.0",
                     f"{prefix}-w-fsync-off-0.{prefix}-sub-0.1"]
    assert object_names(job.with_(broker="kafka")) == [f"{prefix}-w-fsync-off-0", f"{prefix}-sub-0"]
    assert all(owned(n, prefix) for n in names)
    for foreign in ("orders", prefix, prefix + "f-x", "bb-other-topic", "__consumer_offsets", "x" + prefix + "-a"):
        assert not owned(foreign, prefix), foreign
    assert not owned("anything", "")


def test_the_pipeline_names_topics_and_subscriptions_with_the_run_prefix(tmp_path):
    from brokerbench.pipeline.benchmark import _names
    from brokerbench.pipeline.context import RunContext

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    plan = build_plan(load_suite("smoke"), {})
    topics, subs = _names(ctx, plan.items[0])
    assert all(owned(n, run_prefix(ctx.run_key)) for n in topics + subs), (topics, subs)


def test_the_lease_is_per_cluster_not_per_credentials(monkeypatch):
    define(monkeypatch, "a", {"conn_type": "kafka", "extra": {"bootstrap.servers": "k2:9092,k1:9092"}})
    define(monkeypatch, "b", {"conn_type": "kafka", "login": "other", "password": "x",
                              "extra": {"bootstrap.servers": "k1:9092,k2:9092", "security.protocol": "SASL_SSL"}})
    define(monkeypatch, "c", {"conn_type": "kafka", "extra": {"bootstrap.servers": "staging:9092"}})
    scope = {n: lease_scope({"connections": {"kafka": n}}, ["kafka"]) for n in "abc"}
    assert scope["a"] == scope["b"] == "external@kafka=k1:9092,k2:9092"
    assert scope["c"] == "external@kafka=staging:9092"


def test_a_teardown_before_provision_removes_nothing(tmp_path, monkeypatch):
    define(monkeypatch, "brokerbench_kafka", KAFKA_SASL)
    env = ExternalEnvironment("dag/run", {"state_dir": str(tmp_path / "state")}, brokers=["kafka"])
    record = env.teardown()
    assert record["clusters"] == {} and "provision never ran" in record["note"]


def test_deploy_refuses_broker_settings_naming_the_variant(tmp_path, monkeypatch):
    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    env = ExternalEnvironment("dag/run", {"state_dir": str(tmp_path / "state")}, brokers=["pulsar"])
    with pytest.raises(Exception, match="variant 'fsync-on' needs broker-side settings"):
        env.deploy("pulsar", {"journalSyncData": True}, "fsync-on", {})


def test_validate_refuses_before_writing_a_plan(monkeypatch, tmp_path):
    from brokerbench.pipeline import setup
    from brokerbench.pipeline.context import RunContext

    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    ctx = RunContext("brokerbench_smoke", "manual__x", "smoke",
                     {"results_root": str(tmp_path), "environment": "external", "brokers": ["pulsar"],
                      "variants": ["fsync-off"]})
    with pytest.raises(SpecError) as e:
        setup.validate(ctx)
    print(e.value)
    assert e.value.field == "variants.fsync-off.pulsar.broker.journalSyncData"
    assert not ctx.plan_path.exists()


def test_undeploy_of_a_broker_the_run_did_not_pick_needs_no_connection(tmp_path, monkeypatch):
    # the DAG's undeploy tasks run (all_done) for every broker of the suite, picked or not
    monkeypatch.delenv("AIRFLOW_CONN_BROKERBENCH_PULSAR", raising=False)
    env = ExternalEnvironment("dag/run", {"state_dir": str(tmp_path / "state")}, brokers=["kafka"])
    env.undeploy("pulsar")


# -- clients: aws (the aws environment's client half) -------------------------------------------------------------
AWS_CLIENTS = {"ami": "ami-12345678", "controller_cidr": "203.0.113.7/32",
               "instance_types": {"client": "c5.xlarge"}, "counts": {"client": 2}}


def test_aws_clients_settings_pass_with_the_aws_environments_names(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)
    plan = plan_for(monkeypatch, ["rabbitmq"], ["fsync-off"], clients="aws", aws=AWS_CLIENTS)
    assert check_plan(plan)["rabbitmq"] == "amqp://b-1234.mq.eu-west-1.amazonaws.com:5671/perf"
    env = ExternalEnvironment("d/r", plan.environment_settings, brokers=["rabbitmq"], plan=plan)
    fleet = env.client_fleet()
    assert env.aws_clients and fleet.counts() == {"client": 2} and fleet.brokers() == []
    assert fleet.state_dir == env.state_dir / "aws-clients"


@pytest.mark.parametrize("aws, field, words", [
    ({**AWS_CLIENTS, "ami": None}, "environmentSettings.aws.ami", "required"),
    ({**AWS_CLIENTS, "controller_cidr": "0.0.0.0/0"}, "environmentSettings.aws.controller_cidr", "whole internet"),
    ({**AWS_CLIENTS, "counts": {"client": 0}}, "environmentSettings.aws.counts.client", "between 1 and 30"),
    ({**AWS_CLIENTS, "instance_types": {"client": "x9.huge"}}, "environmentSettings.aws.instance_types.client",
     "no hourly price known for 'x9.huge'"),
    ({**AWS_CLIENTS, "cost_cap_usd": 0.0001}, "environmentSettings.aws.cost_cap_usd", "above the cost cap"),
    ({**AWS_CLIENTS, "address": "elastic"}, "environmentSettings.aws.address", "'private' or 'public'"),
])
def test_aws_clients_settings_refused_naming_the_field(monkeypatch, aws, field, words):
    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)
    plan = plan_for(monkeypatch, ["rabbitmq"], ["fsync-off"], clients="aws", aws=aws)
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    assert e.value.field == field and words in str(e.value), (e.value.field, str(e.value))


def test_an_unknown_clients_value_is_refused_naming_the_setting(monkeypatch):
    plan = plan_for(monkeypatch, ["rabbitmq"], ["fsync-off"], clients="gcp")
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    assert e.value.field == "environmentSettings.clients" and "'local' or 'aws'" in str(e.value)


# -- the version of an external cluster: asked of it, or stated by the connection -----------------------------------
def test_the_connection_may_state_the_version_of_any_broker(monkeypatch):
    define(monkeypatch, "brokerbench_kafka", {**KAFKA_SASL, "extra": {**KAFKA_SASL["extra"], "broker_version": "4.1.1"}})
    define(monkeypatch, "brokerbench_rabbitmq", {**RABBIT, "extra": {"broker_version": "3.13.7"}})
    assert cluster_for("kafka").broker_version == "4.1.1"  # a Kafka extra key that is not passed to the clients
    assert "broker_version" not in cluster_for("kafka").client_config
    assert cluster_for("rabbitmq").broker_version == "3.13.7"
    define(monkeypatch, "brokerbench_pulsar", {**PULSAR, "extra": {**PULSAR["extra"], "broker_version": "4 0 7"}})
    with pytest.raises(ExternalConnectionError, match="extra.broker_version must be a version without spaces"):
        cluster_for("pulsar")
    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    assert cluster_for("pulsar").broker_version is None


def test_the_recorded_version_is_the_clusters_answer_refined_or_replaced_by_the_connections(monkeypatch):
    from brokerbench.environments.external.cluster import cluster_version

    define(monkeypatch, "brokerbench_kafka", KAFKA_SASL)
    define(monkeypatch, "brokerbench_pulsar", PULSAR)
    kafka, pulsar = cluster_for("kafka"), cluster_for("pulsar")
    said = {"version": "4.1", "version_source": "Kafka's ApiVersions answer"}
    assert cluster_version(kafka, said) == ("4.1", "Kafka's ApiVersions answer")
    kafka.broker_version = "4.1.1"  # the connection names the release of the line the cluster answered
    version, how = cluster_version(kafka, said)
    assert version == "4.1.1" and "extra.broker_version" in how and "release line 4.1" in how
    kafka.broker_version = "3.9.1"  # a connection that contradicts the cluster: the cluster's answer wins
    version, how = cluster_version(kafka, said)
    assert version == "4.1" and "states '3.9.1'" in how
    assert cluster_version(pulsar, {"version": "4.0.7", "version_source": "admin API"}) == ("4.0.7", "admin API")
    pulsar.broker_version = "4.0.6"  # Pulsar tells its release: never replaced by a statement
    assert cluster_version(pulsar, {"version": "4.0.7", "version_source": "admin API"})[0] == "4.0.7"
    # the cluster could not be asked: the connection's version, else unknown, each saying why
    version, how = cluster_version(pulsar, {"version": None, "version_error": "HTTP 403"})
    assert version == "4.0.6" and "could not be asked (HTTP 403)" in how
    pulsar.broker_version = None
    version, how = cluster_version(pulsar, {"error": "EnvironmentFailure: refused"})
    assert version == "unknown" and "refused" in how and "extra.broker_version" in how


def test_kafkas_release_line_comes_from_the_api_versions_a_broker_answers():
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    from brokerbench.environments.external.cluster import kafka_python_security, kafka_release

    assert kafka_release((4, 1), dict(BROKER_API_VERSIONS[(4, 1)])) == "4.1"
    assert kafka_release((3, 9), dict(BROKER_API_VERSIONS[(3, 9)])) == "3.9"
    newer = {**BROKER_API_VERSIONS[(4, 1)], 0: (0, 99)}  # more than 4.1 supports: a newer release, or a vendor's
    assert kafka_release((4, 1), newer) == "4.1+"
    # the admin side logs in with the same kafka-python keywords as the workers
    config = {**KAFKA_SASL["extra"], "ssl.endpoint.identification.algorithm": "none"}
    assert kafka_python_security(config) == security_kwargs(config)


def test_deploy_records_the_connections_version_when_the_cluster_cannot_be_asked(tmp_path, monkeypatch):
    from brokerbench.environments.external import cluster as admin

    define(monkeypatch, "brokerbench_pulsar", {**PULSAR, "extra": {**PULSAR["extra"], "broker_version": "4.0.7"}})
    monkeypatch.setattr(admin, "objects", lambda c: {"topics": [], "partitioned_topics": []})

    def refused(c):
        raise admin.EnvironmentFailure("admin API GET .../brokers/version: HTTP 401 Unauthorized", "pulsar")

    monkeypatch.setattr(admin, "describe", refused)
    env = ExternalEnvironment("dag/run", {"state_dir": str(tmp_path / "state")}, brokers=["pulsar"])
    ep = env.deploy("pulsar", {}, "as-configured", {})
    assert ep.version == "4.0.7" and ep.implementation == "external"
    assert "brokerbench_pulsar" in ep.version_source and "HTTP 401" in ep.version_source
    assert ep.to_dict()["version_source"] == ep.version_source  # the deploy record (provenance) carries it
