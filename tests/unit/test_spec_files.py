"""OMB workload and driver files from anywhere on disk (params ``workload_files`` and
``driver_files``, ``spec.conf_with_files``, ``brokerbench bench --workload/--driver``):
resolved and validated at plan time, errors naming the path and the param, unique result
names, and the plan carrying the files' content."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerbench import cli
from brokerbench.spec import Plan, SpecError, build_plan, conf_with_files, load_suite

#: OMB's workloads/1-topic-1-partition-100b.yaml, as OMB ships it
OMB_WORKLOAD = """\
name: 1 topic / 1 partition / 100b

topics: 1
partitionsPerTopic: 1
messageSize: 100
payloadFile: "payload/payload-100b.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 50000
consumerBacklogSizeGB: 0
testDurationMinutes: 15
"""
#: OMB's driver-kafka/kafka-latency.yaml, as OMB ships it
OMB_KAFKA_DRIVER = """\
name: Kafka
driverClass: io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver

replicationFactor: 3

topicConfig: |
  min.insync.replicas=2

commonConfig: |
  bootstrap.servers=localhost:9092

producerConfig: |
  acks=all
  linger.ms=1
  batch.size=131072

consumerConfig: |
  auto.offset.reset=earliest
  enable.auto.commit=false
  max.partition.fetch.bytes=10485760
"""


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def smoke():
    return load_suite("smoke")


def test_a_workload_file_anywhere_runs_unchanged_instead_of_the_suites(tmp_path, smoke):
    path = write(tmp_path / "elsewhere" / "my-workload.yaml", OMB_WORKLOAD)
    plan = build_plan(smoke, {"workload_files": [path], "brokers": ["kafka"]})
    assert {i.workload.id for i in plan.items} == {"my-workload"}
    assert {i.key for i in plan.items} == {"my-workload/kafka-latency/fsync-off", "my-workload/kafka-latency/fsync-on"}
    # the suite's overrides apply as to any workload
    assert plan.items[0].workload.test_duration_minutes == 0.5
    # with the workloads param the files come after the named workloads
    both = build_plan(smoke, {"workloads": ["smoke-1-topic-1-partition-100b"], "workload_files": [path],
                              "brokers": ["kafka"], "variants": ["fsync-on"]})
    assert [i.workload.id for i in both.items] == ["smoke-1-topic-1-partition-100b", "my-workload"]


def test_a_dag_runs_the_workload_files_instead_of_the_suites(tmp_path, smoke):
    """A DAG run's conf holds every param's default (Airflow fills them in): the workloads param's must not
    bring the suite's workloads back beside the files."""
    from brokerbench.spec.params import PARAMS

    path = write(tmp_path / "my-workload.yaml", OMB_WORKLOAD)
    defaults = {p.name: p.default_for(smoke) for p in PARAMS if p.group == "plan"}
    assert defaults["workloads"] is None
    plan = build_plan(smoke, {**defaults, "workload_files": [path], "brokers": ["kafka"]})
    assert {i.workload.id for i in plan.items} == {"my-workload"}
    # without files the default means the suite's workloads
    plain = build_plan(smoke, {**defaults, "brokers": ["kafka"]})
    assert {i.workload.id for i in plain.items} == set(smoke.workloads)


def test_the_plan_carries_the_files_content_so_tasks_never_read_the_paths(tmp_path, smoke):
    workload = write(tmp_path / "w.yaml", OMB_WORKLOAD)
    driver = write(tmp_path / "kafka.yaml", OMB_KAFKA_DRIVER)
    text = build_plan(smoke, {"workload_files": [workload], "driver_files": [driver], "brokers": ["kafka"]}).to_json()
    Path(workload).unlink()
    Path(driver).unlink()
    plan = Plan.from_json(text)
    item = plan.items[0]
    assert item.workload.name == "1 topic / 1 partition / 100b" and item.workload.producer_rate == 1000
    assert item.driver.name == "Kafka" and item.driver.producer_config["batch.size"] == "131072"
    assert plan.params["workload_files"] == [workload] and plan.params["driver_files"] == [driver]


def test_two_workload_files_of_one_name_are_filed_apart(tmp_path, smoke):
    a = write(tmp_path / "a" / "latency.yaml", OMB_WORKLOAD)
    b = write(tmp_path / "b" / "latency.yaml", OMB_WORKLOAD.replace("producerRate: 50000", "producerRate: 2000"))
    plan = build_plan(smoke, {"workload_files": [a, b], "brokers": ["kafka"], "variants": ["fsync-on"]})
    ids = [i.workload.id for i in plan.items]
    assert ids[0] == "latency" and ids[1].startswith("latency-") and len(ids[1]) == len("latency-") + 8
    assert len({i.key for i in plan.items}) == 2
    # the same path gives the same name in every run (history tracks follow it)
    again = build_plan(smoke, {"workload_files": [a, b], "brokers": ["kafka"], "variants": ["fsync-on"]})
    assert [i.workload.id for i in again.items] == ids
    # a file named like a named workload of the run does not take its place either
    named = write(tmp_path / "c" / "smoke-1-topic-1-partition-100b.yaml", OMB_WORKLOAD)
    plan = build_plan(smoke, {"workloads": ["smoke-1-topic-1-partition-100b"], "workload_files": [named],
                              "brokers": ["kafka"], "variants": ["fsync-on"]})
    assert len({i.key for i in plan.items}) == 2


