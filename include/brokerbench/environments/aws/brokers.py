"""Broker clusters on fleet hosts from the scripts in ``include/infra/aws`` (deploy_mode install).

Per broker and version:

* Kafka: KRaft (combined broker+controller on every broker host, one quorum of
  all of them) from 3.3, ZooKeeper mode before (ZooKeeper on the metadata
  hosts, from the Kafka jars), or as ``kafka_mode`` says. Replication factor
  min(3, brokers), ``min.insync.replicas`` one less (at least 1). Flush
  settings (fsync-on) are topic config given by the driver; broker-side
  settings of a variant go into the properties file and restart the broker.
* Pulsar: ZooKeeper on the metadata hosts, cluster metadata initialised once,
  a bookie and a broker on every broker host; ensemble / write quorum / ack
  quorum min(3, brokers) / same / one less. Variant settings
  ``journalSyncData``, ``journalWriteData``, ... go into the bookie's
  configuration; the bookies restart.
* RabbitMQ: one node per broker host sharing an Erlang cookie, joined to the
  first; queue type is client-side (driver); a mirroring policy (``ha_mode``
  setting) for classic mirrored queues before 4.0.

The Kafka and Pulsar jars come from the controller (:mod:`.artifacts`:
Maven Central, shipped over SSH) or the Apache archive (``artifact_source``);
RabbitMQ from the hosts' package manager or its release tarball
(``rabbitmq_source``). Every process is started detached with a pid file in
the host's directory (``_process.sh.j2``), so the same scripts run on EC2
instances and on any host reached over SSH.

:func:`render_scripts` renders every script for one broker, version and
fleet; the tests render them for several versions and run shellcheck, and run
them on loopback hosts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..base import BrokerEndpoint, EnvironmentFailure
from ..machine.apache_pulsar import JVM_OPTIONS as PULSAR_JVM_OPTIONS
from ..machine.jvm_options import merge
from .templates import profile, render

log = logging.getLogger("brokerbench")

BOOKIE_KEYS = ("journalSyncData", "journalWriteData", "journalPageCacheFlushIntervalMSec",
               "journalMaxGroupWaitMSec", "journalAdaptiveGroupWrites", "journalFlushWhenQueueEmpty")

#: versions the scripts were written against and rendered in the tests; any Kafka or Pulsar version that
#: resolves from Maven Central deploys with artifact_source controller (not a list of what may run)
KNOWN_VERSIONS = {
    "kafka": ["2.8.2", "3.6.2", "3.9.1", "4.1.1"],
    "pulsar": ["2.10.6", "3.3.7", "4.0.7"],
    "rabbitmq": ["3.10.8", "3.13.7", "4.1.4"],
}

#: the host script that installs, configures, starts, stops and checks each broker
SCRIPTS = {"kafka": "kafka.sh", "pulsar": "pulsar.sh", "rabbitmq": "rabbitmq.sh"}

#: what BrokerEndpoint.implementation says for an installed broker
IMPLEMENTATIONS = {"kafka": "apache-kafka", "pulsar": "apache-pulsar", "rabbitmq": "rabbitmq"}

#: JVM heaps on the hosts, MB (setting ``heaps_mb`` overrides each)
DEFAULT_HEAPS_MB = {"kafka": 6144, "pulsar-broker": 4096, "bookie": 4096, "zookeeper": 1024}


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def kafka_mode(version: str, forced: str | None = None) -> str:
    """KRaft from 3.3 (production-ready), only KRaft from 4.0; ZooKeeper before. ``forced`` (the setting
    ``kafka_mode``) ``kraft`` or ``zookeeper`` where the release has it; None or ``by-release``: by the release."""
    if forced == "by-release":
        forced = None
    v = _vtuple(version)
    if forced == "zookeeper" and v >= (4, 0):
        raise EnvironmentFailure(f"Kafka {version} has no ZooKeeper mode (removed in 4.0)")
    if forced == "kraft" and v < (2, 8):
        raise EnvironmentFailure(f"Kafka {version} has no KRaft mode")
    if forced:
        return forced
    return "kraft" if v >= (3, 3) else "zookeeper"


def replication(n_brokers: int) -> dict[str, int]:
    """The seeds' replication on a cluster of ``n_brokers``: factor 3 (or all), one ack short of it."""
    factor = min(3, n_brokers)
    return {"factor": factor, "min_insync": max(1, factor - 1)}


