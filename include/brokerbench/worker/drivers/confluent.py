"""Kafka protocol through confluent-kafka (librdkafka): brokerbench's fast Kafka path.

Hot path: ``fast_send`` is ``Producer.produce`` bound to the topic; the
delivery callback, set once in the configuration (no per-call closure),
appends ``Message.latency()`` (librdkafka's produce-to-delivery time, s) to
``recorder.s.publish_s``. Delivery callbacks run inside ``poll``, which the
producer calls throughout its waits for the schedule (``idle``: the latency
is read when the callback runs, so a report must not wait for the next
send), every 1,000 sends, and when librdkafka's queue is full.

OMB's Java properties (``producerConfig``, ``consumerConfig``,
``commonConfig``) are librdkafka properties already (acks, linger.ms,
batch.size, ...); a Java name librdkafka spells differently is renamed
(``fetch.max.wait.ms`` -> ``fetch.wait.max.ms``), and keys librdkafka does
not know are dropped with a warning. ``socket.nagle.disable`` is true unless
the driver file sets it (the Java client always disables Nagle's algorithm),
and so is the Java client's ``max.in.flight.requests.per.connection=5``
(librdkafka's own default, 1,000,000, lets one-message requests queue up on
a connection of a broker slower per request than ``linger.ms``).

The consumer takes what has arrived without waiting (``consume(1000, 0)``)
and otherwise waits for the next message with ``poll``: ``consume(n, t)``
returns only when it has n messages or t has passed, which would add up to t
to the end-to-end latency of every message at low rates.
"""

from __future__ import annotations

import logging
import re
import time
from importlib.metadata import version
from typing import Any

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic
from typing_extensions import override

from brokerbench.worker.drivers.base import (
    Consumer,
    Driver,
    FlagPausedConsumer,
    PayloadHandler,
    Producer,
    parse_properties,
)

log = logging.getLogger("brokerbench.worker")

#: Java-client-only properties with no librdkafka equivalent.
_JAVA_ONLY = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
              "buffer.memory", "max.block.ms", "partitioner.class", "interceptor.classes"}
#: Java client property -> librdkafka's name for the same setting
_LIBRDKAFKA_NAME = {"fetch.max.wait.ms": "fetch.wait.max.ms"}
_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')
#: librdkafka's names of the producer's bound on unanswered requests per broker connection
IN_FLIGHT_KEYS = ("max.in.flight.requests.per.connection", "max.in.flight")
#: the Java client's default of that bound (OMB's driver files are written for the Java client). librdkafka's own
#: default, 1,000,000, pipelines a request per linger.ms: a broker reads one request of a connection at a time, so
#: where a request takes longer than linger.ms (acks=all with flush.messages=1) the requests of one message each
#: queue up on the connection and the latency grows by seconds (docs/aws.md, the loopback fleet's fsync-on row);
#: with 5 the messages that arrive meanwhile wait in one batch, as with the Java client
JAVA_MAX_IN_FLIGHT = 5


def _clean(props: dict[str, str]) -> dict[str, str]:
    out = {}
    for k, v in props.items():
        if k in _JAVA_ONLY:
            log.warning("confluent-kafka: %s is a Java client setting; not applied", k)
            continue
        out[_LIBRDKAFKA_NAME.get(k, k)] = v
    return out


def _construct(factory, conf: dict[str, Any]):
    """``factory(conf)``; a property librdkafka refuses as unknown is dropped with a warning and the rest tried
    again (OMB's driver files are written for the Java client)."""
    conf = dict(conf)
    while True:
        try:
            return factory(conf)
        except KafkaException as e:
            unknown = _UNKNOWN.search(str(e))
            if not unknown or unknown.group(1) not in conf:
                raise
            log.warning("confluent-kafka: %s is not a librdkafka setting; not applied", unknown.group(1))
            del conf[unknown.group(1)]


class _CKProducer(Producer):
    def __init__(self, conf: dict[str, Any], topic: str, recorder):
        self._rec = recorder
        self._topic = topic
        conf = dict(conf, on_delivery=self._delivered)
        self._p = _construct(CKProducer, conf)
        produce, poll = self._p.produce, self._p.poll
        self._n = 0

        def fast_send(payload: bytes, key: bytes | None, _topic=topic) -> None:
            try:
                produce(_topic, payload, key)
            except BufferError:  # librdkafka's queue is full: serve deliveries until it fits
                while True:
                    poll(0.005)
                    try:
                        produce(_topic, payload, key)
                        break
                    except BufferError:
                        pass
            self._n += 1
            if self._n >= 1000:
                self._n = 0
                poll(0)

        self.fast_send = fast_send

    def _delivered(self, err, msg) -> None:
        if err is None:
            self._rec.s.publish_s.append(msg.latency())
        else:
            self._rec.error(err)

    @override
    def send(self, payload: bytes, key: bytes | None, send_ns: int) -> None:
        self.fast_send(payload, key)  # type: ignore[misc]  # set in __init__

    def idle(self, seconds: float) -> None:
        # serve delivery reports as they arrive while the schedule waits: Message.latency() is read in the delivery
        # callback (librdkafka's rd_clock() minus the produce time), so a report left for the next send would add
        # the wait to the publish latency, up to the send interval (5 ms at 200 msg/s). poll's timeout is whole
        # milliseconds, so the last part under one is slept (poll(0) there would spin)
        poll, clock = self._p.poll, time.monotonic
        deadline = clock() + seconds
        poll(0)
        while (left := deadline - clock()) >= 0.001:
            poll(left)
        if left > 0:
            time.sleep(left)

    def flush(self, timeout_s: float = 10.0) -> None:
        self._p.flush(timeout_s)

    def close(self) -> None:
        self._p.flush(5)


