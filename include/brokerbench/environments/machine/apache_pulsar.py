"""Apache Pulsar standalone, any version: the default for ``pulsar`` on the local environment.

The jars are a :class:`~.distributions.Distribution`: resolved by version from
Maven Central (``broker_versions``, default :data:`~.distributions.DEFAULT_VERSIONS`),
or an unpacked Apache tarball (``pulsar_home`` / ``BROKERBENCH_PULSAR_HOME``).
Both start the same way: ``java ... org.apache.pulsar.PulsarStandaloneStarter``
(what ``bin/pulsar standalone`` runs) with a configuration file brokerbench
writes itself: broker, RocksDB metadata store and one embedded bookie in one JVM.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
from typing import Any

from typing_extensions import override

from ..brokermetrics import Target
from .broker import LOOPBACK, DistributionBroker, PulsarProbeMixin, file_size, free_ports, journal_sync_requested
from .distributions import java, log4j_options

log = logging.getLogger("brokerbench")

#: heap of the standalone JVM, MB; direct memory (BookKeeper's and the broker's buffers) gets the same
DEFAULT_HEAP_MB = 1024
#: what Apache's bin/pulsar passes to a Java 17 JVM (module opens for Netty, BookKeeper and ZooKeeper code)
JVM_OPTIONS = [
    "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=10", "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true",
    "-Dio.netty.tryReflectionSetAccessible=true", "-Dio.netty.recycler.maxCapacityPerThread=4096",
    "-Djute.maxbuffer=10485760", "-Dzookeeper.admin.enableServer=false", "-Dpulsar.allocator.exit_on_oom=true",
    "-Dlog4j.shutdownHookEnabled=false", "-Dlog4j2.is.webapp=false",
    "--add-opens", "java.base/java.io=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED", "--add-opens", "java.management/sun.management=ALL-UNNAMED",
]


def standalone_conf(ports: dict[str, int], broker_settings: dict[str, Any]) -> dict[str, Any]:
    """The standalone configuration: every listener on 127.0.0.1 and a port chosen free (the web service
    never on 8080), quorums of 1, no load balancing (one broker), the variant's settings last.

    Standalone loads the embedded bookie's configuration from the same file, so
    journalSyncData / journalWriteData reach the bookie."""
    conf: dict[str, Any] = {
        "clusterName": "standalone",
        "bindAddress": LOOPBACK, "advertisedAddress": LOOPBACK,
        "brokerServicePort": ports["pulsar"], "webServicePort": ports["web"],
        "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
        "managedLedgerDefaultAckQuorum": 1,
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
        "loadBalancerEnabled": False,
        "functionsWorkerEnabled": False, "transactionCoordinatorEnabled": False,
        # the broker's own windowed figures (storage and ledger write latency, rates: its topic stats) every 5 s
        # instead of 60, so a phase of a minute has windows of its own (docs/broker-metrics.md)
        "statsUpdateFrequencyInSecs": 5,
        # the embedded bookie (BookKeeper ServerConfiguration keys)
        "bookiePort": ports["bookie"], "allowLoopback": True, "listeningInterface": "lo",
        "httpServerEnabled": False,
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "journalSyncData": True, "journalWriteData": True,
    }
    conf.update(broker_settings)
    return conf


def hs256_token(subject: str, key: bytes) -> str:
    """A JWT for ``subject`` signed with HMAC-SHA256 by ``key``: what ``pulsar tokens create --secret-key``
    makes, and what the broker's AuthenticationProviderToken checks against ``tokenSecretKey``."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing = b64(json.dumps({"alg": "HS256"}).encode()) + "." + b64(json.dumps({"sub": subject}).encode())
    return signing + "." + b64(hmac.new(key, signing.encode(), hashlib.sha256).digest())


