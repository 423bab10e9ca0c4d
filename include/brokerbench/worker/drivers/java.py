"""The JVM engine's libraries as drivers: they name the library and version result rows record, and prepare
topics and subscriptions with the broker's Python driver (the same admin calls); the load itself runs in the
JVM engine (brokerbench.worker.jvm: the runner hands it every job whose driver's ``engine`` is ``jvm``), never
through these classes."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from brokerbench.worker import jvm
from brokerbench.worker.drivers.base import Consumer, Producer
from brokerbench.worker.drivers.confluent import ConfluentKafkaDriver
from brokerbench.worker.drivers.pika_amqp import PikaDriver
from brokerbench.worker.drivers.pulsar_client import PulsarClientDriver


def _not_here(driver: object) -> RuntimeError:
    return RuntimeError(f"{type(driver).__name__}'s load runs in the JVM engine (brokerbench.worker.jvm)")


class PulsarJavaDriver(PulsarClientDriver):
    """Pulsar's Java client (org.apache.pulsar:pulsar-client-original) in the JVM engine."""

    engine = "jvm"
    client_library = jvm.JVM_LIBRARIES["pulsar"][0]
    client_library_version = jvm.library_version("pulsar")

    @override
    def create_producer(self, *_args: Any, **_kwargs: Any) -> Producer:
        raise _not_here(self)

    @override
    def create_consumer(self, *_args: Any, **_kwargs: Any) -> Consumer:
        raise _not_here(self)


class KafkaJavaDriver(ConfluentKafkaDriver):
    """Kafka's Java client (org.apache.kafka:kafka-clients) in the JVM engine; topics created by confluent-kafka."""

    engine = "jvm"
    client_library = jvm.JVM_LIBRARIES["kafka"][0]
    client_library_version = jvm.library_version("kafka")

    @override
    def create_producer(self, *_args: Any, **_kwargs: Any) -> Producer:
        raise _not_here(self)

    @override
    def create_consumer(self, *_args: Any, **_kwargs: Any) -> Consumer:
        raise _not_here(self)


class RabbitJavaDriver(PikaDriver):
    """RabbitMQ's Java client (com.rabbitmq:amqp-client) in the JVM engine; exchanges and queues declared by pika."""

    engine = "jvm"
    client_library = jvm.JVM_LIBRARIES["rabbitmq"][0]
    client_library_version = jvm.library_version("rabbitmq")

    @override
    def create_producer(self, *_args: Any, **_kwargs: Any) -> Producer:
        raise _not_here(self)

    @override
    def create_consumer(self, *_args: Any, **_kwargs: Any) -> Consumer:
        raise _not_here(self)