def _short(name: str) -> str:
    return name.replace(".", "-")


def render_scripts(broker: str, version: str, hosts: list[dict[str, Any]], metadata: list[dict[str, Any]],
                   broker_settings: dict[str, Any], *, mode: str = "kraft", tuning: str = "default",
                   run_key: str = "run", data_dir: str = "/data", source: str = "controller",
                   artifact: dict[str, Any] | None = None, rabbitmq_source: str = "package",
                   heaps_mb: dict[str, int] | None = None,
                   exporter: dict[str, Any] | None = None,
                   jvm_options: list[str] | None = None) -> list[tuple[str, str, str]]:
    """[(host name, script name, text)] for every host that takes part.

    ``hosts`` / ``metadata``: ``{"name", "address", "dir"}`` per host (``dir``: brokerbench's directory on it,
    where the install, configuration, logs and pid files go); each host's data goes to
    ``<data_dir>/<host name>/<broker>``. ``artifact`` (source controller): ``{"path", "sha256",
    "logging_api"}`` of the tar shipped to every host. ``exporter`` (Kafka): ``{"jar", "jar_sha256", "rules",
    "port"}`` of the JMX exporter agent on the broker hosts (:mod:`.metrics_endpoints`). ``jvm_options``: a
    variant's flags for the broker's JVMs (Kafka's; Pulsar's broker and bookie), over the scripts' heap and collector
    (:func:`~brokerbench.environments.machine.jvm_options.merge`); ZooKeeper keeps its own."""
    prof = profile(tuning, broker)
    settings = {**prof, **{str(k): str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in broker_settings.items() if k != "nodes"}}
    heaps = {**DEFAULT_HEAPS_MB, **(heaps_mb or {})}
    if broker != "rabbitmq" and source == "controller" and not artifact:
        raise EnvironmentFailure(f"{broker} {version}: artifact_source controller needs the shipped artifact")
    art = artifact or {}
    logging_api = art.get("logging_api") or ("log4j1" if broker == "kafka" and _vtuple(version) < (4, 0)
                                             else "log4j2")
    common = {"version": version, "source": source, "artifact": art.get("path", ""),
              "artifact_sha256": art.get("sha256", ""), "logging_api": logging_api}

    def where(h: dict[str, Any], what: str) -> dict[str, Any]:
        hd = h.get("dir") or f"/opt/brokerbench/hosts/{h['name']}"
        return {"host_name": h["name"], "address": h["address"], "host_dir": hd,
                "data_dir": f"{data_dir.rstrip('/')}/{h['name']}/{what}"}

    rep = replication(len(hosts))
    out = []
    if broker == "kafka":
        scala = "2.12" if _vtuple(version)[:2] < (2, 4) else "2.13"
        zk = ",".join(f"{m['address']}:2181" for m in metadata)
        voters = ",".join(f"{i + 1}@{h['address']}:9093" for i, h in enumerate(hosts))
        cid = kafka_cluster_id(run_key)
        for i, h in enumerate(hosts + metadata):
            out.append((h["name"], "kafka.sh", render(
                "kafka.sh.j2", **common, **where(h, "kafka"), scala=scala, mode=mode, node_id=i + 1,
                nodes=len(hosts), voters=voters, zookeeper=zk, cluster_id=cid, replication=rep["factor"],
                min_isr=rep["min_insync"], settings=settings,
                jvm_flags=_shell_words(merge([f"-Xms{heaps['kafka']}m", f"-Xmx{heaps['kafka']}m"], KAFKA_JVM,
                                             jvm_options or [])),
                exporter=exporter if i < len(hosts) else None)))
        if mode == "zookeeper":
            out += _zookeeper(metadata, "kafka", version, "Kafka", f"Apache Kafka {version}", common, where,
                              heaps["zookeeper"])
    elif broker == "pulsar":
        zk = ",".join(f"{m['address']}:2181" for m in metadata)
        bookie = {k: v for k, v in settings.items() if k in BOOKIE_KEYS}
        brk = {k: v for k, v in settings.items() if k not in BOOKIE_KEYS}
        brk.setdefault("managedLedgerDefaultEnsembleSize", str(rep["factor"]))
        brk.setdefault("managedLedgerDefaultWriteQuorum", str(rep["factor"]))
        brk.setdefault("managedLedgerDefaultAckQuorum", str(rep["min_insync"]))
        first = hosts[0]["address"] if hosts else ""
        for role, group in (("bookie + broker", hosts), ("metadata: install only", metadata)):
            for h in group:
                out.append((h["name"], "pulsar.sh", render(
                    "pulsar.sh.j2", **common, **where(h, "pulsar"), role=role, zookeeper=zk,
                    zookeeper_path=zk.replace(",", ";"), bookie=bookie if group is hosts else {},
                    broker=brk if group is hosts else {},
                    broker_jvm_flags=_shell_words(merge(_pulsar_heap(heaps["pulsar-broker"]), PULSAR_JVM,
                                                        jvm_options or [])),
                    bookie_jvm_flags=_shell_words(merge(_pulsar_heap(heaps["bookie"]), PULSAR_JVM, jvm_options or [])),
                    legacy_metadata_flags=_vtuple(version) < (2, 10),
                    web_service_url=f"http://{first}:8080", broker_service_url=f"pulsar://{first}:6650")))
        out += _zookeeper(metadata, "pulsar", version, "Pulsar metadata store", f"Apache Pulsar {version}", common,
                          where, heaps["zookeeper"])
    elif broker == "rabbitmq":
        mirroring = settings.pop("ha_mode", None)
        if mirroring and version != "package" and _vtuple(version)[:1] >= (4,):
            raise EnvironmentFailure(f"RabbitMQ {version} has no classic queue mirroring (removed in 4.0): "
                                     "use quorum queues (driver queueType QUORUM)")
        policy = None
        if mirroring:
            policy = '{"ha-mode":"all"}' if mirroring == "all" else \
                f'{{"ha-mode":"exactly","ha-params":{int(mirroring)},"ha-sync-mode":"automatic"}}'
        nodes = [{"node_name": f"{_short(h['name'])}@{h['address']}", "address": h["address"]} for h in hosts]
        cookie = hashlib.sha256(("cookie:" + run_key).encode()).hexdigest()[:32]
        for i, h in enumerate(hosts):
            out.append((h["name"], "rabbitmq.sh", render(
                "rabbitmq.sh.j2", **{**common, "source": rabbitmq_source}, **where(h, "rabbitmq"), node_id=i,
                nodes=nodes, node_name=nodes[i]["node_name"], cookie=cookie, settings=settings,
                mirroring=policy)))
    else:
        raise EnvironmentFailure(f"unknown broker {broker!r}")
    return out


