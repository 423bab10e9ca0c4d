"""Every number and name in a spec file has a bound (brokerbench.spec.bounds): each field is accepted at its
bound, refused above it and refused as nan or infinity, and the refusal names the file, the field, the bound
and why. docs/specs.md lists the same bounds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from brokerbench.spec import (
    SPEC_ROOT,
    DriverSpec,
    SpecError,
    Workload,
    bounds,
    load_driver,
    load_suite,
    load_variant,
    load_workload,
)
from brokerbench.spec.common import deep_merge

KAFKA_CLASS = "io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver"
PULSAR_CLASS = "io.openmessaging.benchmark.driver.pulsar.PulsarBenchmarkDriver"

WORKLOAD = {"name": "t", "topics": 1, "partitionsPerTopic": 1, "messageSize": 100, "producerRate": 100,
            "testDurationMinutes": 1}
KAFKA_DRIVER = {"name": "d", "driverClass": KAFKA_CLASS}
PULSAR_DRIVER = {"name": "d", "driverClass": PULSAR_CLASS}
SUITE = {"name": "s", "workloads": ["smoke-1-topic-1-partition-100b"], "brokers": {"kafka": "kafka-latency"},
         "variants": ["fsync-off"]}
VARIANT: dict[str, Any] = {}


def nested(path: str, value: Any) -> dict[str, Any]:
    """{"a": {"b": value}} for "a.b"; a trailing "[]" puts the value in a one-item list."""
    head, _, rest = path.partition(".")
    if rest:
        return {head: nested(rest, value)}
    if head.endswith("[]"):
        return {head[:-2]: [value]}
    return {head: value}


class Case:
    """One bounded field: how to write a file of its kind with the field set to a value, and how its error names it."""

    def __init__(self, kind: str, path: str, base: dict[str, Any], extra_at_bound: dict[str, Any] | None = None,
                 field: str | None = None, text: bool = False,
                 value_of: Callable[[int | float], Any] | None = None):
        self.kind, self.path, self.base = kind, path, base
        self.extra_at_bound = extra_at_bound or {}
        self.field = field or path.replace("[]", "[0]")
        self.text = text  # a name or text: the bound is on its length
        self.value_of = value_of

    def data(self, value: Any, at_bound: bool) -> dict[str, Any]:
        data = deep_merge(self.base, nested(self.path, value))
        return deep_merge(data, self.extra_at_bound) if at_bound else data


def write_and_load(tmp_path: Path, kind: str, data: dict[str, Any]):
    if kind == "variant":  # a variant's name is its file name
        name = data.pop("name", "v")
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data) if data else "{}\n")
        return path, (lambda: load_variant(path))
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data))
    loader = {"workload": load_workload, "driver": load_driver, "suite": load_suite}[kind]
    return path, (lambda: loader(path))


RANDOMIZED = {"useRandomizedPayloads": True, "randomBytesRatio": 0.5}
QUORUMS = {"ensembleSize": 16, "writeQuorum": 16, "ackQuorum": 16}

#: every field a bound lists (bounds.Bound.fields) -> how to test it; products of fields are tested below
CASES: dict[str, Case] = {
    "workload.name": Case("workload", "name", WORKLOAD, text=True),
    "driver.name": Case("driver", "name", KAFKA_DRIVER, text=True),
    "variant.name": Case("variant", "name", VARIANT, text=True),
    "suite.name": Case("suite", "name", SUITE, text=True),
    "suite.tags[]": Case("suite", "tags[]", SUITE, text=True),
    "suite.description": Case("suite", "description", SUITE, text=True),
    "variant.description": Case("variant", "description", VARIANT, text=True),
    "variant.durabilityLevel": Case("variant", "durabilityLevel", VARIANT, text=True),
    "workload.topics": Case("workload", "topics", WORKLOAD),
    "workload.partitionsPerTopic": Case("workload", "partitionsPerTopic", WORKLOAD),
    "workload.producersPerTopic": Case("workload", "producersPerTopic", WORKLOAD),
    "workload.subscriptionsPerTopic": Case("workload", "subscriptionsPerTopic", WORKLOAD),
    "workload.consumerPerSubscription": Case("workload", "consumerPerSubscription", WORKLOAD),
    "workload.messageSize": Case("workload", "messageSize", WORKLOAD),
    "workload.randomizedPayloadPoolSize": Case("workload", "randomizedPayloadPoolSize", {**WORKLOAD, **RANDOMIZED}),
    "workload.producerRate": Case("workload", "producerRate", WORKLOAD),
    "workload.sweepRatesMsgS[]": Case("workload", "sweepRatesMsgS[]", WORKLOAD),
    "workload.sweepMaxPublishP99Ms": Case("workload", "sweepMaxPublishP99Ms", WORKLOAD),
    "workload.sweepRatesMsgS": Case("workload", "sweepRatesMsgS", WORKLOAD,
                                    value_of=lambda n: [1000.0] * int(n)),
    "workload.consumerBacklogSizeGB": Case("workload", "consumerBacklogSizeGB", WORKLOAD),
    "workload.backlogDrainRatio": Case("workload", "backlogDrainRatio", WORKLOAD),
    "workload.testDurationMinutes": Case("workload", "testDurationMinutes", WORKLOAD),
    "workload.warmupDurationMinutes": Case("workload", "warmupDurationMinutes", WORKLOAD),
    "driver.replicationFactor": Case("driver", "replicationFactor", KAFKA_DRIVER),
    "driver.client.persistence.ensembleSize": Case("driver", "client.persistence.ensembleSize", PULSAR_DRIVER,
                                                   {"client": {"persistence": QUORUMS}}),
    "driver.client.persistence.writeQuorum": Case("driver", "client.persistence.writeQuorum", PULSAR_DRIVER,
                                                  {"client": {"persistence": QUORUMS}}),
    "driver.client.persistence.ackQuorum": Case("driver", "client.persistence.ackQuorum", PULSAR_DRIVER,
                                                {"client": {"persistence": QUORUMS}}),
    "driver.client.ioThreads": Case("driver", "client.ioThreads", PULSAR_DRIVER),
    "driver.client.connectionsPerBroker": Case("driver", "client.connectionsPerBroker", PULSAR_DRIVER),
    "driver.producer.batchingMaxPublishDelayMs": Case("driver", "producer.batchingMaxPublishDelayMs", PULSAR_DRIVER),
    "driver.producer.batchingMaxBytes": Case("driver", "producer.batchingMaxBytes", PULSAR_DRIVER),
    "driver.producer.pendingQueueSize": Case("driver", "producer.pendingQueueSize", PULSAR_DRIVER),
    "driver.consumer.receiverQueueSize": Case("driver", "consumer.receiverQueueSize", PULSAR_DRIVER),
    "suite.intervalSeconds": Case("suite", "intervalSeconds", SUITE),
    "suite.trials": Case("suite", "trials", SUITE),
}
#: bounds on products of fields, or on a payload file's size: tested one by one below
SPECIAL = {"workload.topics x partitionsPerTopic",
           "workload.topics x (producersPerTopic + subscriptionsPerTopic x consumerPerSubscription)",
           "workload.randomizedPayloadPoolSize x messageSize", "workload.payloadFile (its size)",
           "params.instance_counts", "aws.counts"}

BOUNDED = [(b, f) for b in bounds.ALL for f in b.fields if f not in SPECIAL]
IDS = [f for _, f in BOUNDED]


def test_every_bounded_field_has_a_case_and_every_bound_a_field():
    listed = {f for b in bounds.ALL for f in b.fields}
    assert listed - SPECIAL == set(CASES), "a bound lists a field without a test case, or a case has no bound"
    assert SPECIAL <= listed
    assert all(b.reason and b.fields for b in bounds.ALL)
    assert len({b.name for b in bounds.ALL}) == len(bounds.ALL)
    assert all(getattr(bounds, b.name) is b for b in bounds.ALL)


def _at(bound: bounds.Bound, case: Case, above: bool) -> Any:
    n = bound.value + (1 if above else 0)
    if case.text:
        return "n" * int(n)
    return case.value_of(n) if case.value_of else n


@pytest.mark.parametrize("bound,field", BOUNDED, ids=IDS)
def test_a_field_at_its_bound_is_accepted(tmp_path, bound, field):
    case = CASES[field]
    _, load = write_and_load(tmp_path, case.kind, case.data(_at(bound, case, above=False), at_bound=True))
    load()


@pytest.mark.parametrize("bound,field", BOUNDED, ids=IDS)
def test_a_field_above_its_bound_is_refused_naming_file_field_bound_and_reason(tmp_path, bound, field):
    case = CASES[field]
    path, load = write_and_load(tmp_path, case.kind, case.data(_at(bound, case, above=True), at_bound=False))
    with pytest.raises(SpecError) as e:
        load()
    assert e.value.file == str(path)
    assert e.value.field == case.field, str(e.value)
    message = dict(e.value.errors)[case.field]
    assert f"must be <= {bound.text()} (got " in message and bound.reason in message


NUMERIC = [(b, f) for b, f in BOUNDED if not CASES[f].text and not CASES[f].value_of]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("bound,field", NUMERIC, ids=[f for _, f in NUMERIC])
def test_a_number_field_that_is_nan_or_infinite_is_refused(tmp_path, bound, field, value):
    case = CASES[field]
    path, load = write_and_load(tmp_path, case.kind, case.data(value, at_bound=False))
    assert ".nan" in path.read_text() or ".inf" in path.read_text()  # YAML's spelling reached the file
    with pytest.raises(SpecError) as e:
        load()
    assert (e.value.file, e.value.field) == (str(path), case.field)
    assert "must be a finite number" in str(e.value)


@pytest.mark.parametrize("field", [f for f, c in CASES.items()
                                   if c.text and c.path in ("name", "tags[]") and c.kind != "variant"])
@pytest.mark.parametrize("blank", ["", "   ", "\t"], ids=["empty", "spaces", "tab"])
def test_a_blank_name_is_refused(tmp_path, field, blank):
    case = CASES[field]
    path, load = write_and_load(tmp_path, case.kind, case.data(blank, at_bound=False))
    with pytest.raises(SpecError) as e:
        load()
    assert (e.value.file, e.value.field) == (str(path), case.field)
    assert "must not be blank" in str(e.value)


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_variant_name_is_refused(blank):
    """A variant file's name is its file name; one built in code is checked the same way."""
    from brokerbench.spec import Variant

    with pytest.raises(ValueError, match="must not be blank"):
        Variant.model_validate({"name": blank})


