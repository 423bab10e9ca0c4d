"""Broker drivers, imported lazily so a client host needs only its broker's library."""

from __future__ import annotations

import importlib

from brokerbench.worker.drivers.base import Driver

#: (broker, library) -> "module:class". The first library listed per broker is its default.
DRIVERS = {
    ("kafka", "kafka-python"): "brokerbench.worker.drivers.kafka_python:KafkaPythonDriver",
    ("kafka", "confluent-kafka"): "brokerbench.worker.drivers.confluent:ConfluentKafkaDriver",
    # the JVM engine (brokerbench.worker.jvm): the Java client, run in a JVM
    ("kafka", "kafka-clients-java"): "brokerbench.worker.drivers.java:KafkaJavaDriver",
    ("pulsar", "pulsar-client"): "brokerbench.worker.drivers.pulsar_client:PulsarClientDriver",
    # the JVM engine (brokerbench.worker.jvm): the Java client, run in a JVM
    ("pulsar", "pulsar-client-java"): "brokerbench.worker.drivers.java:PulsarJavaDriver",
    ("rabbitmq", "pika"): "brokerbench.worker.drivers.pika_amqp:PikaDriver",
    # the JVM engine (brokerbench.worker.jvm): the Java client, run in a JVM
    ("rabbitmq", "amqp-client-java"): "brokerbench.worker.drivers.java:RabbitJavaDriver",
}


def driver_class(broker: str, library: str | None = None) -> type[Driver]:
    for (b, lib), target in DRIVERS.items():
        if b == broker and (library is None or lib == library):
            module, cls = target.split(":")
            return getattr(importlib.import_module(module), cls)
    known = ", ".join(f"{b}/{lib}" for b, lib in DRIVERS)
    raise ValueError(f"no driver for broker {broker!r} with library {library!r} (known: {known})")
