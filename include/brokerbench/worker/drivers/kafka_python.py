"""Kafka protocol through kafka-python (pure Python)."""

from __future__ import annotations

import threading
import time
from importlib.metadata import version
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import IllegalStateError, KafkaError, KafkaTimeoutError, TopicAlreadyExistsError
from typing_extensions import override

from brokerbench.worker.drivers.base import (
    Consumer,
    Driver,
    FlagPausedConsumer,
    PayloadHandler,
    Producer,
    parse_properties,
)

# Java client property -> kafka-python keyword, for the settings that matter.
_PRODUCER_KEYS = {
    "acks": "acks", "linger.ms": "linger_ms", "batch.size": "batch_size",
    "compression.type": "compression_type", "max.in.flight.requests.per.connection":
    "max_in_flight_requests_per_connection", "buffer.memory": "buffer_memory",
    "max.request.size": "max_request_size", "retries": "retries",
    "request.timeout.ms": "request_timeout_ms", "enable.idempotence": "enable_idempotence",
}
_CONSUMER_KEYS = {
    "auto.offset.reset": "auto_offset_reset", "enable.auto.commit": "enable_auto_commit",
    "fetch.min.bytes": "fetch_min_bytes", "fetch.max.wait.ms": "fetch_max_wait_ms",
    "max.poll.records": "max_poll_records", "session.timeout.ms": "session_timeout_ms",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
}


#: librdkafka / Java security property -> kafka-python keyword (an external cluster's connection)
_SECURITY_KEYS = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
                  "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
                  "ssl.ca.location": "ssl_cafile"}


def security_kwargs(client_config: dict[str, str]) -> dict[str, Any]:
    """kafka-python's keywords for the endpoint's security properties (others are not kafka-python's)."""
    out: dict[str, Any] = {_SECURITY_KEYS[k]: v for k, v in client_config.items() if k in _SECURITY_KEYS}
    if client_config.get("ssl.endpoint.identification.algorithm", "https").lower() in ("none", ""):
        out["ssl_check_hostname"] = False
    return out


