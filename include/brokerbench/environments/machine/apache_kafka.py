"""A real Apache Kafka distribution in KRaft combined mode (``kafka_home`` / ``BROKERBENCH_KAFKA_HOME``)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from .broker import LOOPBACK, KafkaProbeMixin, LocalBroker, free_ports, kafka_flush_requested

log = logging.getLogger("brokerbench")


class ApacheKafkaBroker(KafkaProbeMixin, LocalBroker):
    """A real Apache Kafka distribution (kafka_2.13-x.y.z) in KRaft combined mode.

    ``kafka_home`` (settings) or ``BROKERBENCH_KAFKA_HOME`` points at the
    unpacked directory. A server.properties is generated in the state dir:
    one node that is both broker and controller, listeners on 127.0.0.1,
    ``log.dirs`` under ``<state>/kafka/data``; broker_settings are added as
    properties (e.g. ``log.flush.interval.messages``). The storage is formatted
    with ``bin/kafka-storage.sh format`` before the first start.
    """

    broker = "kafka"
    implementation = "apache-kafka"

    def __init__(self, state_dir, settings=None, home: str | None = None):
        super().__init__(state_dir, settings)
        self.home = Path(home or self.settings.get("kafka_home") or os.environ["BROKERBENCH_KAFKA_HOME"])

    def version(self) -> str:
        for jar in sorted((self.home / "libs").glob("kafka_*.jar")):
            m = re.match(r"kafka_[\d.]+-(\d[\w.\-]*?)(-sources|-test|-javadoc)?\.jar$", jar.name)
            if m and not m.group(2):
                return m.group(1)
        m = re.search(r"kafka_[\d.]+-(\d[\w.]*)", self.home.name)
        return m.group(1) if m else "unknown"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port, cport = free_ports(2)
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
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update({k: str(v) for k, v in broker_settings.items()})
        conf = self.dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = self.env(LOG_DIR=str(self.dir / "logs" / "kafka-server"))
        env.pop("JMX_PORT", None)  # no JMX listener on a fixed port
        cluster_id = self.run_tool([str(self.home / "bin" / "kafka-storage.sh"), "random-uuid"], env=env,
                                   check=True).stdout.strip().splitlines()[-1]
        self.run_tool([str(self.home / "bin" / "kafka-storage.sh"), "format", "-t", cluster_id, "-c", str(conf)],
                      env=env, timeout=120, check=True)
        entry = self.spawn([str(self.home / "bin" / "kafka-server-start.sh"), str(conf)], "kafka", env=env)
        return {"address": f"{LOOPBACK}:{port}", "ports": {"kafka": port, "controller": cport},
                "processes": [entry], "config": str(conf), "home": str(self.home)}

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        asked = kafka_flush_requested(broker_settings, driver_overrides)
        note = ("Apache Kafka applies flush.messages / flush.ms as topic configuration (set when the "
                "topics are created) and log.flush.* as broker configuration") if asked else \
            "Kafka's default: no per-message fsync, the OS page cache writes to disk later"
        return {"variant": variant, "honoured": True, "settings": asked, "note": note + "; single broker, "
                "so replication settings above 1 cannot be applied here."}
