"""The client library per broker: chosen by the driver file, the suite and the param (param > suite > driver >
default), refused by name when unknown, carried by the plan into every worker job, and a rate one worker process
was never measured to hold is warned about (spec/clients.py's ceilings table)."""

from __future__ import annotations

import argparse
import json
import logging
import textwrap

import pytest

from brokerbench.pipeline import benchmark, setup
from brokerbench.pipeline.context import RunContext
from brokerbench.spec import SpecError, Suite, build_plan, load_driver, load_suite
from brokerbench.spec.clients import CLIENT_CEILINGS, CLIENT_LIBRARIES, ceiling_warning, choose_client_library
from brokerbench.spec.run_conf import check_conf

SMOKE_WORKLOAD = "smoke-1-topic-1-partition-100b"
SEED_WORKLOAD = "latency-1-topic-1-partition-100b"  # 50,000 msg/s, 1 producer, 1 consumer


def suite(kafka_driver: str = "kafka-latency", **fields) -> Suite:
    return Suite.model_validate({"name": "t", "workloads": [SMOKE_WORKLOAD], "brokers": {"kafka": kafka_driver},
                                 "variants": ["fsync-off"], **fields})


def library_of(plan, broker: str = "kafka") -> str:
    (library,) = {i.client_library for i in plan.items if i.broker == broker}
    return library


def driver_file(tmp_path, library: str | None):
    text = textwrap.dedent("""\
        name: my-kafka
        driverClass: io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver
        producerConfig: |
          acks=all
        """) + (f"clientLibrary: {library}\n" if library else "")
    path = tmp_path / "my-kafka.yaml"
    path.write_text(text)
    return str(path)


# -- refused values name the field and the allowed libraries -----------------------------------------------

def test_a_driver_file_naming_an_unknown_library_is_refused_naming_the_field(tmp_path):
    with pytest.raises(SpecError) as e:
        load_driver(driver_file(tmp_path, "librdkafka"))
    assert e.value.field == "clientLibrary"
    assert "'librdkafka' is not a kafka client library; allowed: kafka-python, confluent-kafka" in str(e.value)
    pulsar = tmp_path / "p.yaml"
    pulsar.write_text("name: p\ndriverClass: io.openmessaging.benchmark.driver.pulsar.PulsarBenchmarkDriver\n"
                      "clientLibrary: confluent-kafka\n")
    with pytest.raises(SpecError, match="'confluent-kafka' is not a pulsar client library; allowed: pulsar-client"):
        load_driver(pulsar)


def test_a_suite_naming_an_unknown_library_or_a_broker_it_lacks_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    base = (f"name: s\nworkloads: [{SMOKE_WORKLOAD}]\nbrokers: {{kafka: kafka-latency}}\nvariants: [fsync-off]\n")
    path.write_text(base + "clientLibraries: {kafka: kafka-java}\n")
    with pytest.raises(SpecError) as e:
        load_suite(path)
    assert (e.value.file, e.value.field) == (str(path), "clientLibraries.kafka")
    assert "'kafka-java' is not a kafka client library; allowed: kafka-python, confluent-kafka" in e.value.message
    path.write_text(base + "clientLibraries: {pulsar: pulsar-client}\n")
    with pytest.raises(SpecError) as e:
        load_suite(path)
    assert e.value.field == "clientLibraries.pulsar" and "not a broker of this suite (brokers: kafka)" in str(e.value)


def test_the_param_refuses_an_unknown_library_naming_the_field_and_the_allowed_ones():
    # the validate task's check (RunParams)
    with pytest.raises(SpecError) as e:
        build_plan(load_suite("smoke"), {"client_libraries": {"kafka": "kafka-java"}})
    assert e.value.field == "client_libraries.kafka"
    assert str(e.value) == ("field 'client_libraries.kafka': 'kafka-java' is not a kafka client library; "
                            "allowed: kafka-python, confluent-kafka, kafka-clients-java ('java' for kafka-clients-java)")
    with pytest.raises(SpecError) as e:
        build_plan(load_suite("smoke"), {"client_libraries": {"activemq": "x"}})
    assert e.value.field == "client_libraries.activemq" and "supported brokers: kafka, pulsar, rabbitmq" in str(e.value)
    with pytest.raises(SpecError) as e:
        build_plan(suite(), {"client_libraries": {"rabbitmq": "pika"}})
    assert e.value.field == "client_libraries.rabbitmq" and "not in suite 't' (it has: kafka)" in str(e.value)
    # the command line's check before Airflow starts (the params' JSON schema, as Airflow's trigger form checks)
    with pytest.raises(SpecError) as e:
        check_conf(load_suite("smoke"), {"client_libraries": {"kafka": "kafka-java"}})
    assert e.value.field == "client_libraries"
    assert ("'kafka-java' is not one of ['kafka-python', 'confluent-kafka', 'kafka-clients-java', 'java'] "
            "(at client_libraries.kafka)") in str(e.value)