#: the JVM flags of the scripts' Kafka next to its heap (kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS)
KAFKA_JVM = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
#: the scripts' Pulsar broker and bookie JVM flags next to their heap: the local environment's, Apache's bin/pulsar's
PULSAR_JVM = PULSAR_JVM_OPTIONS


def _pulsar_heap(mb: int) -> list[str]:
    return [f"-Xms{mb}m", f"-Xmx{mb}m", f"-XX:MaxDirectMemorySize={mb}m"]


def _shell_words(flags: list[str]) -> str:
    """JVM flags as words of a shell command line, each quoted where the shell would split or expand it."""
    return " ".join(shlex.quote(f) for f in flags)


def kafka_cluster_id(run_key: str) -> str:
    """The KRaft cluster id of a run's Kafka: 16 bytes of the run key's SHA-1, URL-safe base64 (22 characters),
    never starting with "-", which kafka-storage would read as an option (Kafka's own Uuid.randomUuid skips such
    ids too): the key is hashed again with a counter until the id does not."""
    salt = 0
    while True:
        digest = hashlib.sha1((run_key if salt == 0 else f"{run_key}#{salt}").encode()).digest()[:16]
        cid = base64.urlsafe_b64encode(digest).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
        salt += 1


def _zookeeper(metadata, broker, version, purpose, distribution, common, where, heap_mb):
    servers = [f"server.{i + 1}={m['address']}:2888:3888" for i, m in enumerate(metadata)]
    return [(m["name"], "zookeeper.sh", render(
        "zookeeper.sh.j2", **common, **where(m, f"zookeeper-{broker}"), node_id=i + 1,
        home=f"{where(m, broker)['host_dir']}/dist/{broker}-{version}", purpose=purpose,
        distribution=distribution, servers=servers, heap_mb=heap_mb))
        for i, m in enumerate(metadata)]


