"""RabbitMQ (AMQP 0-9-1) through pika.

Topology (Confluent's mapping of OMB onto RabbitMQ): one exchange per topic;
for every subscription one queue per partition, bound with the partition
number as routing key. A producer spreads messages over the partitions'
routing keys (by key when the workload has keys, round robin otherwise);
consumers of a subscription share its queues.

The driver setting ``exchangeType`` picks the exchange: DIRECT (default, exact
routing-key match), TOPIC (the same bindings through the topic exchange's
pattern matching, which costs the broker more: Confluent measured both) or
FANOUT (every bound queue gets every message, so only with one partition per
topic: one queue per subscription, OMB's original RabbitMQ topology).

Publishing uses an asynchronous connection with publisher confirms: publish
latency is the time from handing the message over to the broker's confirm.
pika connections are not thread-safe: the thread that sends also serves the
connection's I/O loop (while it waits for its next send), see _AmqpProducer.
"""

from __future__ import annotations

import threading
import time
import zlib
from importlib.metadata import version
from typing import Any

import pika
from pika.adapters.select_connection import IOLoop
from pika.spec import Basic

from brokerbench.worker.drivers.base import (
    Consumer,
    Driver,
    FlagPausedConsumer,
    PayloadHandler,
    Producer,
    expand_secrets,
)
from brokerbench.worker.job import JobDriver


def queue_name(topic: str, subscription: str, partition: int) -> str:
    return f"{topic}.{subscription}.{partition}"


EXCHANGE_TYPES = ("DIRECT", "TOPIC", "FANOUT")


def exchange_type(driver: JobDriver, partitions: int) -> str:
    """The driver's exchangeType as pika names it; FANOUT needs one partition."""
    et = str(driver.exchange_type or "DIRECT").upper()
    if et not in EXCHANGE_TYPES:
        raise ValueError(f"exchangeType {et!r} is not one of {', '.join(EXCHANGE_TYPES)}")
    if et == "FANOUT" and partitions != 1:
        raise ValueError(f"exchangeType FANOUT sends every message to every queue: it needs partitionsPerTopic 1 "
                         f"(got {partitions}); use DIRECT or TOPIC to spread messages over partitions")
    return et.lower()


def queue_arguments(queue_type: str) -> dict[str, Any]:
    qt = queue_type.upper()
    if qt == "CLASSIC":
        return {}
    if qt in ("QUORUM", "STREAM"):
        return {"x-queue-type": qt.lower()}
    raise ValueError(f"queueType {queue_type!r} is not one of CLASSIC, QUORUM, STREAM")


#: the longest a published frame waits in pika's buffer while the producer is behind its schedule, s
WRITE_EVERY_S = 0.001


def _nothing() -> None:
    """A timer's callback whose only job is to bound the I/O loop's wait."""