# -- precedence: param > suite > driver file > default -------------------------------------------------------

def test_precedence_is_param_then_suite_then_driver_file_then_default(tmp_path):
    assert load_driver("kafka-latency").client_library is None
    assert load_driver("kafka-throughput").client_library == "confluent-kafka"
    assert library_of(build_plan(suite("kafka-latency"))) == "kafka-python"  # the default
    assert library_of(build_plan(suite("kafka-throughput"))) == "confluent-kafka"  # the driver file
    over_driver = suite("kafka-throughput", clientLibraries={"kafka": "kafka-python"})
    assert library_of(build_plan(over_driver)) == "kafka-python"  # the suite over the driver
    param = {"client_libraries": {"kafka": "confluent-kafka"}}
    assert library_of(build_plan(over_driver, param)) == "confluent-kafka"  # the param over the suite
    # a driver file given by param is the driver level too
    files = {"driver_files": [driver_file(tmp_path, "confluent-kafka")]}
    assert library_of(build_plan(suite(), files)) == "confluent-kafka"
    assert library_of(build_plan(suite(clientLibraries={"kafka": "kafka-python"}), files)) == "kafka-python"
    assert choose_client_library("kafka", None, {"kafka": "kafka-python"}, "confluent-kafka") == "kafka-python"
    assert choose_client_library("pulsar", {"kafka": "confluent-kafka"}, None, None) == "pulsar-client"


def test_the_choice_travels_in_the_plan_into_every_worker_job(tmp_path):
    from brokerbench.environments.base import BrokerEndpoint

    plan = build_plan(load_suite("smoke"), {"client_libraries": {"kafka": "confluent-kafka"}})
    plan = type(plan).from_json(plan.to_json())  # as the later tasks read it
    assert {(i.broker, i.client_library) for i in plan.items} == {
        ("kafka", "confluent-kafka"), ("pulsar", "pulsar-client"), ("rabbitmq", "pika")}
    kafka = next(i for i in plan.items if i.broker == "kafka")
    assert kafka.driver.to_omb_dict()["clientLibrary"] == "confluent-kafka"  # the deploy task's provenance record
    assert plan.params["client_libraries"] == {"kafka": "confluent-kafka"}
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    endpoint = BrokerEndpoint("kafka", "apache-kafka", "4.1.1", bootstrap_servers="127.0.0.1:9092")
    for item in plan.items:
        job = benchmark._job(ctx, item, endpoint, "measure", 60.0, 5.0, "localhost-0")
        assert job.client_library == item.client_library
        assert all(j.client_library == item.client_library for j in benchmark.split_job(job, 3))


def test_the_warm_up_of_a_sweep_holds_its_first_step(tmp_path):
    """Every step in the warm-up would end it overloading the broker right before the measured phase's lowest step."""
    from brokerbench.environments.base import BrokerEndpoint
    from brokerbench.worker.runner import SWEEP_RATES

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: sweep\ntopics: 1\npartitionsPerTopic: 1\nmessageSize: 100\nproducerRate: 0\n"
                     "testDurationMinutes: 1\nwarmupDurationMinutes: 1\nkind: throughput-sweep\n"
                     "sweepRatesMsgS: [5000, 10000, 20000]\n")
    default = tmp_path / "default-sweep.yaml"
    default.write_text(sweep.read_text().replace("sweepRatesMsgS: [5000, 10000, 20000]\n", ""))
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    endpoint = BrokerEndpoint("rabbitmq", "rabbitmq", "3.10.8", amqp_uris=["amqp://127.0.0.1:5672"])
    for path, rates in ((sweep, [5000, 10000, 20000]), (default, None)):
        plan = build_plan(load_suite("smoke"), {"brokers": ["rabbitmq"], "variants": ["fsync-off"],
                                                "workloads": [str(path)]})
        (item,) = plan.items
        warm = benchmark._job(ctx, item, endpoint, "warmup", 60.0, 5.0, "localhost-0")
        measured = benchmark._job(ctx, item, endpoint, "measure", 60.0, 5.0, "localhost-0")
        assert warm.kind == measured.kind == "throughput-sweep"
        assert warm.sweep_rates_msg_s == [(rates or SWEEP_RATES)[0]]
        assert measured.sweep_rates_msg_s == rates  # the measured phase: every step (None: the worker's default)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own, on import
