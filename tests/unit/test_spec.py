"""The spec layer: shipped files load, OMB compatibility, every error names file and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from brokerbench.spec import (
    SPEC_ROOT,
    DriverSpec,
    Plan,
    SpecError,
    Workload,
    apply_variant,
    build_plan,
    list_drivers,
    list_suites,
    list_variants,
    list_workloads,
    load_driver,
    load_suite,
    load_variant,
    load_workload,
)

KAFKA_CLASS = "io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver"
PULSAR_CLASS = "io.openmessaging.benchmark.driver.pulsar.PulsarBenchmarkDriver"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def workload_yaml(**changes) -> str:
    data = {"name": "t", "topics": 1, "partitionsPerTopic": 1, "messageSize": 100,
            "producerRate": 100, "testDurationMinutes": 1}
    data.update(changes)
    return yaml.safe_dump(data)


# --- shipped files -------------------------------------------------------------------------------

def test_spec_root_is_the_include_directory():
    assert SPEC_ROOT.name == "include"
    assert (SPEC_ROOT / "brokerbench" / "spec").is_dir()


def test_lists_name_the_shipped_files():
    assert {"smoke-1-topic-1-partition-100b", "latency-1-topic-1-partition-100b",
            "latency-1-topic-6-partitions-100b", "latency-1-topic-16-partitions-100b",
            "latency-1-topic-100-partitions-1kb-200k", "latency-1-topic-24-partitions-1kb-30k",
            "throughput-1-topic-100-partitions-1kb-max", "catchup-1-topic-100-partitions-1kb-200k",
            "ingest-1-topic-1-partition-220b-max"} <= set(list_workloads())
    assert list_drivers() == ["kafka-latency", "kafka-replicated", "kafka-replicated-throughput", "kafka-throughput",
                              "pulsar-default", "pulsar-replicated", "pulsar-replicated-throughput",
                              "pulsar-throughput", "rabbitmq-default", "rabbitmq-quorum"]
    assert list_variants() == ["as-configured", "fsync-off", "fsync-on"]
    assert {"smoke", "nightly-latency", "aws-seed-latency", "throughput-sweep", "aws-seed-throughput"} <= \
        set(list_suites())
    assert list_workloads() == sorted(list_workloads())


@pytest.mark.parametrize("name", list_workloads())
def test_every_shipped_workload_loads_and_cites_its_source(name):
    workload = load_workload(name)
    assert workload.id == name
    assert workload.name
    first_line = (SPEC_ROOT / "workloads" / f"{name}.yaml").read_text().splitlines()[0]
    assert first_line.startswith("#"), "each workload starts with a comment citing its source"


@pytest.mark.parametrize("name", list_drivers())
def test_every_shipped_driver_loads_with_its_broker(name):
    driver = load_driver(name)
    assert driver.name == name
    assert name.startswith(driver.broker)


@pytest.mark.parametrize("name", list_suites())
def test_every_shipped_suite_loads_and_plans(name):
    suite = load_suite(name)
    plan = build_plan(suite)
    assert suite.dag_id == f"brokerbench_{name}"
    assert len(plan.items) == len(suite.workloads) * len(suite.brokers) * len(suite.variants)


def test_reference_workloads_match_the_seeds():
    kesque = load_workload("latency-1-topic-16-partitions-100b")
    assert (kesque.message_size, kesque.partitions_per_topic, kesque.producer_rate,
            kesque.test_duration_minutes, kesque.warmup_duration_minutes) == (100, 16, 50000, 15, 1)
    confluent = load_workload("latency-1-topic-100-partitions-1kb-200k")
    assert (confluent.message_size, confluent.partitions_per_topic, confluent.producers_per_topic,
            confluent.consumer_per_subscription, confluent.producer_rate) == (1024, 100, 4, 4, 200000)
    assert load_workload("throughput-1-topic-100-partitions-1kb-max").producer_rate == 0
    assert load_workload("catchup-1-topic-100-partitions-1kb-200k").consumer_backlog_size_gb > 0
    hpi = load_workload("ingest-1-topic-1-partition-220b-max")
    assert (hpi.partitions_per_topic, hpi.subscriptions_per_topic, hpi.producer_rate) == (1, 0, 0)


def test_smoke_workload_is_as_documented():
    w = load_workload("smoke-1-topic-1-partition-100b")
    assert (w.topics, w.partitions_per_topic, w.message_size, w.producers_per_topic,
            w.subscriptions_per_topic, w.consumer_per_subscription) == (1, 1, 100, 1, 1, 1)
    assert (w.producer_rate, w.test_duration_minutes, w.warmup_duration_minutes) == (1000, 0.5, 0.1)


# --- workloads -----------------------------------------------------------------------------------

def test_workload_round_trips_to_omb_format():
    path = SPEC_ROOT / "workloads" / "latency-1-topic-100-partitions-1kb-200k.yaml"
    original = yaml.safe_load(path.read_text())
    omb = load_workload(path).to_omb_dict()
    assert {k: omb[k] for k in original} == original
    assert "id" not in omb and "payload_path" not in omb


def test_upstream_omb_workload_with_unknown_keys_loads(tmp_path):
    path = write(tmp_path / "1-topic-16-partitions-1kb.yaml", """\
        name: 1 producer / 1 consumers on 1 topic
        topics: 1
        partitionsPerTopic: 16
        messageSize: 1024
        subscriptionsPerTopic: 1
        consumerPerSubscription: 1
        producersPerTopic: 2
        producerRate: 50000
        consumerBacklogSizeGB: 0
        testDurationMinutes: 15
        somethingNewUpstream: true
        """)
    w = load_workload(path)
    assert w.id == "1-topic-16-partitions-1kb"
    assert w.producers_per_topic == 2 and w.warmup_duration_minutes == 1
    assert "somethingNewUpstream" not in w.to_omb_dict()


def test_workload_accepts_fractional_minutes_and_snake_case_names():
    w = Workload(name="n", topics=1, partitions_per_topic=2, message_size=64, producer_rate=1,
                 test_duration_minutes=0.5, warmup_duration_minutes=0.25)
    assert w.partitions_per_topic == 2 and w.test_duration_minutes == 0.5
    assert w.id == "n"


@pytest.mark.parametrize("changes, field, text", [
    ({"producerRate": -1}, "producerRate", "must be >= 0"),
    ({"partitionsPerTopic": 0}, "partitionsPerTopic", "must be >= 1 (got 0)"),
    ({"messageSize": 4}, "messageSize", "8-byte send timestamp"),
    ({"keyDistributor": "RANDOM"}, "keyDistributor", "must be one of"),
    ({"testDurationMinutes": 0}, "testDurationMinutes", "must be > 0"),
    ({"useRandomizedPayloads": True}, "randomBytesRatio", "required when useRandomizedPayloads"),
    ({"producersPerTopic": 0, "subscriptionsPerTopic": 0}, "producersPerTopic", "needs producers or consumers"),
])
def test_bad_workload_names_file_and_field(tmp_path, changes, field, text):
    path = write(tmp_path / "bad.yaml", workload_yaml(**changes))
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert text in str(err.value)
    assert str(err.value).startswith(f"{path}: field '{field}': ")


def test_payload_file_is_resolved_in_a_payload_directory_the_settings_allow(tmp_path, monkeypatch):
    payloads = tmp_path / "payloads"
    payloads.mkdir()
    (payloads / "payload-100b.data").write_bytes(b"x" * 100)
    monkeypatch.setenv("BROKERBENCH_PAYLOAD_DIRS", str(payloads))
    w = load_workload(write(tmp_path / "w.yaml", workload_yaml(payloadFile="payload-100b.data")))
    assert w.payload_path == str((payloads / "payload-100b.data").resolve())
    assert w.to_omb_dict()["payloadFile"] == "payload-100b.data"


def test_payload_file_next_to_the_workload_is_not_looked_at(tmp_path):
    (tmp_path / "mine.data").write_bytes(b"x" * 100)
    path = write(tmp_path / "w.yaml", workload_yaml(payloadFile="mine.data"))
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert (err.value.file, err.value.field) == (str(path), "payloadFile")
    assert "not found" in str(err.value) and "payload files come from" in str(err.value)


def test_payload_file_of_wrong_size_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "payload.data").write_bytes(b"x" * 99)
    monkeypatch.setenv("BROKERBENCH_PAYLOAD_DIRS", str(tmp_path))
    path = write(tmp_path / "w.yaml", workload_yaml(payloadFile="payload.data"))
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert (err.value.file, err.value.field) == (str(path), "payloadFile")
    assert "holds 99 bytes but messageSize is 100" in str(err.value)


def test_missing_payload_file_is_an_error(tmp_path):
    path = write(tmp_path / "w.yaml", workload_yaml(payloadFile="nowhere.data"))
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert (err.value.file, err.value.field) == (str(path), "payloadFile")
    assert "not found" in str(err.value)


def test_missing_workload_file():
    with pytest.raises(SpecError) as err:
        load_workload("no-such-workload")
    assert err.value.file == str(SPEC_ROOT / "workloads" / "no-such-workload.yaml")
    assert err.value.field is None
    assert str(err.value) == "include/workloads/no-such-workload.yaml: file not found"


@pytest.mark.parametrize("text, message", [
    ("name: [unclosed\n", "invalid YAML at line 2"),
    ("", "file is empty"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_unusable_yaml_names_the_file(tmp_path, text, message):
    path = write(tmp_path / "w.yaml", text)
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert err.value.file == str(path) and err.value.field is None
    assert message in str(err.value)


# --- drivers -------------------------------------------------------------------------------------

def test_kafka_properties_text_is_parsed_and_written_back():
    driver = load_driver("kafka-replicated")
    assert driver.broker == "kafka" and driver.replication_factor == 3
    assert driver.producer_config == {"acks": "all", "linger.ms": "1", "batch.size": "1048576"}
    assert driver.topic_config == {"min.insync.replicas": "2"}
    omb = driver.to_omb_dict()
    assert omb["producerConfig"] == "acks=all\nlinger.ms=1\nbatch.size=1048576\n"
    assert "broker" not in omb and "client" not in omb
    assert DriverSpec.model_validate(driver.to_mapping()) == driver


def test_kafka_config_may_be_a_mapping(tmp_path):
    path = write(tmp_path / "k.yaml", f"""\
        name: k
        driverClass: {KAFKA_CLASS}
        producerConfig: {{acks: all, enable.idempotence: true, linger.ms: 5}}
        """)
    driver = load_driver(path)
    assert driver.producer_config == {"acks": "all", "enable.idempotence": "true", "linger.ms": "5"}
    assert driver.replication_factor == 1


def test_pulsar_defaults_follow_omb():
    driver = DriverSpec.model_validate({"name": "p", "driverClass": PULSAR_CLASS})
    assert driver.broker == "pulsar"
    assert driver.client.io_threads == 8 and driver.client.persistence.ack_quorum == 2
    assert driver.producer.batching_enabled and driver.producer.batching_max_publish_delay_ms == 1
    assert driver.consumer.subscription_type == "Failover"
    assert load_driver("pulsar-replicated").client.persistence.model_dump() == {
        "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, "deduplication_enabled": False}


def test_rabbitmq_driver():
    driver = load_driver("rabbitmq-default")
    assert driver.broker == "rabbitmq"
    assert (driver.amqp_uris, driver.message_persistence, driver.queue_type) == (
        ["amqp://guest:guest@localhost:5672"], False, "CLASSIC")
    assert driver.to_omb_dict()["driverClass"].endswith("RabbitMqBenchmarkDriver")


def test_explicit_broker_key_for_a_custom_driver_class(tmp_path):
    path = write(tmp_path / "d.yaml", "name: d\ndriverClass: com.example.MyDriver\nbroker: rabbitmq\n")
    driver = load_driver(path)
    assert driver.broker == "rabbitmq"
    assert driver.to_omb_dict()["broker"] == "rabbitmq"


@pytest.mark.parametrize("text, field, message", [
    ("name: d\ndriverClass: org.apache.activemq.ActiveMqDriver\n", "driverClass",
     "supported brokers: kafka, pulsar, rabbitmq"),
    (f"name: d\ndriverClass: {KAFKA_CLASS}\nbroker: activemq\n", "broker", "must be one of"),
    (f"name: d\ndriverClass: {KAFKA_CLASS}\nbroker: pulsar\n", "broker", "contradicts driverClass"),
    (f"name: d\ndriverClass: {KAFKA_CLASS}\nreplicationFactor: 1\ntopicConfig: 'min.insync.replicas=2'\n",
     "topicConfig", "min.insync.replicas=2 is more than replicationFactor=1"),
    (f"name: d\ndriverClass: {KAFKA_CLASS}\nreplicationFactor: 0\n", "replicationFactor", "must be >= 1"),
    (f"name: d\ndriverClass: {KAFKA_CLASS}\nclient: {{ioThreads: 1}}\n", "client", "is a pulsar setting"),
    (f"name: d\ndriverClass: {PULSAR_CLASS}\nclient: {{persistence: {{ensembleSize: 2, writeQuorum: 3}}}}\n",
     "client.persistence.writeQuorum", "must be <= ensembleSize (2)"),
    (f"name: d\ndriverClass: {PULSAR_CLASS}\nclient: {{persistence: {{ackQuorum: 4}}}}\n",
     "client.persistence.ackQuorum", "must be <= writeQuorum (3)"),
    ("name: d\ndriverClass: x.RabbitMqBenchmarkDriver\nqueueType: LAZY\n", "queueType", "must be one of"),
    ("name: d\ndriverClass: x.RabbitMqBenchmarkDriver\nexchangeType: headers\n", "exchangeType", "must be one of"),
    ("name: d\ndriverClass: x.RabbitMqBenchmarkDriver\namqpUris: [http://h]\n", "amqpUris", "amqp://"),
])
def test_bad_driver_names_file_and_field(tmp_path, text, field, message):
    path = write(tmp_path / "d.yaml", text)
    with pytest.raises(SpecError) as err:
        load_driver(path)
    assert (err.value.file, err.value.field) == (str(path), field)
    assert message in str(err.value)


# --- variants ------------------------------------------------------------------------------------

def test_variants_per_broker():
    on, off = load_variant("fsync-on"), load_variant("fsync-off")
    assert on.for_broker("pulsar").broker_settings == {"journalSyncData": True}
    assert off.for_broker("pulsar").broker_settings == {"journalSyncData": False}
    assert on.for_broker("rabbitmq").driver_overrides == {"queueType": "QUORUM", "messagePersistence": True}
    assert off.for_broker("kafka").driver_overrides == {} and off.for_broker("kafka").broker_settings == {}
    assert "fsync" in on.description and on.durability_level


def test_variant_without_a_section_for_a_broker(tmp_path):
    variant = load_variant(write(tmp_path / "only-pulsar.yaml", "pulsar: {broker: {journalWriteData: false}}\n"))
    assert variant.name == "only-pulsar"
    assert variant.for_broker("kafka").driver_overrides == {}
    assert variant.for_broker("kafka").broker_settings == {}


def test_apply_variant_merges_driver_overrides():
    base = load_driver("kafka-replicated")
    applied = apply_variant(base, load_variant("fsync-on"))
    assert applied.topic_config == {"min.insync.replicas": "2", "flush.messages": "1", "flush.ms": "0"}
    assert applied.producer_config == base.producer_config
    assert base.topic_config == {"min.insync.replicas": "2"}, "the original is left unchanged"
    rabbit = apply_variant(load_driver("rabbitmq-default"), load_variant("fsync-on"))
    assert (rabbit.queue_type, rabbit.message_persistence) == ("QUORUM", True)
    assert apply_variant(load_driver("pulsar-default"), load_variant("fsync-on")) == load_driver("pulsar-default")


def test_apply_variant_errors_name_the_variant_file(tmp_path):
    path = write(tmp_path / "rf5.yaml", "kafka: {driver: {topicConfig: {min.insync.replicas: '5'}}}\n")
    with pytest.raises(SpecError) as err:
        apply_variant(load_driver("kafka-replicated"), load_variant(path))
    assert (err.value.file, err.value.field) == (str(path), "kafka.driver.topicConfig")
    assert "driver 'kafka-replicated'" in str(err.value)


@pytest.mark.parametrize("text, field", [
    ("name: other-name\n", "name"),
    ("activemq: {driver: {}}\n", "activemq"),
    ("rabbitmq: {driver: {topicConfig: {a: b}}}\n", "rabbitmq.driver.topicConfig"),
    ("kafka: {drivers: {}}\n", "kafka.drivers"),
])
def test_bad_variant_names_file_and_field(tmp_path, text, field):
    path = write(tmp_path / "v.yaml", text)
    with pytest.raises(SpecError) as err:
        load_variant(path)
    assert (err.value.file, err.value.field) == (str(path), field)


# --- suites --------------------------------------------------------------------------------------

SUITE = """\
    name: t
    workloads: [smoke-1-topic-1-partition-100b]
    brokers: {kafka: kafka-latency}
    variants: [fsync-on]
    """


def test_smoke_suite_is_as_documented():
    suite = load_suite("smoke")
    assert suite.schedule is None and suite.tags == ["smoke"] and suite.environment == "local"
    assert suite.brokers == {"kafka": "kafka-latency", "pulsar": "pulsar-default", "rabbitmq": "rabbitmq-default"}
    assert suite.variants == ["fsync-off", "fsync-on"] and suite.interval_seconds == 5
    assert load_suite("nightly-latency").schedule == "@daily"


def test_minimal_suite_gets_defaults(tmp_path):
    suite = load_suite(write(tmp_path / "t.yaml", SUITE))
    assert (suite.interval_seconds, suite.environment, suite.schedule, suite.overrides) == (10, "local", None, {})
    assert suite.source == tmp_path / "t.yaml"


@pytest.mark.parametrize("replace, add, field, message", [
    ("variants: [fsync-on]", "variants: [fsync-on, fsync-maybe]", "variants",
     "variant 'fsync-maybe' not found (include/variants/fsync-maybe.yaml)"),
    ("brokers: {kafka: kafka-latency}", "brokers: {kafka: nope}", "brokers.kafka",
     "driver 'nope' not found (include/drivers/nope.yaml)"),
    ("brokers: {kafka: kafka-latency}", "brokers: {activemq: kafka-latency}", "brokers.activemq",
     "unknown broker"),
    ("brokers: {kafka: kafka-latency}", "brokers: {kafka: pulsar-default}", "brokers.kafka",
     "is a pulsar driver, not a kafka one"),
    ("workloads: [smoke-1-topic-1-partition-100b]", "workloads: [gone]", "workloads",
     "workload 'gone' not found"),
    ("name: t", "name: t\noverrides: {partitionsPerTopic: 0}", "overrides.partitionsPerTopic", "must be >= 1"),
    ("name: t", "name: t\noverrides: {flavour: 1}", "overrides.flavour", "not a workload field"),
    ("name: t", "name: t\nschedule: every day", "schedule", "5-field cron"),
    ("name: t", "name: t\nvariant: [x]", "variant", "unknown key"),
    ("name: t", "name: t t", "name", "DAG id"),
])
def test_bad_suite_names_file_and_field(tmp_path, replace, add, field, message):
    path = write(tmp_path / "s.yaml", textwrap.dedent(SUITE).replace(replace, add))
    with pytest.raises(SpecError) as err:
        load_suite(path)
    assert (err.value.file, err.value.field) == (str(path), field)
    assert message in str(err.value)


def test_suite_with_an_invalid_workload_names_both_files(tmp_path, monkeypatch):
    root = tmp_path / "include"
    for kind in ("workloads", "drivers", "variants", "suites"):
        (root / kind).mkdir(parents=True)
    write(root / "workloads" / "broken.yaml", workload_yaml(topics=0))
    write(root / "drivers" / "kafka-latency.yaml", f"name: kafka-latency\ndriverClass: {KAFKA_CLASS}\n")
    write(root / "variants" / "fsync-on.yaml", "kafka: {driver: {topicConfig: {flush.messages: '1'}}}\n")
    suite = write(root / "suites" / "s.yaml", textwrap.dedent(SUITE).replace("smoke-1-topic-1-partition-100b", "broken"))
    monkeypatch.setenv("BROKERBENCH_SPEC_ROOT", str(root))
    assert list_workloads() == ["broken"]
    with pytest.raises(SpecError) as err:
        load_suite("s")
    assert (err.value.file, err.value.field) == (str(suite), "workloads")
    assert "workload 'broken' is invalid" in str(err.value) and "field 'topics'" in str(err.value)


# --- plans ---------------------------------------------------------------------------------------

def test_plan_order_keys_and_settings():
    plan = build_plan(load_suite("smoke"))
    assert [(i.broker, i.variant) for i in plan.items] == [
        ("kafka", "fsync-off"), ("kafka", "fsync-on"), ("pulsar", "fsync-off"),
        ("pulsar", "fsync-on"), ("rabbitmq", "fsync-off"), ("rabbitmq", "fsync-on")]
    assert plan.deployments() == [(i.broker, i.variant) for i in plan.items]
    kafka_on = plan.items[1]
    assert kafka_on.key == "smoke-1-topic-1-partition-100b/kafka-latency/fsync-on"
    assert kafka_on.driver.topic_config == {"flush.messages": "1", "flush.ms": "0"}
    assert kafka_on.driver_overrides == {"topicConfig": {"flush.messages": "1", "flush.ms": "0"}}
    pulsar_off = plan.items[2]
    assert pulsar_off.broker_settings == {"journalSyncData": False}
    assert "fsync" in pulsar_off.variant_description
    assert (plan.suite, plan.environment, plan.interval_seconds) == ("smoke", "local", 5)


def test_plan_items_are_ordered_by_broker_then_variant_then_workload():
    plan = build_plan(load_suite("smoke"), {
        "workloads": ["smoke-1-topic-1-partition-100b", "latency-1-topic-1-partition-100b"],
        "brokers": ["pulsar"]})
    assert [i.key for i in plan.items] == [
        "smoke-1-topic-1-partition-100b/pulsar-default/fsync-off",
        "latency-1-topic-1-partition-100b/pulsar-default/fsync-off",
        "smoke-1-topic-1-partition-100b/pulsar-default/fsync-on",
        "latency-1-topic-1-partition-100b/pulsar-default/fsync-on"]


def test_plan_precedence_workload_file_then_suite_then_params():
    suite = load_suite("nightly-latency")  # overrides: producerRate 5000, testDurationMinutes 2
    workload = build_plan(suite).items[0].workload
    assert (workload.producer_rate, workload.test_duration_minutes) == (5000, 2)
    assert workload.warmup_duration_minutes == 1, "from the workload file"
    assert workload.message_size == 100
    params = {"rate_override_msg_s": 750, "test_duration_minutes": 0.25, "warmup_duration_minutes": 0,
              "environment": "aws", "results_root": "s3://bucket/prefix/", "interval_seconds": 2,
              "variants": ["fsync-on"], "brokers": ["rabbitmq"]}
    plan = build_plan(suite, params)
    workload = plan.items[0].workload
    assert (workload.producer_rate, workload.test_duration_minutes, workload.warmup_duration_minutes) == (750, 0.25, 0)
    assert (plan.environment, plan.results_root, plan.interval_seconds) == ("aws", "s3://bucket/prefix", 2)
    assert [i.key for i in plan.items] == ["latency-1-topic-1-partition-100b/rabbitmq-default/fsync-on"]
    assert plan.params["rate_override_msg_s"] == 750


def test_none_params_mean_suite_defaults():
    suite = load_suite("smoke")
    assert build_plan(suite, {"brokers": None, "test_duration_minutes": None}) == build_plan(suite)
    assert build_plan(suite, {"brokers": "kafka, rabbitmq"}).deployments()[-1] == ("rabbitmq", "fsync-on")


@pytest.mark.parametrize("params, field, message", [
    ({"test_duration_minutes": 0}, "test_duration_minutes", "must be > 0"),
    ({"warmup_duration_minutes": -1}, "warmup_duration_minutes", "must be >= 0"),
    ({"rate_override_msg_s": -5}, "rate_override_msg_s", "must be >= 0"),
    ({"brokers": ["activemq"]}, "brokers", "unknown broker 'activemq'"),
    ({"brokers": []}, "brokers", "at least 1"),
    ({"workloads": ["nope"]}, "workloads", "workload 'nope' not found"),
    ({"variants": ["fsync-sometimes"]}, "variants", "variant 'fsync-sometimes' not found"),
    ({"environment": "gcp"}, "environment", "must be one of"),
    ({"results_root": "s3:///x"}, "results_root", "names no bucket"),
    ({"interval_seconds": 0}, "interval_seconds", "must be > 0"),
    ({"colour": "blue"}, "colour", "unknown key"),
])
def test_bad_params_name_the_param(params, field, message):
    with pytest.raises(SpecError) as err:
        build_plan(load_suite("smoke"), params)
    assert err.value.file is None and err.value.field == field
    assert message in str(err.value)


def test_broker_missing_from_suite_is_a_param_error(tmp_path):
    suite = load_suite(write(tmp_path / "t.yaml", SUITE))
    with pytest.raises(SpecError) as err:
        build_plan(suite, {"brokers": ["pulsar"]})
    assert (err.value.file, err.value.field) == (None, "brokers")
    assert "not in suite 't'" in str(err.value)


def test_plan_json_round_trip():
    plan = build_plan(load_suite("smoke"), {"workloads": list_workloads()})
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    assert again.items_for("kafka", "fsync-on")[0].driver.topic_config["flush.messages"] == "1"
    assert again.items[0].key == plan.items[0].key


def test_empty_form_fields_mean_suite_defaults():
    suite = load_suite("smoke")
    assert build_plan(suite, {"results_root": "", "brokers": "", "rate_override_msg_s": None}) == build_plan(suite)


def test_workload_kind_and_sweep_rates_are_brokerbench_extensions(tmp_path):
    import pytest as _pytest

    from brokerbench.spec import SpecError, load_workload

    good = tmp_path / "sweep.yaml"
    good.write_text("name: sweep\ntopics: 1\npartitionsPerTopic: 1\nmessageSize: 100\nproducerRate: 0\n"
                    "testDurationMinutes: 1\nkind: throughput-sweep\nsweepRatesMsgS: [1000, 5000]\n")
    w = load_workload(str(good))
    assert w.kind == "throughput-sweep" and w.sweep_rates_msg_s == [1000, 5000]
    assert w.to_omb_dict()["sweepRatesMsgS"] == [1000, 5000]
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("throughput-sweep", "chaos"))
    with _pytest.raises(SpecError) as e:
        load_workload(str(bad))
    assert e.value.field == "kind"
    bad.write_text(good.read_text().replace("[1000, 5000]", "[1000, 0]"))
    with _pytest.raises(SpecError) as e:
        load_workload(str(bad))
    assert e.value.field == "sweepRatesMsgS"


def test_a_fanout_exchange_with_several_partitions_is_refused_before_the_run(tmp_path):
    driver = write(tmp_path / "rabbitmq-fanout.yaml",
                   "name: rabbitmq-fanout\ndriverClass: x.RabbitMqBenchmarkDriver\nexchangeType: fanout\n")
    assert load_driver(driver).exchange_type == "FANOUT"
    suite = load_suite(write(tmp_path / "s.yaml", f"name: t\nworkloads: [smoke-1-topic-1-partition-100b]\n"
                                                  f"brokers: {{rabbitmq: {driver}}}\nvariants: [fsync-off]\n"))
    assert [i.driver.exchange_type for i in build_plan(suite).items] == ["FANOUT"]  # one partition: fine
    with pytest.raises(SpecError) as err:
        build_plan(suite, {"workloads": ["latency-1-topic-16-partitions-100b"]})
    assert err.value.field == "brokers.rabbitmq" and "partitionsPerTopic 1" in str(err.value)
    assert "has 16" in str(err.value)
    assert load_driver("rabbitmq-default").exchange_type == "DIRECT"