class _AmqpProducer(Producer):
    """Publisher confirms on pika's asynchronous connection, whose I/O loop is served by the thread using the
    producer: there is no I/O thread.

    A pika connection is not thread-safe. Handing each message to an I/O-loop thread made the two threads take
    turns on the interpreter lock: at 10,000 msg/s, 10.6 ms publish p50 against 0.33 ms for pika's own loop on
    one thread (bench/library_latency.py). So ``send`` publishes and lets the loop write the frame out at once,
    ``idle`` (the schedule's wait for the next send) serves the loop - the broker's confirms - until the next
    send is due, and ``flush`` / ``close`` serve it until they are done. One thread at a time uses a producer
    (the schedule's thread during the phase, the worker's before and after it); a lock makes sure of it.
    """

    def __init__(self, uri: str, exchange: str, partitions: int, persistent: bool, recorder,
                 max_outstanding: int = 10000, connect_timeout_s: float = 30.0):
        self._rec = recorder
        self._max_outstanding = max_outstanding
        self._exchange = exchange
        self._keys = [str(p) for p in range(partitions)]
        self._rr = 0
        self._props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
        self._pending: dict[int, int] = {}  # delivery tag -> send_ns
        self._tag = 0
        self._lowest = 1
        self._closed_reason: str | None = None
        self._ch: Any = None  # the confirm channel, once open
        self._lock = threading.RLock()
        self._served = 0.0  # when the I/O loop was last served (time.monotonic)
        self._loop = IOLoop()
        self._loop.activate_poller()
        self._conn = pika.SelectConnection(
            pika.URLParameters(uri), on_open_callback=self._on_open, on_open_error_callback=self._on_error,
            on_close_callback=self._on_close, custom_ioloop=self._loop)
        deadline = time.monotonic() + connect_timeout_s
        with self._lock:
            while self._ch is None and self._closed_reason is None and time.monotonic() < deadline:
                self._serve(0.1)
        if self._ch is None:
            self._loop.close()
            raise RuntimeError(f"RabbitMQ at {uri}: no confirm channel within {connect_timeout_s:g} s: "
                               f"{self._closed_reason}")

    def _serve(self, seconds: float) -> None:
        """Serve the I/O loop once: write what is queued, read what arrived (confirms), waiting at most
        ``seconds`` for something to happen (0: only what is ready now)."""
        timer = self._loop.call_later(seconds, _nothing)
        self._loop.poll()
        self._loop.process_timeouts()
        if timer.callback is not None:  # something else ended the wait
            self._loop.remove_timeout(timer)
        self._served = time.monotonic()

    # -- connection callbacks (run inside _serve) ---------------------------
    def _on_open(self, conn) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, ch) -> None:
        ch.confirm_delivery(self._on_confirm, callback=lambda _frame: self._set_ready(ch))

    def _set_ready(self, ch) -> None:
        self._ch = ch

    def _on_error(self, _conn, err) -> None:
        self._closed_reason = str(err)

    def _on_close(self, _conn, reason) -> None:
        self._closed_reason = str(reason)
        for _ in range(len(self._pending)):
            self._rec.error(f"connection closed: {reason}")
        self._pending.clear()

    def _on_confirm(self, frame) -> None:
        now = time.time_ns()
        m = frame.method
        ok = isinstance(m, Basic.Ack)
        tags = range(self._lowest, m.delivery_tag + 1) if m.multiple else (m.delivery_tag,)
        pending = self._pending
        publish_ns = self._rec.s.publish_ns
        for t in tags:
            ns = pending.pop(t, None)
            if ns is None:
                continue
            if ok:
                publish_ns.append(now - ns)
            else:
                self._rec.error("nack from broker")
        while self._lowest <= self._tag and self._lowest not in pending:
            self._lowest += 1

    # -- the thread using the producer ----------------------------------------
    def send(self, payload: bytes, key: bytes | None, send_ns: int) -> None:
        if key is None:
            self._rr += 1
            rk = self._keys[self._rr % len(self._keys)]
        else:
            rk = self._keys[zlib.crc32(key) % len(self._keys)]
        with self._lock:
            pending = self._pending
            # publisher flow control, like Pulsar's blockIfQueueFull: the wait shows as publish delay
            while len(pending) >= self._max_outstanding and self._closed_reason is None:
                self._serve(0.001)
            if self._closed_reason is not None:
                raise RuntimeError(f"RabbitMQ connection closed: {self._closed_reason}")
            self._tag += 1
            pending[self._tag] = send_ns
            self._ch.basic_publish(self._exchange, rk, payload, self._props)
            # the frame goes out when the loop is next served: in idle() right after this send when the schedule
            # is ahead; behind it (no idle), at least every WRITE_EVERY_S
            if time.monotonic() - self._served >= WRITE_EVERY_S:
                self._serve(0)

    def idle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        with self._lock:
            while self._closed_reason is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._serve(left)
        time.sleep(max(0.0, deadline - time.monotonic()))  # closed: nothing to serve

    def flush(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending and self._closed_reason is None and time.monotonic() < deadline:
                self._serve(min(0.01, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        with self._lock:
            if self._closed_reason is None:
                try:
                    self._conn.close()
                except Exception:
                    pass
                deadline = time.monotonic() + 10
                while self._closed_reason is None and time.monotonic() < deadline:
                    self._serve(0.05)
            self._loop.close()


class _AmqpConsumer(FlagPausedConsumer):
    """A blocking connection served by its own thread; pause = cancel the consumers."""

    def __init__(self, uri: str, queues: list[str], on_payload: PayloadHandler, auto_ack: bool,
                 stream_offset: str | None = None, paused: bool = False, prefetch: int = 1000):
        self.on_payload = on_payload
        self._conn = pika.BlockingConnection(pika.URLParameters(uri))
        self._ch = self._conn.channel()
        self._auto_ack = auto_ack
        self._queues = queues
        self._args = {"x-stream-offset": stream_offset} if stream_offset else None
        if not auto_ack:
            self._ch.basic_qos(prefetch_count=prefetch)
        self._tags: list[str] = []
        self._want_paused = paused
        self.error: str | None = None
        if not paused:
            self._consume()
        self._start_polling(self._run, "amqp-consumer")

    def _consume(self) -> None:
        self._tags = [self._ch.basic_consume(q, self._on_message, auto_ack=self._auto_ack, arguments=self._args)
                      for q in self._queues]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._want_paused and self._tags:
                    for t in self._tags:
                        self._ch.basic_cancel(t)
                    self._tags = []
                elif not self._want_paused and not self._tags:
                    self._consume()
                self._conn.process_data_events(time_limit=0.1)
        except Exception as e:  # connection lost: the worker sees received counts stop
            self.error = str(e)

    def _on_message(self, ch, method, _props, body) -> None:
        self.on_payload(body)
        if not self._auto_ack and method.delivery_tag % 100 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    def close(self) -> None:
        self._stop.set()
        self._t.join(timeout=10)
        try:
            self._conn.close()
        except Exception:
            pass


class PikaDriver(Driver):
    client_library = "pika"
    client_library_version = version("pika")

    def __init__(self, endpoint, driver, recorder):
        super().__init__(endpoint, driver, recorder)
        # an external cluster's URI names its password as a secret reference
        self.uris = [expand_secrets(u) for u in (self.endpoint.amqp_uris or self.driver.amqp_uris)]
        if not self.uris:
            raise ValueError("RabbitMQ endpoint has no amqp_uris")
        self.queue_type = self.driver.queue_type.upper()
        self.persistent = self.driver.message_persistence
        self._n = 0

    def _uri(self) -> str:
        self._n += 1
        return self.uris[self._n % len(self.uris)]

    def prepare(self, topics: list[str], partitions: int, subscriptions: list[str]) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(self.uris[0]))
        try:
            ch = conn.channel()
            durable = self.persistent or self.queue_type != "CLASSIC"
            args = queue_arguments(self.queue_type)
            kind = exchange_type(self.driver, partitions)
            for t in topics:
                ch.exchange_declare(t, exchange_type=kind, durable=durable)
                for s in subscriptions:
                    for p in range(partitions):
                        q = queue_name(t, s, p)
                        ch.queue_declare(q, durable=durable, arguments=args)
                        ch.queue_bind(q, t, routing_key=str(p))
        finally:
            conn.close()

    def create_producer(self, topic: str, partitions: int) -> Producer:
        return _AmqpProducer(self._uri(), topic, partitions, self.persistent, self.recorder,
                             max_outstanding=self.driver.max_outstanding_confirms)

    def create_consumer(self, topic, subscription, partitions, on_payload, consumer_index=0,
                        consumers_in_subscription=1, start="latest", paused=False) -> Consumer:
        queues = [queue_name(topic, subscription, p) for p in range(partitions)
                  if p % consumers_in_subscription == consumer_index % consumers_in_subscription]
        if not queues:
            raise ValueError(f"consumer {consumer_index} of {subscription} has no queue: "
                             f"{consumers_in_subscription} consumers > {partitions} partitions")
        # Queues keep what they were sent since `prepare` declared them: "start"
        # only matters for streams, which are read from an offset.
        stream = self.queue_type == "STREAM"
        return _AmqpConsumer(self._uri(), queues, on_payload, auto_ack=not stream,
                             stream_offset=("first" if start == "earliest" else "next") if stream else None,
                             paused=paused)