# -- deploy / health / undeploy on the fleet ------------------------------------------

def _fleet_hosts(env, role: str) -> list[dict[str, Any]]:
    by_name = {h.name: h for h in env.hosts()}
    return [{**h, "dir": env.host_dir(by_name[h["name"]])} for h in env.fleet()["hosts"] if h["role"] == role]


def _script(env, host, script: str) -> str:
    return f"{env.host_dir(host)}/scripts/{script}"


def _step(env, host_name: str, script: str, action: str, timeout: float = 900) -> str:
    host = next(h for h in env.hosts() if h.name == host_name)
    res = host.sudo(f"bash {shlex.quote(_script(env, host, script))} {action}", timeout=timeout)
    if not res.ok:
        raise EnvironmentFailure(f"{script} {action} failed (exit {res.returncode}): "
                                 f"{(res.stderr + res.stdout).strip()[-800:]}", host_name)
    for line in res.stdout.strip().splitlines()[-3:]:
        log.info("[%s] %s %s: %s", host_name, script, action, line)
    return res.stdout


def _each(names: list[str], fn) -> list[Any]:
    """``fn(name)`` for every host at once (SSH round trips and JVM starts overlap); the first error raised."""
    if not names:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="deploy") as pool:
        futures = [pool.submit(fn, n) for n in names]
    return [f.result() for f in futures]