def test_the_reported_cases_are_refused_together(tmp_path):
    """The values of the report: each is refused, all in one message, each naming its field."""
    path = tmp_path / "w.yaml"
    path.write_text("name: t\ntopics: 1\npartitionsPerTopic: 100000\nmessageSize: 2000000000\n"
                    "producerRate: 1e12\ntestDurationMinutes: 1e9\n")
    with pytest.raises(SpecError) as e:
        load_workload(path)
    assert [f for f, _ in e.value.errors] == ["partitionsPerTopic", "messageSize", "producerRate",
                                             "testDurationMinutes"]
    assert "field 'producerRate': must be <= 10,000,000 msg/s (got 1000000000000)" in str(e.value)
    path.write_text("name: t\ntopics: 1\npartitionsPerTopic: 1\nmessageSize: 100\nproducerRate: .inf\n"
                    "testDurationMinutes: 1\n")
    with pytest.raises(SpecError, match="field 'producerRate': must be a finite number"):
        load_workload(path)


@pytest.mark.parametrize("changes, field, bound", [
    ({"topics": 1000, "partitionsPerTopic": 1001, "producersPerTopic": 1, "subscriptionsPerTopic": 1},
     "partitionsPerTopic", bounds.MAX_TOTAL_PARTITIONS),
    ({"topics": 1000, "producersPerTopic": 50, "subscriptionsPerTopic": 10, "consumerPerSubscription": 6},
     "topics", bounds.MAX_TOTAL_CLIENTS),
    ({**RANDOMIZED, "randomizedPayloadPoolSize": 1025, "messageSize": 1024 * 1024},
     "randomizedPayloadPoolSize", bounds.MAX_PAYLOAD_POOL_BYTES),
], ids=["total partitions", "total clients", "payload pool bytes"])
def test_products_of_fields_are_bounded(tmp_path, changes, field, bound):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({**WORKLOAD, **changes}))
    with pytest.raises(SpecError) as e:
        load_workload(path)
    assert (e.value.file, e.value.field) == (str(path), field)
    assert f"must be <= {bound.text()}" in str(e.value) and bound.reason in str(e.value)
    # one less is accepted
    key = {"partitionsPerTopic": "partitionsPerTopic", "topics": "consumerPerSubscription",
           "randomizedPayloadPoolSize": "randomizedPayloadPoolSize"}[field]
    path.write_text(yaml.safe_dump({**WORKLOAD, **changes, key: changes[key] - 1}))
    load_workload(path)