def _typed(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(v)
    except ValueError:
        return v


def _kwargs(props: dict[str, str], mapping: dict[str, str]) -> dict[str, Any]:
    out = {}
    for k, v in props.items():
        if k in mapping:
            out[mapping[k]] = v if k in ("acks",) and not v.lstrip("-").isdigit() else _typed(v)
    if "acks" in out and isinstance(out["acks"], str) and out["acks"] != "all":
        out["acks"] = int(out["acks"])
    return out


class _KafkaProducer(Producer):
    def __init__(self, producer: KafkaProducer, topic: str, recorder):
        self._p = producer
        self._topic = topic
        self._rec = recorder

    def send(self, payload: bytes, key: bytes | None, send_ns: int) -> None:
        fut = self._p.send(self._topic, value=payload, key=key)
        fut.add_callback(self._ack, send_ns)
        fut.add_errback(self._rec.error)

    def _ack(self, send_ns: int, _metadata: Any) -> None:
        self._rec.s.publish_ns.append(time.time_ns() - send_ns)

    def flush(self, timeout_s: float = 10.0) -> None:
        try:
            self._p.flush(timeout=timeout_s)
        except KafkaTimeoutError:  # what is still unacknowledged is counted by the caller, as with the other drivers
            pass

    def close(self) -> None:
        self._p.close(timeout=5)


#: the longest one position lookup of a new assignment blocks the consumer's thread (it tries again after its
#: next poll): unbounded, a lookup the coordinator never answered left a consumer that never read nor became ready
POSITION_TIMEOUT_MS = 2000


class _KafkaConsumer(FlagPausedConsumer):
    # set by the rebalance listener (on kafka-python's IO thread) under _lock, read by the consumer's own thread
    _assigned = False  # holds its partitions of the group's current generation, positions resolved
    _pending: tuple[int, set] | None = None  # (generation, partitions) of an assignment whose positions to fix
    _generation = 0  # assignments and revocations so far
    _lock: threading.Lock  # set before the subscription (create_consumer): the listener may use it first

    def __init__(self, consumer: KafkaConsumer, on_payload: PayloadHandler, paused: bool = False):
        self._c = consumer
        self.on_payload = on_payload
        self._want_paused = paused
        self._start_polling(self._loop, "kafka-consumer")

    def assigned(self, partitions) -> None:
        """The rebalance listener's news (IO thread): partitions assigned (None: revoked)."""
        with self._lock:
            self._generation += 1
            self._pending = None if partitions is None else (self._generation, set(partitions))
            self._assigned = False

    def _loop(self) -> None:
        poll = self._c.poll
        c = self._c
        while not self._stop.is_set():
            # kafka-python is not thread-safe: pause / resume happen here
            if self._want_paused:
                if c.assignment() - c.paused():
                    c.pause(*c.assignment())
            elif c.paused():
                c.resume(*c.paused())
            for records in poll(timeout_ms=100).values():
                handle = self.on_payload
                for r in records:
                    handle(r.value)
            pending = self._pending
            if pending is not None:
                # fix the positions now (committed, else auto_offset_reset): resolved later, "latest" would skip
                # what was sent in between (the phase's first messages, or a paused consumer's backlog)
                generation, partitions = pending
                try:
                    fixed = all(c.position(tp, timeout_ms=POSITION_TIMEOUT_MS) is not None for tp in partitions)
                except IllegalStateError:  # revoked meanwhile: the listener brings the next assignment
                    fixed = False
                except KafkaError:  # the coordinator or a leader did not answer: again after the next poll
                    fixed = False
                if fixed:
                    with self._lock:
                        if self._pending is pending:  # not revoked or assigned again meanwhile
                            self._pending = None
                            self._assigned = generation == self._generation

    def ready(self) -> bool:
        return self._assigned


class KafkaPythonDriver(Driver):
    client_library = "kafka-python"
    client_library_version = version("kafka-python")

    def __init__(self, endpoint, driver, recorder):
        super().__init__(endpoint, driver, recorder)
        self.bootstrap = self.endpoint.bootstrap_servers
        self.common = parse_properties(self.driver.common_config)
        self.common.pop("bootstrap.servers", None)
        self.security = security_kwargs(self.client_config)

    @override
    def prepare(self, topics: list[str], partitions: int, subscriptions: list[str]) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000, **self.security)
        try:
            configs = parse_properties(self.driver.topic_config)
            rf = self.driver.replication_factor
            new = [NewTopic(t, num_partitions=partitions, replication_factor=rf, topic_configs=configs)
                   for t in topics]
            try:
                admin.create_topics(new, timeout_ms=30000)
            except TopicAlreadyExistsError:
                pass
        finally:
            admin.close()

    @override
    def create_producer(self, topic: str, partitions: int) -> Producer:
        kw = _kwargs(parse_properties(self.driver.producer_config), _PRODUCER_KEYS)
        return _KafkaProducer(KafkaProducer(bootstrap_servers=self.bootstrap, **self.security, **kw), topic, self.recorder)

    @override
    def create_consumer(self, topic, subscription, partitions, on_payload, consumer_index=0,
                        consumers_in_subscription=1, start="latest", paused=False) -> Consumer:
        kw = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000, "enable_auto_commit": False,
              **_kwargs(parse_properties(self.driver.consumer_config), _CONSUMER_KEYS)}
        # "latest": earlier messages (a warm-up's) are not this phase's;
        # "earliest": catch-up reads and consumer-only read what the topic retains
        kw["auto_offset_reset"] = start
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=subscription, **self.security, **kw)
        consumer = _KafkaConsumer.__new__(_KafkaConsumer)
        consumer._want_paused = paused
        consumer._lock = threading.Lock()

        class _OnAssign(ConsumerRebalanceListener):
            # runs on kafka-python's IO thread, where blocking calls (position) are refused: the consumer's own
            # thread resolves the positions (Consumer.ready waits for that)
            def on_partitions_assigned(self, assigned):
                if consumer._want_paused and assigned:  # paused from the first assignment
                    c.pause(*assigned)
                consumer.assigned(assigned)

            def on_partitions_revoked(self, _revoked):
                consumer.assigned(None)

        c.subscribe([topic], listener=_OnAssign())
        consumer.__init__(c, on_payload, paused)  # type: ignore[misc]  # built with __new__ above
        return consumer
