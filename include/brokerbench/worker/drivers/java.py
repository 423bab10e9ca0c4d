"""The JVM engine's libraries as drivers: they name the library and version result rows record, and prepare
topics and subscriptions with the broker's Python driver (the same admin calls); the load itself runs in the
JVM engine (brokerbench.worker.jvm: the runner hands it every job whose driver's ``engine`` is ``jvm``), never
through these classes."""

from __future__ import annotations

from typing import Any

from brokerbench.worker import jvm
from brokerbench.worker.drivers.base import Consumer, Producer
from brokerbench.worker.drivers.confluent import ConfluentKafkaDriver
from brokerbench.worker.drivers.pika_amqp import PikaDriver
from brokerbench.worker.drivers.pulsar_client import PulsarClientDriver


class _InJvm:
    """A Python driver whose topics, queues and probes stay Python's while its producers and consumers run in the
    JVM engine: the worker never asks it for one."""

    engine = "jvm"

    def create_producer(self, *_args: Any, **_kwargs: Any) -> Producer:
        raise RuntimeError(f"{type(self).__name__}'s load runs in the JVM engine (brokerbench.worker.jvm)")

    def create_consumer(self, *_args: Any, **_kwargs: Any) -> Consumer:
        raise RuntimeError(f"{type(self).__name__}'s load runs in the JVM engine (brokerbench.worker.jvm)")


class PulsarJavaDriver(_InJvm, PulsarClientDriver):
    """Pulsar's Java client (org.apache.pulsar:pulsar-client-original) in the JVM engine."""

    client_library = jvm.JVM_LIBRARIES["pulsar"][0]
    client_library_version = jvm.library_version("pulsar")


class KafkaJavaDriver(_InJvm, ConfluentKafkaDriver):
    """Kafka's Java client (org.apache.kafka:kafka-clients) in the JVM engine; topics created by confluent-kafka."""

    client_library = jvm.JVM_LIBRARIES["kafka"][0]
    client_library_version = jvm.library_version("kafka")


class RabbitJavaDriver(_InJvm, PikaDriver):
    """RabbitMQ's Java client (com.rabbitmq:amqp-client) in the JVM engine; exchanges and queues declared by pika."""

    client_library = jvm.JVM_LIBRARIES["rabbitmq"][0]
    client_library_version = jvm.library_version("rabbitmq")