def test_suite_overrides_are_bounded_and_named(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "overrides": {"producerRate": 10**12}}))
    with pytest.raises(SpecError) as e:
        load_suite(path)
    assert (e.value.file, e.value.field) == (str(path), "overrides.producerRate")
    assert "must be <= 10,000,000 msg/s" in str(e.value)
    path.write_text(yaml.safe_dump({**SUITE, "overrides": {"testDurationMinutes": math.inf}}))
    with pytest.raises(SpecError, match="field 'overrides.testDurationMinutes': must be a finite number"):
        load_suite(path)


@pytest.mark.parametrize("kind, data, field", [
    ("variant", {"kafka": {"broker": {"log.flush.interval.ms": math.inf}}}, "kafka.broker.log.flush.interval.ms"),
    ("suite", {**SUITE, "environmentSettings": {"cost_cap_usd": math.nan}}, "environmentSettings.cost_cap_usd"),
    ("driver", {**KAFKA_DRIVER, "producerConfig": {"linger.ms": -math.inf}}, "producerConfig.linger.ms"),
])
def test_non_finite_numbers_are_refused_in_free_form_settings_too(tmp_path, kind, data, field):
    path, load = write_and_load(tmp_path, kind, dict(data))
    with pytest.raises(SpecError) as e:
        load()
    assert (e.value.file, e.value.field) == (str(path), field)
    assert "must be a finite number" in str(e.value)


def test_specs_built_in_code_refuse_non_finite_numbers_too():
    with pytest.raises(ValueError, match="finite_number"):
        Workload(name="n", topics=1, partitions_per_topic=1, message_size=64, producer_rate="inf",
                 test_duration_minutes=1)
    with pytest.raises(ValueError, match="finite_number"):
        DriverSpec.model_validate({**PULSAR_DRIVER, "client": {"ioThreads": math.nan}})


def test_suite_trials_bound_is_the_run_params_one():
    from brokerbench.spec.params import MAX_TRIALS

    assert bounds.MAX_TRIALS.value == MAX_TRIALS


def test_docs_list_every_bound():
    docs = (SPEC_ROOT.parent / "docs" / "specs.md").read_text()
    assert "\n## Bounds\n" in docs
    assert bounds.markdown_table() in docs