def test_the_spec_and_the_worker_know_the_same_libraries():
    from brokerbench.worker.drivers import DRIVERS, driver_class

    assert [(b, lib) for b, libs in CLIENT_LIBRARIES.items() for lib in libs] == list(DRIVERS)
    for broker, library in DRIVERS:
        assert driver_class(broker, library).client_library == library  # what the result rows record
        assert (broker, library) in CLIENT_CEILINGS
    assert driver_class("kafka").client_library == CLIENT_LIBRARIES["kafka"][0]  # the same default


def test_shipped_latency_and_throughput_specs_use_the_library_that_holds_their_rate():
    nightly = build_plan(load_suite("nightly-latency"))
    assert library_of(nightly) == "confluent-kafka"
    # Pulsar through the JVM engine: its p99 is the broker's, and steadier from night to night (docs/analytics.md)
    assert library_of(nightly, "pulsar") == "pulsar-client-java"
    assert library_of(nightly, "rabbitmq") == "amqp-client-java"
    assert library_of(build_plan(load_suite("aws-seed-latency"))) == "confluent-kafka"
    assert load_driver("kafka-throughput").client_library == "confluent-kafka"
    assert library_of(build_plan(load_suite("smoke"))) == "kafka-python"  # 1,000 msg/s: the default holds it


# -- the warning: a rate per worker process above the chosen library's measured ceiling ------------------------

def test_a_rate_above_the_ceiling_of_the_chosen_library_is_warned_about():
    seed = suite(workloads=[SEED_WORKLOAD])
    (line,) = benchmark.client_rate_warnings(build_plan(seed), processes=1)
    assert line == (
        f"workload '{SEED_WORKLOAD}' on kafka (driver 'kafka-latency'): 50,000 msg/s per worker process is above "
        "kafka-python's measured ceiling of 8,320 msg/s (the rate it was measured to reach with a consumer in the "
        "same process; docs/benchmarks-harness.md, section 2): the client may fall behind the rate and measure "
        "itself rather than the broker; choose confluent-kafka or kafka-clients-java (param client_libraries {\"kafka\": "
        "\"confluent-kafka\"}) or split the rate over more worker processes (environment setting worker_processes)")
    # the library that held 50,000 msg/s: no warning; above it, its own ceiling is named
    fast = {"client_libraries": {"kafka": "confluent-kafka"}}
    assert benchmark.client_rate_warnings(build_plan(seed, fast), processes=1) == []
    (line,) = benchmark.client_rate_warnings(build_plan(seed, {**fast, "rate_override_msg_s": 60_000}), 1)
    assert "confluent-kafka's measured ceiling of 50,000 msg/s (the highest rate it was measured to hold" in line
    # split over 8 processes, 6,250 msg/s each: under kafka-python's ceiling
    assert benchmark.client_rate_warnings(build_plan(seed), processes=8) == []
    # 0 = find the maximum rate: nothing to hold
    assert benchmark.client_rate_warnings(build_plan(seed, {"rate_override_msg_s": 0}), processes=1) == []


def test_a_producer_only_process_is_held_to_the_producer_only_ceiling():
    assert ceiling_warning("kafka", "kafka-python", 9_000, with_consumer=False, what="w") is None
    line = ceiling_warning("kafka", "kafka-python", 30_000, with_consumer=False, what="w")
    assert line is not None and "ceiling of 9,679 msg/s (the rate it was measured to reach producing only; " \
        "docs/benchmarks-harness.md, section 1)" in line
    line = ceiling_warning("rabbitmq", "pika", 20_000, with_consumer=True, what="w")
    assert line is not None and "choose" not in line  # no faster RabbitMQ library to suggest
    assert ceiling_warning("kafka", "confluent-kafka", 200_000, with_consumer=False, what="w") is None