def _artifact(env, broker: str, version: str, names: list[str]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The artifact the scripts install, shipped to ``names`` (source controller); and its provenance."""
    source = env.settings.artifact_source or "controller"
    if broker == "rabbitmq":
        return None, {"source": f"rabbitmq_source {env.settings.rabbitmq_source or 'package'}"}
    if source != "controller":
        return None, {"source": "apache-archive (downloaded by each host, sha512 checked)"}
    from . import artifacts

    art = artifacts.packed(broker, version)
    by_name = {h.name: h for h in env.hosts()}
    # the first host alone, then the rest at once: hosts that share a file system (static machines with a
    # shared home, the loopback fleet) find the digest there and copy nothing
    shipped = [artifacts.ship(by_name[names[0]], art, env.remote_dir)]
    shipped += _each(names[1:], lambda n: artifacts.ship(by_name[n], art, env.remote_dir))
    path = f"{env.remote_dir}/artifacts/{art.remote_name()}"
    return ({"path": path, "sha256": art.sha256, "logging_api": art.logging_api},
            {**art.provenance(), "hosts": shipped})


def _jmx_exporter(env, names: list[str]) -> dict[str, Any]:
    """Kafka's metrics endpoint: the JMX exporter agent's jar and rules shipped to the broker hosts ``names``
    (the controller resolves the jar from Maven Central); its provenance and paths on the hosts, or {"error"}
    (the brokers then run without it, and their catalog metrics are recorded as not exposed)."""
    from . import artifacts
    from .metrics_endpoints import METRICS_PORTS

    try:
        exporter = artifacts.jmx_exporter_for_hosts()
        by_name = {h.name: h for h in env.hosts()}
        remote = [artifacts.ship_jmx_exporter(by_name[names[0]], exporter, env.remote_dir)]
        remote += _each(names[1:], lambda n: artifacts.ship_jmx_exporter(by_name[n], exporter, env.remote_dir))
    except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a deploy
        log.warning("kafka: no broker metrics: %s", e)
        return {"error": f"{type(e).__name__}: {e}"}
    return {"artifact": exporter["artifact"], "jar_sha256": exporter["jar_sha256"],
            "rules_sha256": exporter["rules_sha256"], "jar": remote[0]["jar"], "rules": remote[0]["rules"],
            "port": METRICS_PORTS["kafka"]}


def deploy_installed(env, broker: str, broker_settings: dict[str, Any], variant: str,
                     driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
    """Install, configure and start ``broker`` as a cluster on the broker hosts (ZooKeeper on the metadata
    hosts where the version needs it), wait until every node serves and the cluster has formed."""
    t0 = time.monotonic()
    version = env.version(broker)
    mode = kafka_mode(version, env.settings.kafka_mode) if broker == "kafka" else ""
    hosts = _fleet_hosts(env, "broker")
    metadata = _fleet_hosts(env, "metadata") if (broker == "pulsar" or mode == "zookeeper") else []
    if not hosts:
        raise EnvironmentFailure(f"{broker}: the fleet has no broker host")
    if (broker == "pulsar" or mode == "zookeeper") and not metadata:
        raise EnvironmentFailure(f"{broker} {version}{' (' + mode + ')' if mode else ''} needs ZooKeeper: the "
                                 "fleet has no metadata host (instance_counts.metadata)")
    names = [h["name"] for h in hosts + metadata]
    artifact, provenance = _artifact(env, broker, version, names)
    exporter = _jmx_exporter(env, [h["name"] for h in hosts]) if broker == "kafka" else None
    shipped_s = time.monotonic() - t0
    scripts = render_scripts(broker, version, hosts, metadata, broker_settings, mode=mode or "kraft",
                             tuning=env.settings.tuning_profile or "default", run_key=env.run_key,
                             data_dir=env.settings.data_dir or "/data",
                             source=env.settings.artifact_source or "controller", artifact=artifact,
                             rabbitmq_source=env.settings.rabbitmq_source or "package",
                             heaps_mb=env.settings.heaps_mb,
                             exporter=exporter if exporter and "error" not in exporter else None,
                             jvm_options=jvm_options)
    by_host = {h.name: h for h in env.hosts()}
    for name, script, text in scripts:
        by_host[name].put_text(text, _script(env, by_host[name], script), 0o755)
    main = SCRIPTS[broker]
    broker_hosts = [h["name"] for h in hosts]
    _each([n for n, s, _ in scripts if s == main], lambda n: _step(env, n, main, "install"))
    # every node stops first (a variant's settings need a restart), then ZooKeeper is configured and started
    # (at a change of release, an A/B run's other side, it restarts on that release's jars with its data
    # cleared, under no running node), then the nodes are configured again and started
    _each(broker_hosts, lambda n: _step(env, n, main, "stop"))
    zk_hosts = [n for n, s, _ in scripts if s == "zookeeper.sh"]
    if zk_hosts:
        _each(zk_hosts, lambda n: (_step(env, n, "zookeeper.sh", "configure"),
                                   _step(env, n, "zookeeper.sh", "start")))
        _wait(env, "zookeeper", zk_hosts, "zookeeper.sh", float(env.settings.start_timeout_s or 300))
    else:
        # a ZooKeeper the other side of an A/B run started (Kafka before 3.3 against a KRaft release) serves
        # nothing now: it stops (this side's trials run beside no idle JVM) and its data goes with the storage
        # this release clears, so that the other side starts afresh on both at its next deploy
        for h in env.hosts("metadata"):
            _stop(env, h, "zookeeper.sh", "retire")
    _each(broker_hosts, lambda n: _step(env, n, main, "configure"))
    if broker == "pulsar":
        _step(env, broker_hosts[0], main, "init-cluster", timeout=300)
    # every node at once (a RabbitMQ node's start waits until it runs, on its own); RabbitMQ's then join the
    # first one after another
    _each(broker_hosts, lambda n: _step(env, n, main, "start"))
    if broker == "rabbitmq":
        for name in broker_hosts[1:]:
            _step(env, name, main, "join")
        _step(env, broker_hosts[0], main, "policy")
    timeout = float(env.settings.start_timeout_s or 300)
    _wait(env, broker, broker_hosts, main, timeout)
    addrs = [h["address"] for h in hosts]
    ep = BrokerEndpoint(broker=broker, implementation=IMPLEMENTATIONS[broker],
                        version=version + (f" ({mode})" if mode else ""), nodes=len(hosts))
    if broker == "kafka":
        ep.bootstrap_servers = ",".join(f"{a}:9092" for a in addrs)
    elif broker == "pulsar":
        ep.service_url = "pulsar://" + ",".join(f"{a}:6650" for a in addrs)
        ep.http_url = f"http://{addrs[0]}:8080"
    else:
        ep.amqp_uris = [f"amqp://guest:guest@{a}:5672/%2F" for a in addrs]
    formed = cluster_formed(env, ep, deadline=time.monotonic() + timeout)
    if broker == "rabbitmq" and version == "package":
        ep.version = formed.get("version") or version
    seconds = time.monotonic() - t0
    log.info("%s %s: %d-node cluster formed in %.1f s (artifacts %.1f s): %s", broker, ep.version, len(hosts),
             seconds, shipped_s, formed.get("summary"))
    rep = replication(len(hosts))
    ep.durability = {
        "variant": variant, "honoured": True, "settings": {**broker_settings, **driver_overrides},
        "replication": {"nodes": len(hosts), "factor": rep["factor"], "min_insync": rep["min_insync"],
                        **({"ensemble": rep["factor"], "write_quorum": rep["factor"], "ack_quorum": rep["min_insync"]}
                           if broker == "pulsar" else {})},
        "cluster": {**formed, "deploy_s": round(seconds, 1), "artifacts_s": round(shipped_s, 1),
                    **({"metrics_exporter": exporter} if exporter else {}),
                    "artifact": provenance, "deploy_mode": "install"},
        "note": f"{broker} {ep.version} as a {len(hosts)}-node cluster ({_replication_text(broker, rep)}); "
                "broker-side settings written to its configuration and the nodes restarted; client-side settings "
                "(acks, topic replication, queue type) applied by the driver"}
    heaps = {**DEFAULT_HEAPS_MB, **(env.settings.heaps_mb or {})}
    if broker == "kafka":  # the flags the scripts start the broker JVMs with (provenance)
        ep.jvm_options = merge([f"-Xms{heaps['kafka']}m", f"-Xmx{heaps['kafka']}m"], KAFKA_JVM, jvm_options or [])
    elif broker == "pulsar":
        ep.jvm_options = merge(_pulsar_heap(heaps["pulsar-broker"]), PULSAR_JVM, jvm_options or [])
    return ep


def _replication_text(broker: str, rep: dict[str, int]) -> str:
    """The cluster's replication defaults in the words of each broker (a driver may ask for other values)."""
    if broker == "kafka":
        return (f"default.replication.factor {rep['factor']}, min.insync.replicas {rep['min_insync']}; "
                "internal topics the same")
    if broker == "pulsar":
        return (f"managedLedgerDefault ensemble {rep['factor']}, write quorum {rep['factor']}, ack quorum "
                f"{rep['min_insync']}")
    return f"quorum queues replicated on all {rep['factor']} nodes, a majority confirming; classic queues unreplicated"


def _wait(env, what: str, names: list[str], script: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(names)
    by_name = {h.name: h for h in env.hosts()}
    while pending:
        pending = [n for n in pending if not by_name[n].sudo(
            f"bash {shlex.quote(_script(env, by_name[n], script))} status", timeout=30).ok]
        if pending and time.monotonic() > deadline:
            raise EnvironmentFailure(f"{what} not serving after {timeout_s:.0f} s on {', '.join(pending)}",
                                     pending[0])
        if pending:
            time.sleep(2)


def cluster_formed(env, ep: BrokerEndpoint, deadline: float) -> dict[str, Any]:
    """Proof that the nodes form one cluster, asked of the cluster itself (retried until ``deadline``):
    Kafka: every broker registered in the metadata; Pulsar: every broker active and every bookie
    registered; RabbitMQ: every node running in one cluster."""
    last: Exception | None = None
    while True:
        try:
            found = _ask_cluster(env, ep)
            if found["nodes_seen"] >= ep.nodes and found.get("bookies_seen", ep.nodes) >= ep.nodes:
                return found
            last = EnvironmentFailure(f"{ep.broker}: the cluster has not formed: {found['summary']}")
        except Exception as e:  # noqa: BLE001 - retried until the deadline, then named
            last = e
        if time.monotonic() > deadline:
            raise EnvironmentFailure(f"{ep.broker}: {ep.nodes} nodes started but no cluster of {ep.nodes} formed: "
                                     f"{last}") from last
        time.sleep(2)


def _ask_cluster(env, ep: BrokerEndpoint) -> dict[str, Any]:
    if ep.broker == "kafka":
        from ..machine.broker import kafka_cluster_info

        info = kafka_cluster_info(ep.bootstrap_servers or "", "brokerbench-deploy", 10_000)
        # DescribeCluster lists fenced brokers too (not serving): only the unfenced ones count
        ids = sorted(b.get("broker_id", b.get("node_id")) for b in info["brokers"] if not b.get("is_fenced"))
        return {"nodes_seen": len(ids), "broker_ids": ids, "controller_id": info.get("controller_id"),
                "cluster_id": info.get("cluster_id"),
                "summary": f"brokers {ids} registered, controller {info.get('controller_id')}"}
    if ep.broker == "pulsar":
        import urllib.request

        def get(path: str) -> Any:
            with urllib.request.urlopen(f"{ep.http_url}{path}", timeout=10) as r:
                return json.loads(r.read())

        brokers = get("/admin/v2/brokers/brokerbench")
        bookies = get("/admin/v2/bookies/all").get("bookies", [])
        return {"nodes_seen": len(brokers), "brokers": sorted(brokers), "bookies_seen": len(bookies),
                "bookies": sorted(b.get("bookieId", str(b)) for b in bookies),
                "summary": f"{len(brokers)} brokers active, {len(bookies)} bookies registered"}
    first = env.hosts("broker")[0]
    out = _step(env, first.name, SCRIPTS["rabbitmq"], "cluster-status", timeout=60)
    status = json.loads(out[out.index("{"):])
    running = sorted(status.get("running_nodes", []))
    version = _step(env, first.name, SCRIPTS["rabbitmq"], "version", timeout=60).strip().splitlines()[-1]
    return {"nodes_seen": len(running), "running_nodes": running, "version": version,
            "summary": f"{len(running)} nodes running: {', '.join(running)}"}


def health_installed(env, broker: str) -> dict[str, Any]:
    script = SCRIPTS[broker]
    for h in env.hosts("broker"):
        res = h.sudo(f"bash {shlex.quote(_script(env, h, script))} status", timeout=30)
        if not res.ok:
            raise EnvironmentFailure(f"{broker}: not serving on {h.name}: {(res.stderr or res.stdout).strip()[-300:]}",
                                     h.name)
    return {"broker": broker, "status": "serving", "nodes": len(env.hosts("broker"))}


def kill_node(env, broker: str, index: int) -> dict[str, Any]:
    """SIGKILL the ``index``-th broker node (every process of the broker on that host): the fault tests."""
    host = env.hosts("broker")[index]
    out = _step(env, host.name, SCRIPTS[broker], "kill", timeout=60)
    return {"host": host.name, "at": time.time(), "output": out.strip()}


def start_node(env, broker: str, index: int) -> dict[str, Any]:
    """Start the ``index``-th broker node again (after :func:`kill_node`) and wait until it serves."""
    host = env.hosts("broker")[index]
    _step(env, host.name, SCRIPTS[broker], "start", timeout=300)
    _wait(env, broker, [host.name], SCRIPTS[broker], float(env.settings.start_timeout_s or 300))
    return {"host": host.name, "at": time.time()}


def _stop(env, host, script: str, action: str = "stop") -> None:
    """``script stop`` (or ``retire``) on ``host`` where the script was ever put there (its process stops with
    SIGTERM, then SIGKILL after a grace); a failure is logged, not raised, and so is what it printed."""
    path = shlex.quote(_script(env, host, script))
    res = host.sudo(f"[ ! -f {path} ] || bash {path} {action}", timeout=300)
    if not res.ok:
        log.warning("[%s] %s %s: %s", host.name, script, action, (res.stderr or res.stdout).strip()[-300:])
    for line in (res.stdout.strip().splitlines() if res.ok else [])[-3:]:
        log.info("[%s] %s %s: %s", host.name, script, action, line)


def undeploy_installed(env, broker: str) -> None:
    """Stop every node (SIGTERM, then SIGKILL after a grace), then ZooKeeper where the broker had one."""
    by_name = {h.name: h for h in env.hosts("broker")}
    _each(list(by_name), lambda n: _stop(env, by_name[n], SCRIPTS[broker]))
    for h in env.hosts("metadata"):
        _stop(env, h, "zookeeper.sh")
