"""OMB's standard payload file names resolve; a file with several bad fields reports them all."""

import hashlib

import pytest

from brokerbench.spec import SpecError, load_driver, load_workload
from brokerbench.spec.workload import omb_payload

OMB_WORKLOAD = """\
name: 1 topic / 16 partitions / 1kb
topics: 1
partitionsPerTopic: 16
messageSize: {size}
payloadFile: "payload/payload-{name}.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 50000
consumerBacklogSizeGB: 0
testDurationMinutes: 15
"""


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("name,size", [("20b", 20), ("100b", 100), ("200b", 200), ("400b", 400),
                                       ("1Kb", 1024), ("2Kb", 2048), ("4Kb", 4096)])
def test_omb_workloads_naming_omb_payload_files_load_unchanged(tmp_path, home, name, size):
    path = tmp_path / f"omb-{name}.yaml"
    path.write_text(OMB_WORKLOAD.format(size=size, name=name))
    w = load_workload(path)
    data = open(w.payload_path, "rb").read()
    assert len(data) == size
    assert w.payload_path == str(home / "payload" / f"payload-{name}.data")
    # the same bytes every time, on every machine
    assert data == hashlib.shake_256(f"payload-{name}.data".encode()).digest(size)
    assert omb_payload(f"payload/payload-{name}.data").read_bytes() == data


def test_a_payload_of_another_size_than_messageSize_is_refused(tmp_path):
    path = tmp_path / "mismatch.yaml"
    path.write_text(OMB_WORKLOAD.format(size=1024, name="100b"))
    with pytest.raises(SpecError, match="holds 100 bytes but messageSize is 1024") as e:
        load_workload(path)
    assert e.value.field == "payloadFile"


def test_other_missing_payload_files_are_still_refused(tmp_path):
    path = tmp_path / "custom.yaml"
    path.write_text(OMB_WORKLOAD.format(size=1024, name="custom").replace("payload-custom", "mine"))
    with pytest.raises(SpecError, match="not found"):
        load_workload(path)
    assert omb_payload("payload/mine.data") is None


def test_a_workload_with_several_bad_fields_reports_every_one(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(OMB_WORKLOAD.format(size=1024, name="1Kb")
                    .replace("topics: 1", "topics: 0").replace("partitionsPerTopic: 16", "partitionsPerTopic: -1")
                    .replace("producerRate: 50000", "producerRate: fast"))
    with pytest.raises(SpecError) as e:
        load_workload(path)
    fields = [f for f, _ in e.value.errors]
    assert fields == ["topics", "partitionsPerTopic", "producerRate"]
    text = str(e.value)
    assert e.value.field == "topics" and "bad.yaml: field 'topics': must be >= 1 (got 0)" in text
    assert "field 'partitionsPerTopic': must be >= 1 (got -1)" in text and "field 'producerRate'" in text


def test_a_driver_with_several_bad_fields_reports_every_one(tmp_path):
    path = tmp_path / "driver.yaml"
    path.write_text("name: d\ndriverClass: io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver\n"
                    "replicationFactor: 0\nreliability: sometimes\ntopicConfig: 3\n")
    with pytest.raises(SpecError) as e:
        load_driver(path)
    assert len(e.value.errors) >= 2, e.value.errors
    assert all(f"field '{f}'" in str(e.value) for f, _ in e.value.errors if f)
