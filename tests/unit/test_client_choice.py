"""The client library per broker: chosen by the driver file, the suite and the param (param > suite > driver >
default), refused by name when unknown, carried by the plan into every worker job."""

from __future__ import annotations

import textwrap

import pytest

from brokerbench.pipeline import benchmark
from brokerbench.pipeline.context import RunContext
from brokerbench.spec import SpecError, Suite, build_plan, load_driver, load_suite
from brokerbench.spec.clients import CLIENT_LIBRARIES, choose_client_library
from brokerbench.spec.run_conf import check_conf

SMOKE_WORKLOAD = "smoke-1-topic-1-partition-100b"


def suite(kafka_driver: str = "kafka-latency", **fields) -> Suite:
    return Suite.model_validate({"name": "t", "workloads": [SMOKE_WORKLOAD], "brokers": {"kafka": kafka_driver},
                                 "variants": ["fsync-off"], **fields})


def kafka_library(plan) -> str:
    (library,) = {i.client_library for i in plan.items if i.broker == "kafka"}
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
                            "allowed: kafka-python, confluent-kafka")
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
    assert "'kafka-java' is not one of ['kafka-python', 'confluent-kafka'] (at client_libraries.kafka)" in str(e.value)


# -- precedence: param > suite > driver file > default -------------------------------------------------------

def test_precedence_is_param_then_suite_then_driver_file_then_default(tmp_path):
    assert kafka_library(build_plan(suite("kafka-latency"))) == "kafka-python"  # the default
    files = {"driver_files": [driver_file(tmp_path, "confluent-kafka")]}
    assert kafka_library(build_plan(suite(), files)) == "confluent-kafka"  # the driver file
    over_driver = suite(clientLibraries={"kafka": "kafka-python"})
    assert kafka_library(build_plan(over_driver, files)) == "kafka-python"  # the suite over the driver
    param = {"client_libraries": {"kafka": "confluent-kafka"}}
    assert kafka_library(build_plan(over_driver, param)) == "confluent-kafka"  # the param over the suite
    assert kafka_library(build_plan(suite(clientLibraries={"kafka": "confluent-kafka"}))) == "confluent-kafka"
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
        assert job["client_library"] == item.client_library
        assert all(j["client_library"] == item.client_library for j in benchmark.split_job(job, 3))


def test_the_spec_and_the_worker_know_the_same_libraries():
    from brokerbench.worker.drivers import DRIVERS, driver_class

    assert [(b, lib) for b, libs in CLIENT_LIBRARIES.items() for lib in libs] == list(DRIVERS)
    for broker, library in DRIVERS:
        assert driver_class(broker, library).client_library == library  # what the result rows record
    assert driver_class("kafka").client_library == CLIENT_LIBRARIES["kafka"][0]  # the same default