def test_a_driver_file_replaces_the_suites_driver_of_its_broker(tmp_path, smoke):
    driver = write(tmp_path / "drivers" / "kafka-latency.yaml", OMB_KAFKA_DRIVER)
    plan = build_plan(smoke, {"driver_files": [driver]})
    by_broker = {i.broker: i.driver.name for i in plan.items}
    assert by_broker == {"kafka": "Kafka", "pulsar": "pulsar-default", "rabbitmq": "rabbitmq-default"}
    assert {i.key for i in plan.items if i.broker == "kafka"} == {
        "smoke-1-topic-1-partition-100b/Kafka/fsync-off", "smoke-1-topic-1-partition-100b/Kafka/fsync-on"}


@pytest.mark.parametrize("param, text, expected", [
    ("workload_files", None, "workload file {path} not found"),
    ("workload_files", "name: x\ntopics: [\n", "workload file {path} is invalid: {path}: invalid YAML"),
    ("workload_files", OMB_WORKLOAD.replace("partitionsPerTopic: 1", "partitionsPerTopic: 0"),
     "workload file {path} is invalid: {path}: field 'partitionsPerTopic': must be >= 1"),
    ("driver_files", None, "driver file {path} not found"),
    ("driver_files", "name: k\n", "driver file {path} is invalid: {path}: field 'driverClass': is required"),
])
def test_a_missing_or_bad_file_names_the_path_and_the_param(tmp_path, smoke, param, text, expected):
    path = tmp_path / "somewhere" / "file.yaml"
    if text is not None:
        write(path, text)
    with pytest.raises(SpecError) as e:
        build_plan(smoke, {param: [str(path)]})
    assert e.value.field == param and e.value.file is None
    assert e.value.message.startswith(expected.format(path=path))
    # the command line's check says the same before anything starts
    with pytest.raises(SpecError) as e2:
        conf_with_files({}, **{"workloads" if param == "workload_files" else "drivers": [str(path)]})
    assert str(e2.value) == str(e.value)


def test_a_relative_path_in_the_params_is_refused(smoke):
    with pytest.raises(SpecError, match="'w.yaml' is not an absolute path") as e:
        build_plan(smoke, {"workload_files": ["w.yaml"]})
    assert e.value.field == "workload_files"


def test_a_driver_for_a_broker_the_run_leaves_out_or_two_for_one_broker_are_refused(tmp_path, smoke):
    driver = write(tmp_path / "k1.yaml", OMB_KAFKA_DRIVER)
    with pytest.raises(SpecError, match=f"driver file {driver} drives kafka, which this run does not benchmark"):
        build_plan(smoke, {"driver_files": [driver], "brokers": ["pulsar"]})
    other = write(tmp_path / "k2.yaml", OMB_KAFKA_DRIVER.replace("linger.ms=1", "linger.ms=5"))
    with pytest.raises(SpecError, match=f"driver files {driver} and {other} both drive kafka") as e:
        build_plan(smoke, {"driver_files": [driver, other]})
    assert e.value.field == "driver_files"


def test_conf_with_files_makes_paths_absolute_and_keeps_the_rest(tmp_path, monkeypatch):
    write(tmp_path / "w.yaml", OMB_WORKLOAD)
    write(tmp_path / "d" / "kafka.yaml", OMB_KAFKA_DRIVER)
    monkeypatch.chdir(tmp_path)
    conf = conf_with_files({"brokers": ["kafka"]}, workloads=["w.yaml"], drivers=["d/kafka.yaml"])
    assert conf == {"brokers": ["kafka"], "workload_files": [str(tmp_path / "w.yaml")],
                    "driver_files": [str(tmp_path / "d" / "kafka.yaml")]}
    assert conf_with_files({"brokers": ["kafka"]}) == {"brokers": ["kafka"]}


def test_bench_refuses_a_missing_workload_file_before_starting_airflow(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert cli.main(["bench", "--suite", "smoke", "--workload", str(missing)]) == cli.EXIT_REFUSED
    assert f"brokerbench: field 'workload_files': workload file {missing} not found" in capsys.readouterr().err


def test_two_brokers_drivers_of_one_name_are_refused(tmp_path, smoke):
    """A driver's name files its results (raw/<workload>/<driver>/<variant>/): one name, one broker."""
    driver = write(tmp_path / "k.yaml", OMB_KAFKA_DRIVER.replace("name: Kafka", "name: pulsar-default"))
    with pytest.raises(SpecError, match="the drivers of kafka .* and pulsar .* are both named 'pulsar-default'") as e:
        build_plan(smoke, {"driver_files": [driver]})
    assert e.value.field == "driver_files"
