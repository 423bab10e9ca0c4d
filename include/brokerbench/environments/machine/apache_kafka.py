"""Apache Kafka in KRaft combined mode, any version: the default for ``kafka`` on the local environment.

The jars are a :class:`~.distributions.Distribution`: resolved by version from
Maven Central (``broker_versions``, default :data:`~.distributions.DEFAULT_VERSIONS`),
or an unpacked Apache tarball (``kafka_home`` / ``BROKERBENCH_KAFKA_HOME``).
Both start the same way, with ``java`` directly (no shell scripts): the storage
is formatted with ``kafka.tools.StorageTool``, then ``kafka.Kafka`` runs.
"""

from __future__ import annotations

import base64
import logging
import uuid
from typing import Any

from typing_extensions import override

from .broker import LOOPBACK, KafkaProbeMixin, LocalBroker, free_ports, kafka_flush_requested
from .distributions import Distribution, java, log4j_options

log = logging.getLogger("brokerbench")

#: heap of the broker JVM, MB (Kafka's own start script uses 1 GB; Kafka keeps messages in the page cache)
DEFAULT_HEAP_MB = 1024
#: Kafka's own start script's JVM performance options
JVM_PERFORMANCE = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                   "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
                   "-Djava.net.preferIPv4Stack=true"]  # sockets bound to 127.0.0.1 show as such


def kraft_cluster_id() -> str:
    """A KRaft cluster id as ``kafka-storage.sh random-uuid`` prints one (a UUID, base64url without padding),
    never starting with ``-`` (Kafka's Uuid.randomUuid avoids it too: the storage tool would take it for an
    option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class ApacheKafkaBroker(KafkaProbeMixin, LocalBroker):
    """Apache Kafka, one node that is broker and controller, listeners on 127.0.0.1.

    A server.properties is generated in the state dir: ``log.dirs`` under
    ``<state>/kafka/data``, internal topics with replication 1; the variant's
    broker_settings are added as properties (e.g. ``log.flush.interval.messages``).
    Setting ``kafka_heap_mb`` sizes the heap (default 1024); ``kafka_sasl_plain_users`` ({user: password}) adds
    a SASL_PLAINTEXT listener with those PLAIN logins (the external environment's tests use it as a cluster
    with credentials).
    """

    broker = "kafka"
    implementation = "apache-kafka"

    def __init__(self, state_dir, settings=None, distribution: Distribution | None = None):
        super().__init__(state_dir, settings)
        if distribution is None:
            raise ValueError("ApacheKafkaBroker needs a distribution (make_broker resolves it)")
        self.dist = distribution

    def version(self) -> str:
        return self.dist.version

    def identity(self) -> str:
        return f"{self.implementation} {self.dist.version} {self.dist.lib}"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        users = {str(k): str(v) for k, v in self.settings.kafka_sasl_plain_users.items()}
        port, cport, *more = free_ports(3 if users else 2)
        data = self.dir / "data"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{cport}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data / "kraft-logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if users:  # a SASL_PLAINTEXT listener beside the PLAINTEXT one: a loopback "existing" cluster with logins
            sport = more[0]
            props["listeners"] += f",SASL_PLAINTEXT://{LOOPBACK}:{sport}"
            props["advertised.listeners"] += f",SASL_PLAINTEXT://{LOOPBACK}:{sport}"
            props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            props["sasl.enabled.mechanisms"] = "PLAIN"
            props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{u}="{pw}"' for u, pw in users.items()) + ";")
        props.update({k: str(v) for k, v in broker_settings.items()})
        conf = self.dir / "server.properties"
        conf.write_text("# generated by brokerbench\n" + "".join(f"{k}={v}\n" for k, v in props.items()))
        logs = self.dir / "logs"
        heap = int(self.settings.kafka_heap_mb or DEFAULT_HEAP_MB)
        base = [java(), "-cp", self.dist.classpath()]
        self.run_tool(base + log4j_options(self.dist, self.dir / "conf" / "tool", logs / "storage-tool.log")
                      + ["kafka.tools.StorageTool", "format", "-t", kraft_cluster_id(), "-c", str(conf)],
                      timeout=120, check=True)
        argv = ([java(), f"-Xms{heap}m", f"-Xmx{heap}m", *JVM_PERFORMANCE, f"-Dkafka.logs.dir={logs}",
                 *log4j_options(self.dist, self.dir / "conf", logs / "server.log"),
                 "-cp", self.dist.classpath(), "kafka.Kafka", str(conf)])
        entry = self.spawn(argv, "kafka")
        return {"address": f"{LOOPBACK}:{port}", "ports": {"kafka": port, "controller": cport,
                                                            **({"sasl_plaintext": more[0]} if users else {})},
                **({"sasl_address": f"{LOOPBACK}:{more[0]}", "sasl_users": sorted(users)} if users else {}),
                "processes": [entry], "config": str(conf), "heap_mb": heap,
                "distribution": self.dist.provenance()}

    def _log_files(self, state: dict[str, Any]) -> list[tuple[str, int]]:
        return super()._log_files(state) + [(str(self.dir / "logs" / "server.log"), 0)]

    @override
    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        asked = kafka_flush_requested(broker_settings, driver_overrides)
        if asked:
            where = ", ".join(f"{k}={v}" for k, v in asked.items())
            note = (f"Apache Kafka fsyncs the log as asked ({where}: flush.* set on the topics when they are "
                    "created, log.flush.* in the broker's server.properties); acks and batching as the driver says")
        else:
            note = ("Kafka's default: no fsync per message, the OS page cache writes to disk later (durability "
                    "comes from replication in a cluster)")
        return {"variant": variant, "honoured": True, "settings": asked,
                "note": note + "; one local broker, so replication factor and min.insync.replicas above 1 cannot "
                               "be applied here (the topics are created with replication 1)."}
