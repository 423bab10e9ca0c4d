"""Pulsar protocol through pulsar-client (the C++ client's Python binding)."""

from __future__ import annotations

import functools
import json
import logging
import time
import urllib.error
import urllib.request
from importlib.metadata import version
from typing import Any

import pulsar
from typing_extensions import override

from brokerbench.worker.drivers.base import Consumer, Driver, PayloadHandler, Producer

_SUBSCRIPTION_TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "keyshared": pulsar.ConsumerType.KeyShared,
}


def topic_url(name: str) -> str:
    return name if "://" in name else f"persistent://public/default/{name}"


class _PulsarProducer(Producer):
    def __init__(self, producer: "pulsar.Producer", recorder):
        self._p = producer
        self._rec = recorder
        self._ok = pulsar.Result.Ok

    def send(self, payload: bytes, key: bytes | None, send_ns: int) -> None:
        if key is None:
            self._p.send_async(payload, functools.partial(self._ack, send_ns))
        else:
            self._p.send_async(payload, functools.partial(self._ack, send_ns), partition_key=key.decode())

    def _ack(self, send_ns: int, result: Any, _msg_id: Any) -> None:
        if result == self._ok:
            self._rec.s.publish_ns.append(time.time_ns() - send_ns)
        else:
            self._rec.error(result)

    @override
    def flush(self, timeout_s: float = 10.0) -> None:
        self._p.flush()

    def close(self) -> None:
        self._p.close()


class _PulsarConsumer(Consumer):
    def __init__(self, client: "pulsar.Client", topic: str, subscription: str, sub_type, receiver_queue: int,
                 on_payload: PayloadHandler, start: str = "latest", paused: bool = False,
                 max_total_receiver_queue: int | None = None):
        self.on_payload = on_payload
        kw = {}
        if max_total_receiver_queue:
            kw["max_total_receiver_queue_size_across_partitions"] = max_total_receiver_queue
        self._c = client.subscribe(
            topic_url(topic), subscription, consumer_type=sub_type,
            receiver_queue_size=receiver_queue, message_listener=self._listener,
            initial_position=(pulsar.InitialPosition.Earliest if start == "earliest"
                              else pulsar.InitialPosition.Latest),
            start_message_id_inclusive=start == "earliest", **kw,
        )
        if paused:
            self._c.pause_message_listener()

    def pause(self) -> None:
        self._c.pause_message_listener()

    def resume(self) -> None:
        self._c.resume_message_listener()

    def _listener(self, consumer: "pulsar.Consumer", msg: "pulsar.Message") -> None:
        self.on_payload(msg.data())
        consumer.acknowledge(msg)

    def close(self) -> None:
        self._c.close()


class PulsarClientDriver(Driver):
    client_library = "pulsar-client"
    client_library_version = version("pulsar-client")

    def __init__(self, endpoint, driver, recorder):
        super().__init__(endpoint, driver, recorder)
        # connectionsPerBroker has no equivalent in the Python client
        kw = {}
        if self.client_config.get("token"):  # an external cluster's token
            kw["authentication"] = pulsar.AuthenticationToken(self.client_config["token"])
        if self.client_config.get("tls_trust_certs_file_path"):
            kw["tls_trust_certs_file_path"] = self.client_config["tls_trust_certs_file_path"]
        self.client = pulsar.Client(
            self.endpoint.service_url,
            io_threads=self.driver.client.io_threads,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            **kw,
        )

    def _admin(self, method: str, path: str, body: Any) -> None:
        """A call of the admin REST API (``path`` under ``/admin/v2/``), with the endpoint's token."""
        headers = {"Content-Type": "application/json"}
        if self.client_config.get("token"):
            headers["Authorization"] = f"Bearer {self.client_config['token']}"
        req = urllib.request.Request(f"{self.endpoint.http_url}/admin/v2/{path}",
                                     data=json.dumps(body).encode() if body is not None else None, method=method,
                                     headers=headers)
        urllib.request.urlopen(req, timeout=30).close()

    def prepare(self, topics: list[str], partitions: int, subscriptions: list[str]) -> None:
        # Topics are created on first use. Partitioned topics need the admin
        # API, which the embedded broker does not offer: say so plainly.
        if partitions > 1 and not self.endpoint.http_url:
            raise RuntimeError(
                f"{partitions} partitions per topic need Pulsar's admin API (http_url), which "
                f"{self.endpoint.implementation or 'this broker'} does not provide")
        # an external cluster's namespace is not the run's to change: its persistence is set per topic
        external = self.endpoint.implementation == "external"
        if partitions > 1:
            for t in topics:
                self._admin("PUT", f"persistent/public/default/{t}/partitions", partitions)
        elif external:
            for t in topics:  # created now, so that its topic policies can be set
                try:
                    self._admin("PUT", f"persistent/public/default/{t}", None)
                except urllib.error.HTTPError as e:
                    if e.code != 409:  # 409: it exists (a retried prepare)
                        raise
        persistence = self.driver.client.persistence
        if persistence and self.endpoint.http_url:
            body = {"bookkeeperEnsemble": persistence.ensemble_size, "bookkeeperWriteQuorum": persistence.write_quorum,
                    "bookkeeperAckQuorum": persistence.ack_quorum, "managedLedgerMaxMarkDeleteRate": 0}
            if external:
                for t in topics:
                    self._admin("POST", f"persistent/public/default/{t}/persistence", body)
            else:
                self._admin("POST", "namespaces/public/default/persistence", body)
        elif persistence:
            logging.getLogger("brokerbench").warning(
                "pulsar persistence %s not applied: %s has no admin API (http_url)", persistence.to_dict(),
                self.endpoint.implementation or "this broker")
        # subscriptions are created at the current end of the topic
        for t in topics:
            for s in subscriptions:
                self.client.subscribe(topic_url(t), s, consumer_type=pulsar.ConsumerType.Shared).close()

    @override
    def create_producer(self, topic: str, partitions: int) -> Producer:
        cfg = self.driver.producer
        p = self.client.create_producer(
            topic_url(topic),
            batching_enabled=cfg.batching_enabled,
            batching_max_publish_delay_ms=cfg.batching_max_publish_delay_ms,
            batching_max_allowed_size_in_bytes=cfg.batching_max_bytes,
            block_if_queue_full=cfg.block_if_queue_full,
            max_pending_messages=cfg.pending_queue_size,
            send_timeout_millis=30000,
        )
        return _PulsarProducer(p, self.recorder)

    @override
    def create_consumer(self, topic, subscription, partitions, on_payload, consumer_index=0,
                        consumers_in_subscription=1, start="latest", paused=False) -> Consumer:
        cfg = self.driver.consumer
        sub_type = _SUBSCRIPTION_TYPES.get(cfg.subscription_type.lower(), pulsar.ConsumerType.Failover)
        total = cfg.max_total_receiver_queue_size_across_partitions
        return _PulsarConsumer(self.client, topic, subscription, sub_type,
                               cfg.receiver_queue_size, on_payload, start=start,
                               paused=paused, max_total_receiver_queue=int(total) if total else None)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as e:  # closing after a broker died must not hide the real error
            logging.getLogger("brokerbench").warning("pulsar client close: %s", e)