class _CKConsumer(FlagPausedConsumer):
    def __init__(self, conf: dict[str, Any], topic: str, on_payload: PayloadHandler, paused: bool):
        self.on_payload = on_payload
        self._earliest = conf.get("auto.offset.reset") == "earliest"
        self._c = _construct(CKConsumer, conf)
        self._want_paused = paused
        self._paused = False
        self._assigned = False  # holds its partitions of the group's current generation, positions fixed
        self._c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self._start_polling(self._loop, "ck-consumer")

    def _on_assign(self, consumer, partitions) -> None:
        # fix the positions now (committed, else the current end - or start for "earliest"): resolved later,
        # auto.offset.reset=latest would skip what was sent in between (the phase's first messages, or a
        # paused consumer's whole backlog when it resumes)
        committed = {(t.topic, t.partition): t.offset for t in consumer.committed(partitions, timeout=10)} \
            if partitions else {}
        for tp in partitions:
            off = committed.get((tp.topic, tp.partition), -1001)
            if off < 0:
                low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                off = low if self._earliest else high
            tp.offset = off
        consumer.assign(partitions)
        if self._want_paused:  # paused from the first assignment: nothing is fetched
            consumer.pause(partitions)
            self._paused = True
        self._assigned = True

    def _on_revoke(self, consumer, _partitions) -> None:
        self._assigned = False
        consumer.unassign()

    def ready(self) -> bool:
        return self._assigned

    def _loop(self) -> None:
        consume, poll = self._c.consume, self._c.poll
        while not self._stop.is_set():
            if self._want_paused != self._paused:
                parts = self._c.assignment()
                if parts:
                    (self._c.pause if self._want_paused else self._c.resume)(parts)
                    self._paused = self._want_paused
            # what has arrived, without waiting: consume(n, timeout) waits until it has n messages or the
            # timeout passed, which would add up to the timeout to every message's end-to-end latency at rates
            # below n per timeout; when nothing has arrived, poll returns with the next message as it comes
            msgs = consume(1000, 0)
            if not msgs:
                m = poll(0.1)
                msgs = [m] if m is not None else []
            handle = self.on_payload
            for m in msgs:
                if m.error() is None:
                    handle(m.value())  # type: ignore[arg-type]  # no error: a payload


class ConfluentKafkaDriver(Driver):
    client_library = "confluent-kafka"
    client_library_version = version("confluent-kafka")

    def __init__(self, endpoint, driver, recorder):
        super().__init__(endpoint, driver, recorder)
        # TCP_NODELAY, as Kafka's Java client always sets it: librdkafka leaves Nagle's algorithm on by default,
        # which holds small requests back behind delayed ACKs (tens of ms at low rates); a driver file may say
        # otherwise
        self.common = {"socket.nagle.disable": True, **_clean(parse_properties(self.driver.common_config))}
        self.common["bootstrap.servers"] = self.endpoint.bootstrap_servers
        self.common.update(self.client_config)  # librdkafka names already (security.protocol, sasl.*, ssl.*)

    @override
    def prepare(self, topics: list[str], partitions: int, subscriptions: list[str]) -> None:
        admin = _construct(AdminClient, self.common)
        configs = parse_properties(self.driver.topic_config)
        rf = self.driver.replication_factor
        futures = admin.create_topics([NewTopic(t, partitions, rf, config=configs) for t in topics],
                                      operation_timeout=30, request_timeout=30)
        for t, f in futures.items():
            try:
                f.result(timeout=60)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                    raise RuntimeError(f"creating topic {t}: {e}") from None

    @override
    def create_producer(self, topic: str, partitions: int) -> Producer:
        conf = {**self.common, **_clean(parse_properties(self.driver.producer_config))}
        if not set(IN_FLIGHT_KEYS) & set(conf):
            conf[IN_FLIGHT_KEYS[0]] = JAVA_MAX_IN_FLIGHT
        return _CKProducer(conf, topic, self.recorder)

    @override
    def create_consumer(self, topic, subscription, partitions, on_payload, consumer_index=0,
                        consumers_in_subscription=1, start="latest", paused=False) -> Consumer:
        conf = {**self.common, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                "enable.auto.commit": True, "fetch.wait.max.ms": 100,
                **_clean(parse_properties(self.driver.consumer_config)),
                "group.id": subscription, "auto.offset.reset": start}
        return _CKConsumer(conf, topic, on_payload, paused)
