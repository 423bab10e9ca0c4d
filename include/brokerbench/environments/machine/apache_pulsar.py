"""A real Apache Pulsar distribution, ``bin/pulsar standalone`` (``pulsar_home`` / ``BROKERBENCH_PULSAR_HOME``)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from .broker import LOOPBACK, LocalBroker, PulsarProbeMixin, free_ports, journal_sync_requested

log = logging.getLogger("brokerbench")


class ApachePulsarBroker(PulsarProbeMixin, LocalBroker):
    """A real Apache Pulsar distribution: ``bin/pulsar standalone``.

    ``pulsar_home`` (settings) or ``BROKERBENCH_PULSAR_HOME`` points at the
    unpacked apache-pulsar-x.y.z directory. A copy of conf/standalone.conf is
    written to the state dir with every port moved to a free loopback port
    (the default web port 8080 clashes with Airflow) and the variant's bookie
    settings (journalSyncData, journalWriteData, ...) set: standalone loads the
    bookie's configuration from the same file. Functions worker and stream
    storage are off.
    """

    broker = "pulsar"
    implementation = "apache-pulsar"

    def __init__(self, state_dir, settings=None, home: str | None = None):
        super().__init__(state_dir, settings)
        self.home = Path(home or self.settings.get("pulsar_home") or os.environ["BROKERBENCH_PULSAR_HOME"])

    def version(self) -> str:
        for jar in (self.home / "lib").glob("org.apache.pulsar-pulsar-broker-*.jar"):
            return jar.stem.rsplit("-", 1)[-1]
        m = re.search(r"pulsar-(\d[\w.]*)", self.home.name)
        return m.group(1) if m else "unknown"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port, web, bk, zk, bk_http, stats = free_ports(6)
        src = (self.home / "conf" / "standalone.conf").read_text()
        overrides = {
            "bindAddress": LOOPBACK, "advertisedAddress": LOOPBACK,
            "brokerServicePort": port, "webServicePort": web,
            "bookiePort": bk, "httpServerPort": bk_http, "httpServerEnabled": "false",
            "prometheusStatsHttpPort": stats, "prometheusStatsHttpAddress": LOOPBACK,
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1,
        }
        overrides.update(broker_settings)
        lines = [l for l in src.splitlines() if l.split("=", 1)[0].strip() not in overrides]
        lines += ["", "# brokerbench overrides"] + [f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                                   for k, v in overrides.items()]
        conf = self.dir / "standalone.conf"
        conf.write_text("\n".join(lines) + "\n")
        data = self.dir / "data"
        env = self.env(PULSAR_LOG_DIR=str(self.dir / "logs" / "pulsar"), PULSAR_STANDALONE_CONF=str(conf),
                       PULSAR_EXTRA_OPTS="-Dzookeeper.admin.enableServer=false -Dpulsar.allocator.exit_on_oom=true")
        entry = self.spawn([str(self.home / "bin" / "pulsar"), "standalone", "--config", str(conf),
                            "--no-functions-worker", "--no-stream-storage",
                            "--bookkeeper-port", str(bk), "--zookeeper-port", str(zk),
                            "--bookkeeper-dir", str(data / "bookkeeper"), "--zookeeper-dir", str(data / "zookeeper"),
                            "--wipe-data"], "pulsar", env=env)
        return {"address": f"{LOOPBACK}:{port}", "service_url": f"pulsar://{LOOPBACK}:{port}",
                "http_url": f"http://{LOOPBACK}:{web}",
                "ports": {"pulsar": port, "web": web, "bookie": bk, "zookeeper": zk, "bookie_http": bk_http,
                          "stats": stats},
                "processes": [entry], "config": str(conf), "home": str(self.home)}

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        sync = journal_sync_requested(broker_settings)
        applied = {k: v for k, v in broker_settings.items() if k.startswith("journal")}
        note = ("bookie journalSyncData=true: every entry is fsynced to the journal before it is acknowledged"
                if sync in (True, None) else "bookie journalSyncData=false: entries are acknowledged before "
                                             "the journal is fsynced")
        return {"variant": variant, "honoured": True, "settings": applied,
                "note": note + "; standalone runs one bookie, so ensemble/write/ack quorum are 1."}
