"""Every shipped driver file loads in OMB itself (openmessaging/benchmark), not only in brokerbench.

OMB reads a driver file with Jackson into its driver's config class and ignores unknown keys, so a file
loads as long as each key its driver reads without a default is there, with the type Java reads it as. The
table below is that list, per driver, from OMB's sources (master):

* every driver - ``benchmark-framework/src/main/java/io/openmessaging/benchmark/DriverConfiguration.java``
  (``name``, ``driverClass``; ``worker/LocalWorker.java`` loads ``Class.forName(driverClass)``);
* Kafka - ``driver-kafka/src/main/java/io/openmessaging/benchmark/driver/kafka/KafkaBenchmarkDriver.java``
  ``initialize``: ``Properties.load(new StringReader(config.commonConfig))``, and the same for
  ``producerConfig``, ``consumerConfig`` and ``topicConfig`` (``Config.java``: Strings, null when absent: a
  NullPointerException); ``replicationFactor`` is a ``short`` that defaults to 0, which topic creation refuses;
* Pulsar - ``driver-pulsar/src/main/java/io/openmessaging/benchmark/driver/pulsar/PulsarBenchmarkDriver.java``
  ``initialize``: ``client.serviceUrl`` and ``client.httpUrl`` (the client and admin builders, ``startsWith``),
  ``client.namespacePrefix.split("/")`` (the tenant) and ``client.clusterName`` (the tenant's allowed cluster);
  ``config/PulsarClientConfig.java`` leaves those four null, every other key has a default;
* RabbitMQ - ``driver-rabbitmq/src/main/java/io/openmessaging/benchmark/driver/rabbitmq/RabbitMqBenchmarkDriver.java``
  ``getTopicNamePrefix``: ``amqpUris.get(i % amqpUris.size())`` (``RabbitMqConfig.java``: an empty list by
  default, so a division by zero); the rest has defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from brokerbench.spec import load_driver
from brokerbench.spec.common import list_names, resolve
from brokerbench.spec.driver import broker_of_class
from brokerbench.spec.variant import apply_variant, load_variant

TEXT = "text"  # a Java String
SHORT = "positive whole number"  # a Java short, >= 1
URI_LIST = "non-empty list of URIs"
TENANT_NAMESPACE = "text '<tenant>/<namespace>'"

#: OMB's keys without a usable default, per broker (dotted: a key of a section), and how OMB reads each
OMB_REQUIRED: dict[str, dict[str, str]] = {
    "any": {"name": TEXT, "driverClass": TEXT},
    "kafka": {"replicationFactor": SHORT, "commonConfig": TEXT, "producerConfig": TEXT, "consumerConfig": TEXT,
              "topicConfig": TEXT},
    "pulsar": {"client.serviceUrl": TEXT, "client.httpUrl": TEXT, "client.namespacePrefix": TENANT_NAMESPACE,
               "client.clusterName": TEXT},
    "rabbitmq": {"amqpUris": URI_LIST},
}


def omb_problems(doc: dict[str, Any]) -> list[str]:
    """What keeps OMB's driver from loading ``doc`` (a driver file as OMB reads it): one line per key."""
    broker = broker_of_class(str(doc.get("driverClass") or ""))
    problems = []
    for key, kind in {**OMB_REQUIRED["any"], **OMB_REQUIRED.get(str(broker), {})}.items():
        value: Any = doc
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        ok = {TEXT: isinstance(value, str),
              SHORT: isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 32767,
              URI_LIST: isinstance(value, list) and bool(value) and all(isinstance(u, str) for u in value),
              TENANT_NAMESPACE: isinstance(value, str) and value.count("/") == 1 and all(value.split("/"))}[kind]
        if not ok:
            problems.append(f"{key}: OMB needs a {kind} (got {value!r})")
    return problems


DRIVERS = list_names("drivers")


def test_the_table_finds_what_the_issue_found():
    """Before this change kafka-latency.yaml had no topicConfig and pulsar-default.yaml no namespacePrefix or
    clusterName: the check names exactly those."""
    kafka = yaml.safe_load(resolve("drivers", "kafka-latency").read_text())
    pulsar = yaml.safe_load(resolve("drivers", "pulsar-default").read_text())
    del kafka["topicConfig"], pulsar["client"]["namespacePrefix"], pulsar["client"]["clusterName"]
    assert [p.split(":")[0] for p in omb_problems(kafka)] == ["topicConfig"]
    assert [p.split(":")[0] for p in omb_problems(pulsar)] == ["client.namespacePrefix", "client.clusterName"]
    # OMB reads a Kafka block as a String: brokerbench's mapping form would not load there
    assert omb_problems({**kafka, "topicConfig": {"flush.messages": "1"}})[0].startswith("topicConfig: ")


@pytest.mark.parametrize("name", DRIVERS)
def test_every_shipped_driver_file_has_the_keys_omb_needs(name):
    doc = yaml.safe_load(resolve("drivers", name).read_text())
    assert broker_of_class(doc["driverClass"]) in ("kafka", "pulsar", "rabbitmq")
    assert omb_problems(doc) == []


@pytest.mark.parametrize("name", DRIVERS)
def test_the_driver_a_run_records_loads_in_omb_under_every_variant(name):
    """``to_omb_dict`` (the provenance's drivers, the workers' jobs) keeps the keys, also empty Kafka blocks and
    the variants' topic configs, which it writes as properties text."""
    driver = load_driver(name)
    assert omb_problems(driver.to_omb_dict()) == []
    for variant in list_names("variants"):
        assert omb_problems(apply_variant(driver, load_variant(variant)).to_omb_dict()) == [], variant
    if driver.broker == "kafka":
        on = apply_variant(driver, load_variant("fsync-on")).to_omb_dict()
        assert "flush.messages=1\n" in on["topicConfig"]