class ApachePulsarBroker(PulsarProbeMixin, DistributionBroker):
    """Apache Pulsar standalone: broker, RocksDB metadata and one bookie, on 127.0.0.1.

    Setting ``pulsar_heap_mb`` sizes the heap and direct memory (default 1024 each; a variant's ``jvmOptions``
    replace the heap and the collector where they name them, :mod:`.jvm_options`); ``pulsar_token_auth``
    turns on token authentication (a secret key made per start; the token of the super-user ``admin`` is
    recorded as ``token`` in the broker record, and the probe uses it).
    """

    broker = "pulsar"
    implementation = "apache-pulsar"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port, web, bookie = free_ports(3)
        ports = {"pulsar": port, "web": web, "bookie": bookie}
        conf = self.dir / "standalone.conf"
        auth: dict[str, Any] = {}
        token = None
        if self.settings.pulsar_token_auth:  # a cluster with token logins (the external environment's tests)
            key = secrets.token_bytes(32)
            token = hs256_token("admin", key)
            auth = {"authenticationEnabled": True, "authorizationEnabled": False, "superUserRoles": "admin",
                    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                    "tokenSecretKey": "data:;base64," + base64.b64encode(key).decode(),
                    "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                    "brokerClientAuthenticationParameters": f"token:{token}"}
        conf.write_text("# generated by brokerbench\n" + "".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
            for k, v in {**standalone_conf(ports, broker_settings), **auth}.items()))
        data, logs = self.dir / "data", self.dir / "logs"
        heap = int(self.settings.pulsar_heap_mb or DEFAULT_HEAP_MB)
        # the variant's jvmOptions over the heap and the collector, as PULSAR_MEM / PULSAR_GC replace bin/pulsar's
        # defaults (jvm_options.merge)
        flags = self.jvm_flags([f"-Xms{heap // 2}m", f"-Xmx{heap}m", f"-XX:MaxDirectMemorySize={heap}m"],
                               JVM_OPTIONS)
        argv = [java(), *flags,
                *log4j_options(self.dist, self.dir / "conf", logs / "pulsar-standalone.log"),
                "-cp", self.dist.classpath(), "org.apache.pulsar.PulsarStandaloneStarter",
                "--config", str(conf), "--no-functions-worker", "--no-stream-storage", "--wipe-data",
                "--bookkeeper-port", str(bookie),
                "--metadata-dir", str(data / "metadata"), "--bookkeeper-dir", str(data / "bookkeeper"),
                "--zookeeper-dir", str(data / "zookeeper")]
        server_log = file_size(logs / "pulsar-standalone.log")  # where this start's lines begin
        entry = self.spawn(argv, "pulsar")
        return {"address": f"{LOOPBACK}:{port}", "service_url": f"pulsar://{LOOPBACK}:{port}",
                "http_url": f"http://{LOOPBACK}:{web}", "ports": ports, "processes": [entry],
                "config": str(conf), "heap_mb": heap, "jvm_flags": flags, "distribution": self.dist.provenance(),
                "server_log_offset": server_log,
                **({"token": token} if token else {})}

    def _wait_ready(self, state: dict[str, Any]) -> None:
        super()._wait_ready(state)
        # with the RocksDB metadata store the embedded bookie picks its own free port: record the one it bound
        try:
            with open(self.dir / "logs" / "pulsar-standalone.log", "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 8 * 1024 * 1024))
                text = f.read().decode(errors="replace")
        except OSError:
            return
        found = re.findall(r"Binding bookie-rpc endpoint to /([\d.]+):(\d+)", text)
        if found:
            state["ports"] = {**state["ports"], "bookie": int(found[-1][1])}

    def _log_files(self, state: dict[str, Any]) -> list[tuple[str, int]]:
        return super()._log_files(state) + [(str(self.dir / "logs" / "pulsar-standalone.log"),
                                             int(state.get("server_log_offset") or 0))]

    @override
    def metrics_targets(self, state: dict[str, Any]) -> list[Target]:
        """The web service's ``/metrics`` (the broker's series; the embedded bookie serves none of its own)."""
        return [Target("pulsar", "broker", LOOPBACK, f"{state['http_url']}/metrics", self.implementation,
                       str(state.get("version") or ""))]

    @override
    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        sync = journal_sync_requested(broker_settings)
        applied = {k: v for k, v in broker_settings.items() if k.startswith("journal")}
        note = ("bookie journalSyncData=true: every entry is fsynced to the journal before it is acknowledged"
                if sync in (True, None) else "bookie journalSyncData=false: entries are acknowledged before "
                                             "the journal is fsynced")
        return {"variant": variant, "honoured": True, "settings": applied,
                "note": note + "; standalone runs one bookie, so ensemble / write / ack quorum are 1 (replication "
                               "above 1 cannot be applied here)."}