def test_the_ceilings_are_figures_the_harness_document_prints():
    from brokerbench.spec.roots import spec_root

    doc = (spec_root().parent / "docs" / "benchmarks-harness.md").read_text()
    measured, _, used = doc.partition("## 4. Where these figures are used")
    assert "include/brokerbench/spec/clients.py" in used  # where the table lives
    for (broker, library), c in CLIENT_CEILINGS.items():  # each printed by the measurements (sections 1 and 2)
        assert f"{c.producer_only_msg_s:,}" in measured, (library, c.producer_only_msg_s)
        assert f"{c.with_consumer_msg_s:,}" in measured, (library, c.with_consumer_msg_s)


def test_validate_logs_the_warning_and_runs_anyway(tmp_path, caplog):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "rate_override_msg_s": 50_000,
                      "results_root": str(tmp_path)})
    with caplog.at_level(logging.INFO, logger="brokerbench"):
        out = setup.validate(ctx)
    assert out["client_libraries"] == {"rabbitmq": "pika"}
    (line,) = out["warnings"]
    assert "50,000 msg/s per worker process is above pika's measured ceiling of 12,966 msg/s" in line
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [line]
    assert ctx.plan_path.exists()  # a warning, not a refusal


def test_the_validate_command_prints_warnings_and_still_succeeds(capsys):
    from brokerbench import cli

    assert cli.main(["validate", "aws-seed-latency", "smoke"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ok     aws-seed-latency: 6 measurements"
    warned = [line for line in out if line.startswith("warn   aws-seed-latency: ")]
    # Kafka runs confluent-kafka there (the suite's clientLibraries); Pulsar's and RabbitMQ's libraries fell behind
    assert [w.split(" on ")[1].split(" ")[0] for w in warned] == ["pulsar", "rabbitmq"]
    assert "ok     smoke: 6 measurements" in out and not any(line.startswith("warn   smoke") for line in out)


def test_the_client_flag_sets_the_param():
    from brokerbench.cli import ConfError, conf_with_flags

    args = argparse.Namespace(client=["kafka=confluent-kafka"])
    assert conf_with_flags({}, args) == {"client_libraries": {"kafka": "confluent-kafka"}}
    both = conf_with_flags({"client_libraries": {"pulsar": "pulsar-client"}}, args)
    assert both == {"client_libraries": {"pulsar": "pulsar-client", "kafka": "confluent-kafka"}}
    with pytest.raises(ConfError, match="disagree"):
        conf_with_flags({"client_libraries": {"kafka": "kafka-python"}}, args)
    with pytest.raises(ConfError, match="BROKER=LIBRARY"):
        conf_with_flags({}, argparse.Namespace(client=["confluent-kafka"]))
    json.dumps(conf_with_flags({}, args))  # what `airflow dags test -c` gets


# -- every shipped Kafka driver runs with either library ---------------------------------------------------

@pytest.mark.parametrize("name", ["kafka-latency", "kafka-throughput", "kafka-replicated"])
def test_librdkafka_takes_the_settings_of_every_shipped_kafka_driver(name, caplog):
    """OMB's Kafka driver files are written for the Java client: the confluent-kafka driver renames what librdkafka
    spells differently and builds its clients from them (no broker needed: nothing is sent)."""
    from types import SimpleNamespace

    from brokerbench.worker.drivers.confluent import ConfluentKafkaDriver

    recorder = SimpleNamespace(s=SimpleNamespace(publish_s=[]), error=lambda e: None)
    driver = ConfluentKafkaDriver({"bootstrap_servers": "127.0.0.1:1"}, load_driver(name).to_omb_dict(), recorder)
    with caplog.at_level(logging.WARNING, logger="brokerbench.worker"):
        driver.create_producer("t", 1).close()
        driver.create_consumer("t", "s", 1, lambda payload: None).close()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]  # every setting applied


def test_java_names_are_renamed_and_unknown_settings_dropped_for_librdkafka(caplog):
    from confluent_kafka import Producer

    from brokerbench.worker.drivers.confluent import _clean, _construct

    # kafka-latency's fetch.max.wait.ms=10 (Java) is librdkafka's fetch.wait.max.ms
    assert _clean({"fetch.max.wait.ms": "10", "acks": "all"}) == {"fetch.wait.max.ms": "10", "acks": "all"}
    with caplog.at_level(logging.WARNING, logger="brokerbench.worker"):
        _construct(Producer, {"bootstrap.servers": "127.0.0.1:1", "no.such.setting": "1", "linger.ms": "1"}).flush(0)
    assert [r.getMessage() for r in caplog.records] == [
        "confluent-kafka: no.such.setting is not a librdkafka setting; not applied"]


def test_librdkafka_sockets_send_without_delay_unless_the_driver_file_says_otherwise():
    """The Java client always sets TCP_NODELAY; librdkafka's default leaves Nagle's algorithm on."""
    from types import SimpleNamespace

    from brokerbench.worker.drivers.confluent import ConfluentKafkaDriver

    recorder = SimpleNamespace(s=SimpleNamespace(publish_s=[]), error=lambda e: None)
    ep = {"bootstrap_servers": "127.0.0.1:1"}
    assert ConfluentKafkaDriver(ep, {"name": "k"}, recorder).common["socket.nagle.disable"] is True
    mine = ConfluentKafkaDriver(ep, {"name": "k", "commonConfig": "socket.nagle.disable=false"}, recorder)
    assert mine.common["socket.nagle.disable"] == "false"


def test_librdkafka_producers_keep_the_java_clients_five_requests_in_flight_unless_the_driver_file_says_otherwise(
        monkeypatch):
    """librdkafka's default (1,000,000 in flight) sent a request per linger.ms, which a broker slower per request
    than that (acks=all, flush.messages=1) queued on the connection: seconds of publish latency on the loopback
    fleet's 3-node cluster where ProducerPerformance (the Java client: 5 in flight) measured tens of ms."""
    from types import SimpleNamespace

    from brokerbench.worker.drivers import confluent

    built: list[dict] = []
    monkeypatch.setattr(confluent, "_CKProducer", lambda conf, topic, recorder: built.append(conf))
    recorder = SimpleNamespace(s=SimpleNamespace(publish_s=[]), error=lambda e: None)
    ep = {"bootstrap_servers": "127.0.0.1:1"}
    confluent.ConfluentKafkaDriver(ep, {"name": "k", "producerConfig": "acks=all\nlinger.ms=1"},
                                   recorder).create_producer("t", 1)
    assert built[-1]["max.in.flight.requests.per.connection"] == 5 and built[-1]["acks"] == "all"
    for key in ("max.in.flight.requests.per.connection", "max.in.flight"):  # librdkafka's two names of it
        confluent.ConfluentKafkaDriver(ep, {"name": "k", "producerConfig": f"{key}=100"}, recorder).create_producer(
            "t", 1)
        assert {k: v for k, v in built[-1].items() if k.startswith("max.in.flight")} == {key: "100"}
    # the librdkafka producer takes it
    from confluent_kafka import Producer

    confluent._construct(Producer, {"bootstrap.servers": "127.0.0.1:1", "max.in.flight.requests.per.connection": 5})


def test_the_jvm_engine_is_chosen_like_a_library_by_its_name_or_java(tmp_path):
    from brokerbench.worker import jvm
    from brokerbench.worker.drivers import driver_class

    for name in ("pulsar-client-java", "java"):
        _, plan = check_conf(load_suite("smoke"), {"client_libraries": {"pulsar": name}})  # the params' schema
        plan = type(plan).from_json(plan.to_json())
        pulsar = next(i for i in plan.items if i.broker == "pulsar")
        assert pulsar.client_library == "pulsar-client-java"  # what the job carries and the rows record
    assert choose_client_library("pulsar", None, {"pulsar": "java"}, None) == "pulsar-client-java"
    assert choose_client_library("pulsar", None, None, "java") == "pulsar-client-java"  # a driver file's
    assert choose_client_library("kafka", {"kafka": "java"}, None, None) == "kafka-clients-java"
    assert choose_client_library("rabbitmq", {"rabbitmq": "java"}, None, None) == "amqp-client-java"
    # the runner hands their jobs to the JVM engine; the versions are the ones the engine's pom pins
    for broker, library, pinned in (("pulsar", "pulsar-client-java", "4.0.7"), ("kafka", "kafka-clients-java", "4.1.1"),
                                    ("rabbitmq", "amqp-client-java", "5.23.0")):
        cls = driver_class(broker, library)
        assert cls.engine == "jvm" and cls.client_library_version == jvm.library_version(broker) == pinned
    assert getattr(driver_class("pulsar", "pulsar-client"), "engine", None) is None


def test_a_kind_the_jvm_engine_does_not_run_is_refused_when_the_plan_is_made(tmp_path):
    """backlog (named, or derived from consumerBacklogSizeGB) and mixed: refused naming the param, before any
    machine; the same workloads run with a Python client library."""
    catchup = "catchup-1-topic-100-partitions-1kb-200k"  # consumerBacklogSizeGB > 0: the backlog kind
    for workload, overrides in ((catchup, {}), (SMOKE_WORKLOAD, {"kind": "mixed"})):
        s = Suite.model_validate({"name": "t", "workloads": [workload], "brokers": {"pulsar": "pulsar-default"},
                                  "variants": ["fsync-off"], "overrides": overrides})
        with pytest.raises(SpecError, match="does not run the '(backlog|mixed)' kind") as e:
            build_plan(s, {"client_libraries": {"pulsar": "java"}})
        assert e.value.field == "client_libraries.pulsar"
        assert {i.client_library for i in build_plan(s, {}).items} == {"pulsar-client"}


def test_the_jvm_engines_build_goes_into_the_brokers_provenance(tmp_path, monkeypatch):
    from brokerbench.worker import jvm

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    ctx.write_json("provenance/pulsar__fsync-off.json", {"broker": "pulsar", "version": "4.0.7"})
    built = {"engine": "jvm", "source_hash": "ab" * 32, "built": "2026-11-27T21:21:09Z", "maven": "offline",
             "jar": {"name": jvm.JAR_NAME, "sha256": "cd" * 32}, "libraries": {}, "lib": [{"name": "x.jar"}]}
    monkeypatch.setattr(jvm, "manifest", lambda: built)
    assert benchmark.record_client_engine(ctx, "pulsar", "fsync-off", {"pulsar-client"}) is None  # a Python driver
    assert "client_engine" not in ctx.read_json("provenance/pulsar__fsync-off.json")
    engine = benchmark.record_client_engine(ctx, "pulsar", "fsync-off", {"pulsar-client-java"})
    record = ctx.read_json("provenance/pulsar__fsync-off.json")
    assert record["client_engine"] == engine and engine["jar"]["sha256"] == "cd" * 32 and record["version"] == "4.0.7"


def test_a_shipped_engine_build_is_found_by_its_environment_variable_on_a_host_without_its_sources(tmp_path,
                                                                                                 monkeypatch):
    """An aws client host: the installed package has no engine sources; the build the controller copied there is
    named by BROKERBENCH_JVM_ENGINE_DIR, and its manifest says the client libraries' versions."""
    from brokerbench.worker import jvm

    monkeypatch.setattr(jvm, "SOURCE_DIR", tmp_path / "no-sources")
    shipped = tmp_path / "jvm-engine" / "cdcdcdcdcdcdcdcd"
    monkeypatch.setenv(jvm.ENGINE_DIR_ENV, str(shipped))
    assert jvm.engine_dir() == shipped
    with pytest.raises(jvm.JvmEngineError, match="holds no engine build"):
        jvm.ensure_built()  # never a build from sources that are not there
    with pytest.raises(jvm.JvmEngineError, match="no JVM engine sources"):
        jvm.library_version("kafka")
    shipped.mkdir(parents=True)
    built = {"engine": "jvm", "jar": {"name": jvm.JAR_NAME, "sha256": "cd" * 32},
             "libraries": {"kafka": {"client_library": "kafka-clients-java", "version": "4.1.1"}}, "lib": []}
    (shipped / "manifest.json").write_text(json.dumps(built))
    assert jvm.ensure_built() == built
    assert jvm.library_version("kafka") == "4.1.1"
